#!/usr/bin/env bash
# The benchmark harness (targets in docs/performance.md): release builds, on
# SQLite and on a private PostgreSQL, each figure beside its same-run baseline and target.
# Writes target/bench/results.json ({"B1": {"sqlite": {...}, "postgres": {...}}, "B2": …}).
#
#   scripts/bench.sh           # full: B1 with 1,000 turns per session, B2/B5 with 10,000 tasks
#   scripts/bench.sh --quick   # 100 turns, 2,000 tasks; what CI runs, as a report (never gating)
#   … --docs                   # also rewrite the figures table of docs/performance.md
#
# B1 benches/authority.rs · B2, B5 benches/scale.rs · B3, B4, B6 benches/server.rs (the release
# server process) · B7 here. Targets and the latest table: docs/performance.md.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$ROOT/scripts/postgres.sh"

quick=()
docs=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=(--quick) ;;
    --docs) docs=1 ;;
    *) echo "unknown argument: $arg (use --quick, --docs)" >&2; exit 2 ;;
  esac
done
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

log "B7: the browser bundle (release build as shipped: split, wasm-opt -Oz, gzip -9)"
"$ROOT/scripts/build.sh" --release --bundle-only >&2
# The shell module, and for each page what its first load fetches: the shell, the page's chunk
# and the shared chunks the split loader lists for it (decision 0013).
python3 - "$SITE_ROOT/pkg" "$APP_NAME" >"$out/B7.json" <<'PY'
import gzip, json, pathlib, re, sys
pkg, app = pathlib.Path(sys.argv[1]), sys.argv[2]
gz = lambda f: len(gzip.compress((pkg / f).read_bytes(), 9))
main = gz(f"{app}_bg.wasm")
# The split loader lists, above each shared chunk, the split points that need it.
loader = (pkg / "__wasm_split.js").read_text()
users = {f"chunk_{n}.wasm": names.split(", ")
         for names, n in re.findall(r"/\* ([^*]*) \*/\s*const __chunk_(\d+)", loader)}
points = {re.sub(r"^__|_view$", "", re.sub(r"_\d+$", "", f.stem[len("split_"):])):
          (f.name, f.stem[len("split_"):]) for f in pkg.glob("split_*.wasm")}
def first_load(*names):
    files = set()
    for n in names:
        file, point = points[n]
        files |= {file} | {c for c, u in users.items() if point in u}
    return main + sum(gz(f) for f in files)
target = 460800
pages = {n: first_load(n) for n in points if n.endswith("_page") or n.endswith("_route")}
on_demand = {f"task_route + {n}": first_load("task_route", n)
             for n in points if n.endswith("_chunk")}
total = sum(gz(f.name) for f in pkg.glob("*.wasm"))
print(json.dumps({"main_gzip_bytes": main, "pages_first_load_gzip_bytes": pages,
                  "with_on_demand_parts_gzip_bytes": on_demand, "all_modules_gzip_bytes": total,
                  "target_gzip_bytes": target,
                  # Every page's first load, and the task page with each on-demand part shown.
                  "pass": max([*pages.values(), *on_demand.values()]) <= target}))
PY
python3 - "$out/B7.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
kb = lambda n: f"{n / 1024:.0f} KB"
ok = lambda n: "✓" if n <= b["target_gzip_bytes"] else "✗"
print(f"| B7 | shell module | gzip {kb(b['main_gzip_bytes'])} | all modules {kb(b['all_modules_gzip_bytes'])} | ≤ 450 KB per page's first load, on-demand parts included |")
for name, n in b["pages_first_load_gzip_bytes"].items():
    print(f"| B7 | first load of {name} | gzip {kb(n)} | | {ok(n)} |")
for name, n in b["with_on_demand_parts_gzip_bytes"].items():
    print(f"| B7 | {name} (fetched when shown) | gzip {kb(n)} | | {ok(n)} |")
PY

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
python3 "$ROOT/scripts/perf_table.py" "$out/results.json" | tee "$out/results.md"
if [ "$docs" = 1 ]; then
  python3 "$ROOT/scripts/perf_table.py" "$out/results.json" --update "$ROOT/docs/performance.md"
fi
