// `node --import ./test/register.mjs`: resolves the host's interfaces to the fakes of
// fake-host.js, so that the unit tests can import the plugin natively.
import { register } from 'node:module';

register('./hooks.mjs', import.meta.url);
