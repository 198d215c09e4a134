#!/usr/bin/env bash
# Runs every test: Rust unit and integration tests on SQLite and PostgreSQL, then the
# Playwright end-to-end tests in Debian's Chromium. Needs nothing but this repository.
#
# PostgreSQL: uses TEST_POSTGRES_URL when given; otherwise starts a private throw-away cluster
# and stops it afterwards. A PostgreSQL that cannot be started fails the run, unless
# TURNSTILE_SKIP_POSTGRES=1: then the PostgreSQL halves are skipped and the run ends by saying
# how many.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$ROOT/scripts/postgres.sh"

"$ROOT/scripts/setup.sh" --test
cd "$ROOT"

trap pg_stop EXIT
if [ -z "${TEST_POSTGRES_URL:-}" ]; then
  if [ "${TURNSTILE_SKIP_POSTGRES:-}" = 1 ]; then
    log "PostgreSQL halves skipped: TURNSTILE_SKIP_POSTGRES=1"
    export TEST_POSTGRES_URL=""
  elif pg_start; then
    log "PostgreSQL test cluster at $TEST_POSTGRES_URL"
  else
    die "PostgreSQL could not be started ($PG_SKIP_REASON); TURNSTILE_SKIP_POSTGRES=1 runs the SQLite half only"
  fi
fi
TURNSTILE_SKIPPED_LOG=$(mktemp /tmp/turnstile-skipped.XXXXXX)
export TURNSTILE_SKIPPED_LOG
skipped_report() {
  local n
  n=$(wc -l <"$TURNSTILE_SKIPPED_LOG")
  if [ "${TURNSTILE_SKIP_POSTGRES:-}" = 1 ]; then
    echo "PostgreSQL: $n tests skipped their PostgreSQL half (TURNSTILE_SKIP_POSTGRES=1)"
  fi
  rm -f "$TURNSTILE_SKIPPED_LOG"
}

log "format and lints (server, tests and the browser bundle)"
cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
cargo fmt --check
cargo clippy --features ssr --all-targets -- -D warnings
# The server as users build it: without the test seams (decision 0042).
cargo clippy --features ssr --lib --bins -- -D warnings
cargo clippy --lib --target wasm32-unknown-unknown --no-default-features --features hydrate \
  --target-dir target/front -- -D warnings

log "Rust tests (SQLite and PostgreSQL)"
cargo test --all-targets
skipped_report

"$ROOT/scripts/build.sh"
# Built without the `test-hooks` feature, as users get it: no failpoint may be in it.
"$ROOT/scripts/no_test_seams.sh" target/debug/turnstile

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

log "the release binary, installed with cargo install and run elsewhere (Playwright)"
"$ROOT/scripts/build.sh" --release
"$ROOT/scripts/no_test_seams.sh" target/release/turnstile
# `cargo install --path .` as the README says, on the release build just made (same target
# directory and revision: nothing is compiled again).
INSTALL_ROOT=$(mktemp -d /tmp/turnstile-install.XXXXXX)
TURNSTILE_GIT_REVISION="$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)" \
  cargo install --path "$ROOT" --locked --target-dir "$ROOT/target" --root "$INSTALL_ROOT" \
  --bin "$APP_NAME" --bin mock_agent
# (The suite's configuration starts its debug servers for this project too.)
E2E_DATA_DIR=$(mktemp -d /tmp/turnstile-e2e.XXXXXX)
(cd end2end && E2E_RELEASE_BINARY="$INSTALL_ROOT/bin/$APP_NAME" E2E_SITE_ROOT="$SITE_ROOT" \
  npx playwright test --project release)
rm -rf "$INSTALL_ROOT" "$E2E_DATA_DIR" "$E2E_DATA_DIR-lan"
