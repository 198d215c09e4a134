#!/usr/bin/env python3
"""The figures table of docs/performance.md, made from the harness's results.json.

    scripts/perf_table.py target/bench/results.json            # print the table
    scripts/perf_table.py target/bench/results.json --update docs/performance.md

`--update` replaces what stands between the `<!-- results:begin -->` and
`<!-- results:end -->` lines of that file, and nothing else.
"""
import json
import sys
from pathlib import Path

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def mark(ok):
    return "✓" if ok else "✗"


def f(x, digits=1):
    return "—" if x is None else f"{x:,.{digits}f}"


def rows(r):
    yield "| id | database | measured | baseline (same run) | target |"
    yield "|---|---|---|---|---|"
    for db, queries in r.get("B1", {}).items():
        for q, v in queries.items():
            if v.get("target_ratio") is None:
                continue
            yield (f"| B1 | {db} | `{q}` at {v['history_turns']:,} turns: {f(v['history_ms'], 3)} ms "
                   f"| 1 turn: {f(v['one_turn_ms'], 3)} ms (×{v['ratio']:.2f}) | ×1.3 {mark(v['pass'])} |")
    for db, v in r.get("B2", {}).items():
        yield (f"| B2 | {db} | task list, {v['tasks']:,} tasks: p50 {f(v['p50_ms'], 2)} ms "
               f"| bare SELECT {f(v['bare_ms'], 2)} ms (×{v['p50_ms'] / v['bare_ms']:.1f}) "
               f"| < 50 ms, ×3 {mark(v['pass'])} |")
    for db, v in r.get("B3", {}).items():
        writer = v.get("writer") or {}
        uses = f"; write connection {f(writer.get('uses_per_round_trip'))}× per round trip" if writer else ""
        p = v["paced"]
        sqlite = db == "sqlite"
        at_once = f"≥ 500/s {mark(v['per_second'] >= 500)}" if sqlite else "reported"
        paced = f"p99 < 20 ms {mark(p['per_second'] >= 0.95 * p['offered_per_second'] and p['p99_ms'] < 20)}" if sqlite else "reported"
        yield (f"| B3 | {db} | 50 agents, at once: {f(v['per_second'], 0)}/s, p99 {f(v['p99_ms'])} ms{uses} "
               f"| 1 agent {f(v['one_agent_per_second'], 0)}/s | {at_once} |")
        yield (f"| B3 | {db} | paced to {f(p['offered_per_second'], 0)}/s: {f(p['per_second'], 0)}/s, "
               f"p50 {f(p['p50_ms'])} ms, p99 {f(p['p99_ms'])} ms | — | {paced} |")
    for db, v in r.get("B4", {}).items():
        yield (f"| B4 | {db} | {v['clients']} clients, {v['received']} received: p99 {f(v['p99_ms'])} ms "
               f"| one client {f(v['one_client_ms'])} ms | p99 < 50 ms, none missed {mark(v['pass'])} |")
    for db, v in r.get("B5", {}).items():
        yield (f"| B5 | {db} | start-up, {v['tasks']:,} stale summaries: {f(v['stale_boot_ms'], 0)} ms, "
               f"{v['left_stale']} left stale | fresh {f(v['fresh_boot_ms'], 0)} ms | < 2 s {mark(v['pass'])} |")
    for db, v in r.get("B6", {}).items():
        yield (f"| B6 | {db} | idle {f(v['idle_mb'])} MB, under B4 {f(v['under_b4_mb'])} MB, "
               f"after {v['round_trips_after_b3']:,} more round trips and as many again "
               f"{f(v['after_more_round_trips_mb'])} / {f(v['after_twice_as_many_mb'])} MB "
               f"| empty {f(v['empty_mb'])} MB | < 60, < 150, flat {mark(v['pass'])} |")
    b7 = r.get("B7")
    if b7:
        worst = max([*b7["pages_first_load_gzip_bytes"].values(),
                     *b7["with_on_demand_parts_gzip_bytes"].values()])
        yield (f"| B7 | — | largest first load {worst / 1024:.0f} KB gz (shell {b7['main_gzip_bytes'] / 1024:.0f} KB) "
               f"| — | ≤ {b7['target_gzip_bytes'] / 1024:.0f} KB {mark(b7['pass'])} |")


def main():
    results = json.loads(Path(sys.argv[1]).read_text())
    table = "\n".join(rows(results))
    if len(sys.argv) == 4 and sys.argv[2] == "--update":
        doc = Path(sys.argv[3])
        text = doc.read_text()
        if BEGIN not in text or END not in text:
            sys.exit(f"{doc} has no {BEGIN} … {END} block")
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        doc.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}")
        print(f"updated {doc}")
    else:
        print(table)


if __name__ == "__main__":
    main()
