#!/usr/bin/env bash
# Runs the unit tests natively against the SDK's fake host (leasehold_guest::testing).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
exec cargo test "$@"
