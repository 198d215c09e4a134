#!/usr/bin/env bash
# Runs every test: Rust unit and integration tests on SQLite and PostgreSQL, then the
# Playwright end-to-end tests in Debian's Chromium. Needs nothing but this repository.
#
# PostgreSQL: uses TEST_POSTGRES_URL when given; otherwise starts a private throw-away cluster
# and stops it afterwards. Under CI=true a PostgreSQL that cannot be started fails the run;
# elsewhere the PostgreSQL half is skipped with a visible line.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$ROOT/scripts/postgres.sh"

"$ROOT/scripts/setup.sh" --test
cd "$ROOT"

trap pg_stop EXIT
if [ -z "${TEST_POSTGRES_URL:-}" ]; then
  if pg_start; then
    log "PostgreSQL test cluster at $TEST_POSTGRES_URL"
  elif [ "${CI:-}" = "true" ]; then
    die "PostgreSQL could not be started under CI: $PG_SKIP_REASON"
  else
    echo "PostgreSQL tests skipped: $PG_SKIP_REASON"
    export TEST_POSTGRES_URL=""
  fi
fi

log "format and lints (server, tests and the browser bundle)"
cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
cargo fmt --check
cargo clippy --features ssr --all-targets -- -D warnings
cargo clippy --lib --target wasm32-unknown-unknown --no-default-features --features hydrate \
  --target-dir target/front -- -D warnings

log "Rust tests (SQLite and PostgreSQL)"
cargo test --all-targets

"$ROOT/scripts/build.sh"

log "end-to-end tests (Playwright, Chromium)"
# Two distinct free ports: the default server and one with an access token (LAN use).
read -r E2E_PORT E2E_LAN_PORT < <(python3 -c '
import socket
a, b = socket.socket(), socket.socket()
a.bind(("127.0.0.1", 0)); b.bind(("127.0.0.1", 0))
print(a.getsockname()[1], b.getsockname()[1])')
E2E_DATA_DIR=$(mktemp -d /tmp/turnstile-e2e.XXXXXX)
export E2E_PORT E2E_LAN_PORT E2E_DATA_DIR
(cd end2end && npx playwright test)
rm -rf "$E2E_DATA_DIR" "$E2E_DATA_DIR-lan"
