#!/usr/bin/env bash
# Runs a command with a throwaway PostgreSQL server (scripts/postgres.sh) in a temporary directory,
# its URL in DEPOT_TEST_STORE, and stops the server and removes the directory however the command ends.
#
#   scripts/with-postgres.sh make test-python
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/depot-pg-XXXXXX)
cleanup() {
    "$here/postgres.sh" stop "$dir" >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT
DEPOT_TEST_STORE=$("$here/postgres.sh" start "$dir" | tail -n 1)
export DEPOT_TEST_STORE
echo "PostgreSQL for the tests: $DEPOT_TEST_STORE"
"$@"
