#!/usr/bin/env bash
# Runs Turnstile on the embedded default: SQLite under ./data, http://127.0.0.1:3000, the mock
# agent available. Extra arguments go to the server (see `target/debug/turnstile --help`).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
cd "$ROOT"
export LEPTOS_OUTPUT_NAME="$APP_NAME" LEPTOS_SITE_ROOT="$SITE_ROOT"
log "serving on http://${LEPTOS_SITE_ADDR:-127.0.0.1:3000}"
exec "$ROOT/target/debug/$APP_NAME" "$@"
