// Module-resolution hook (node:module register, Node 20.6+): every `leasehold:plugin/NAME@0.1.0`
// import is fake-host.js, one module for all of them, so that a test sees what the plugin did.
const FAKE_HOST = new URL('./fake-host.js', import.meta.url).href;

export async function resolve(specifier, context, nextResolve) {
  if (/^leasehold:plugin\/[a-z-]+@0\.1\.0$/.test(specifier)) {
    return { url: FAKE_HOST, shortCircuit: true };
  }
  return nextResolve(specifier, context);
}
