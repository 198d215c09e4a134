#!/usr/bin/env bash
# Runs Turnstile on the embedded default: SQLite under ./data, http://127.0.0.1:3000, the mock
# agent available. Open the login link it prints (the access token is in ./data/access-token).
# Extra arguments go to the server (see `target/debug/turnstile --help`).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
cd "$ROOT"
export LEPTOS_OUTPUT_NAME="$APP_NAME" LEPTOS_SITE_ROOT="$SITE_ROOT"
# The server's start-up line says where it listens and gives a one-time login link.
exec "$ROOT/target/debug/$APP_NAME" "$@"
