#!/usr/bin/env bash
# Builds the site the way cargo-leptos would, with plain cargo + wasm-bindgen
# (docs/decisions/0001-build-without-cargo-leptos.md):
#   1. the browser library (hydrate) for wasm32 into target/front
#   2. wasm-bindgen into target/site/pkg
#   3. CSS and public/ into target/site
#   4. the server binaries (ssr) into target/debug (or target/release with --release)
#
#   scripts/build.sh [--release] [--bundle-only]
# --bundle-only stops after step 3 (the benchmark's B7 measures the bundle alone, and the
# server's release build beside `cargo bench`'s would recompile the crate every run).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

profile=debug
cargo_profile=()
wasm_profile=()
bundle_only=0
for arg in "$@"; do
  case "$arg" in
    --release)
      profile=release
      cargo_profile=(--release)
      wasm_profile=(--profile wasm-release)
      ;;
    --bundle-only) bundle_only=1 ;;
    *) die "unknown option $arg" ;;
  esac
done
wasm_dir=$([ "$profile" = release ] && echo wasm-release || echo debug)

cd "$ROOT"
log "building the browser bundle ($profile)"
# --emit-relocs keeps the relocations wasm-split needs to move each page into its own chunk
# (docs/decisions/0013-browser-bundle-size.md); only the final link gets it.
cargo rustc --lib --crate-type cdylib --target wasm32-unknown-unknown --no-default-features \
  --features hydrate --target-dir target/front "${wasm_profile[@]}" -- -C link-arg=--emit-relocs
split_dir=target/front/split
rm -rf "$split_dir" "$SITE_ROOT/pkg"
mkdir -p "$split_dir" "$SITE_ROOT/pkg"
wasm-split-cli "target/front/wasm32-unknown-unknown/$wasm_dir/$APP_NAME.wasm" "$split_dir" \
  --target web --out-name "$APP_NAME"
# The main module keeps the exports the chunks link against (as cargo-leptos --split does).
wasm-bindgen --target web --no-typescript --keep-lld-exports --out-dir "$SITE_ROOT/pkg" \
  --out-name "$APP_NAME" "$split_dir/$APP_NAME.wasm"
find "$split_dir" -maxdepth 1 -type f ! -name "$APP_NAME.wasm" -exec cp {} "$SITE_ROOT/pkg/" \;
if [ "$profile" = release ] && [ -x end2end/node_modules/.bin/wasm-opt ]; then
  # binaryen from npm; never Debian's binaryen 108 (breaks hydration, see design/toolchain.md).
  # After splitting, each module on its own (optimizing first would drop the relocations).
  for wasm in "$SITE_ROOT/pkg/"*.wasm; do
    end2end/node_modules/.bin/wasm-opt -Oz "$wasm" -o "$wasm"
  done
fi
cp style/main.css "$SITE_ROOT/pkg/$APP_NAME.css"
cp -r public/. "$SITE_ROOT/"
if [ "$profile" = release ]; then
  # Each file of the bundle also as .br and .gz at the best ratio, served as they are to
  # browsers that accept them (docs/decisions/0050-the-site-inside-the-binary.md).
  command -v brotli >/dev/null || die "brotli is missing: run scripts/setup.sh"
  for file in "$SITE_ROOT/pkg/"*.wasm "$SITE_ROOT/pkg/"*.js "$SITE_ROOT/pkg/"*.css; do
    brotli --best --force --keep "$file"
    gzip -9 --no-name --force --keep "$file"
  done
fi

[ "$bundle_only" = 1 ] && exit 0

log "building the server ($profile)"
# `turnstile --version` names the revision it was built from.
TURNSTILE_GIT_REVISION="$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
export TURNSTILE_GIT_REVISION
cargo build --bins "${cargo_profile[@]}"
