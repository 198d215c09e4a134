#!/usr/bin/env bash
# Runs Turnstile as users get it — the release build, its site built in — on the embedded
# default: SQLite under ./data, http://127.0.0.1:3000, the mock agent available. Open the login
# link it prints, with the address the server bound (the access token is in
# ./data/access-token). Extra arguments go to the server (`target/release/turnstile --help`).
# scripts/dev.sh runs the debug build instead (faster to rebuild).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh" --release
cd "$ROOT"
# The server's start-up line says where it listens and gives a one-time login link.
exec "$ROOT/target/release/$APP_NAME" "$@"
