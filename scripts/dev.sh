#!/usr/bin/env bash
# scripts/run.sh with the debug build: quicker to rebuild while working on Turnstile. Its site
# is read from target/site at each request. Extra arguments go to the server.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
cd "$ROOT"
exec "$ROOT/target/debug/$APP_NAME" "$@"
