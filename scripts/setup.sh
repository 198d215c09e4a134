#!/usr/bin/env bash
# Installs what building, running and testing need, offline except the package registries
# (crates.io, Debian, npm, PyPI). Idempotent: every step is skipped when already satisfied.
#   scripts/setup.sh                     build + run prerequisites
#   scripts/setup.sh --test              also Chromium, PostgreSQL, the Playwright packages and
#                                        the official ACP SDK's test virtualenv
#   scripts/setup.sh --with-cargo-leptos also cargo-leptos (optional; 40–60 min cold build)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

want_test=0
want_cargo_leptos=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    --with-cargo-leptos) want_cargo_leptos=1 ;;
    *) die "unknown option $arg" ;;
  esac
done

apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then
    log "apt-get update"
    apt-get update -qq
    apt_updated=1
  fi
  log "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

command -v cargo >/dev/null || die "cargo is missing: install Rust with rustup first"

# The release build stores each file of the browser bundle brotli-compressed too.
if ! command -v brotli >/dev/null; then
  apt_install brotli
fi

# The toolchain and wasm target come from rust-toolchain.toml; make sure they are installed.
if ! (cd "$ROOT" && rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown); then
  log "installing the wasm32-unknown-unknown target"
  (cd "$ROOT" && rustup target add wasm32-unknown-unknown)
fi

if ! command -v wasm-bindgen >/dev/null || [ "$(wasm-bindgen --version | awk '{print $2}')" != "$WASM_BINDGEN_VERSION" ]; then
  log "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION (7–15 min the first time)"
  # Not --locked: the published lock pins a webpki-roots version that is no longer in the registry.
  cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --force
fi

if ! command -v wasm-split-cli >/dev/null \
   || ! grep -qs "wasm_split_cli_support $WASM_SPLIT_VERSION " "$HOME/.cargo/.crates.toml"; then
  log "installing wasm-split-cli $WASM_SPLIT_VERSION (2–4 min the first time)"
  cargo install wasm_split_cli_support --version "$WASM_SPLIT_VERSION" --locked \
    --features build-binary --force
fi

if [ "$want_cargo_leptos" = 1 ] && ! command -v cargo-leptos >/dev/null; then
  log "installing cargo-leptos 0.3.7 without downloads (40–60 min the first time)"
  cargo install cargo-leptos --version 0.3.7 --locked --features no_downloads
fi

if [ "$want_test" = 1 ]; then
  if ! command -v chromium >/dev/null; then
    apt_install chromium
  fi
  if ! [ -x /usr/lib/postgresql/15/bin/initdb ]; then
    apt_install postgresql-15
  fi
  if ! command -v npm >/dev/null; then
    apt_install nodejs npm
  fi
  if ! [ -x "$ROOT/end2end/node_modules/.bin/playwright" ] \
     || ! cmp -s "$ROOT/end2end/package-lock.json" "$ROOT/end2end/node_modules/.package-lock.json.installed"; then
    log "installing the end-to-end test packages (no browser download)"
    (cd "$ROOT/end2end" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund >/dev/null)
    cp "$ROOT/end2end/package-lock.json" "$ROOT/end2end/node_modules/.package-lock.json.installed"
  fi
  # The test agent written on the official ACP SDK (tests/agents) runs in a virtualenv of its
  # own, from PyPI.
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    apt_install python3-venv
  fi
  "$ROOT/scripts/acp-venv.sh"
fi
