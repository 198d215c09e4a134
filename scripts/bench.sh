#!/usr/bin/env bash
# The benchmark harness (issue 11, shared targets in docs/performance.md): release builds, on
# SQLite and on a private PostgreSQL, each figure beside its same-run baseline and target.
# Writes target/bench/results.json ({"B1": {"sqlite": {...}, "postgres": {...}}, "B2": …}).
#
#   scripts/bench.sh           # full: B1 with 1,000 turns per session, B2/B5 with 10,000 tasks
#   scripts/bench.sh --quick   # 100 turns, 2,000 tasks; what CI runs, as a report (never gating)
#
# B1 benches/authority.rs · B2, B5 benches/scale.rs · B3, B4, B6 benches/server.rs (the release
# server process) · B7 here. Targets and the latest table: docs/performance.md.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$ROOT/scripts/postgres.sh"

quick=()
[ "${1:-}" = "--quick" ] && quick=(--quick)
"$ROOT/scripts/setup.sh" --test
cd "$ROOT"
out="$ROOT/target/bench"
mkdir -p "$out"

trap pg_stop EXIT
if [ -z "${TEST_POSTGRES_URL:-}" ]; then
  if pg_start; then
    log "PostgreSQL bench cluster at $TEST_POSTGRES_URL"
  else
    echo "PostgreSQL rows skipped: $PG_SKIP_REASON"
    export TEST_POSTGRES_URL=""
  fi
fi

log "B1: the authority's cost with history (release build)"
cargo bench --bench authority -- "${quick[@]}" --json "$out/B1.json"

log "B2, B5: the task list and start-up at scale (release build)"
cargo bench --bench scale -- "${quick[@]}" --json "$out/scale.json"

log "B3, B4, B6: round trips, fan-out and memory of the release server process"
cargo bench --bench server -- "${quick[@]}" --json "$out/server.json"

log "B7: the browser bundle (release wasm, wasm-opt -Oz, gzip -9)"
cargo build --lib --target wasm32-unknown-unknown --no-default-features --features hydrate \
  --target-dir target/front --profile wasm-release
wasm-bindgen --target web --no-typescript --out-dir "$out/pkg" --out-name "$APP_NAME" \
  "target/front/wasm32-unknown-unknown/wasm-release/$APP_NAME.wasm"
wasm="$out/pkg/${APP_NAME}_bg.wasm"
end2end/node_modules/.bin/wasm-opt -Oz "$wasm" -o "$wasm"
raw=$(wc -c <"$wasm")
gz=$(gzip -9 -c "$wasm" | wc -c)
printf '{"wasm_bytes": %d, "gzip_bytes": %d, "target_gzip_bytes": 409600, "pass": %s}\n' \
  "$raw" "$gz" "$([ "$gz" -le 409600 ] && echo true || echo false)" >"$out/B7.json"
echo "| B7 | release wasm | $((raw / 1024)) KB | gzip $((gz / 1024)) KB | target ≤ 400 KB |"

python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
results = {b: json.loads((out / f"{b}.json").read_text()) for b in ("B1", "B7")}
for part in ("scale", "server"):
    results.update(json.loads((out / f"{part}.json").read_text()))
results = dict(sorted(results.items()))
(out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
print(f"wrote {out / 'results.json'}")
PY
