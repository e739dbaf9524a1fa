#!/usr/bin/env bash
# Runs the unit tests natively (node's test runner), the host's interfaces faked by
# test/fake-host.js: the same as `npm test`, and needs no npm install.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
exec node --import ./test/register.mjs --test --test-reporter=spec test/{{name}}.test.js "$@"
