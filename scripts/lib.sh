# Shared by the scripts in this folder: paths, versions and small helpers. Sourced, not run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
APP_NAME=turnstile
# Must equal the wasm-bindgen version pinned in Cargo.toml (`=0.2.130`) and Cargo.lock.
WASM_BINDGEN_VERSION=0.2.130
# Splits the browser bundle into the shell and one chunk per page (decision 0013); 0.2.4 is the
# first that understands wasm-bindgen ≥ 0.2.128.
WASM_SPLIT_VERSION=0.2.4
SITE_ROOT="$ROOT/target/site"

export PATH="$HOME/.cargo/bin:$PATH"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
