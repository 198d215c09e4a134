#!/usr/bin/env bash
# Builds the site the way cargo-leptos would, with plain cargo + wasm-bindgen
# (docs/decisions/0001-build-without-cargo-leptos.md):
#   1. the browser library (hydrate) for wasm32 into target/front
#   2. wasm-bindgen into target/site/pkg
#   3. CSS and public/ into target/site
#   4. the server binaries (ssr) into target/debug (or target/release with --release)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

profile=debug
cargo_profile=()
wasm_profile=()
if [ "${1:-}" = "--release" ]; then
  profile=release
  cargo_profile=(--release)
  wasm_profile=(--profile wasm-release)
fi
wasm_dir=$([ "$profile" = release ] && echo wasm-release || echo debug)

cd "$ROOT"
log "building the browser bundle ($profile)"
cargo build --lib --target wasm32-unknown-unknown --no-default-features --features hydrate \
  --target-dir target/front "${wasm_profile[@]}"
mkdir -p "$SITE_ROOT/pkg"
wasm-bindgen --target web --no-typescript --out-dir "$SITE_ROOT/pkg" --out-name "$APP_NAME" \
  "target/front/wasm32-unknown-unknown/$wasm_dir/$APP_NAME.wasm"
if [ "$profile" = release ] && [ -x end2end/node_modules/.bin/wasm-opt ]; then
  # binaryen from npm; never Debian's binaryen 108 (breaks hydration, see design/toolchain.md).
  end2end/node_modules/.bin/wasm-opt -Oz "$SITE_ROOT/pkg/${APP_NAME}_bg.wasm" -o "$SITE_ROOT/pkg/${APP_NAME}_bg.wasm"
fi
cp style/main.css "$SITE_ROOT/pkg/$APP_NAME.css"
cp -r public/. "$SITE_ROOT/"

log "building the server ($profile)"
cargo build --bins "${cargo_profile[@]}"
