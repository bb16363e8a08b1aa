#!/usr/bin/env python3
"""Prints the rows of BENCHMARKS.md's "Current figures" table from docs/bench/current/*.json
(written by scripts/bench-current.sh), formatted as the test
`bench_docs::the_current_table_matches_its_json_reports` reads them. Paste them under the
table's header."""
import json
import os

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "bench", "current")


def report(name):
    with open(os.path.join(HERE, name + ".json")) as f:
        return json.load(f)


def link(name):
    return f"[current/{name}.json](docs/bench/current/{name}.json)"


def mib(b):
    return f"{b / 1048576:.0f} MiB"


rows = []
single = report("single-run")["points"][0]
rows.append(("one run of 6 model calls and 5 tools, no model latency (issue 3: a few ms)",
             "`delta bench load --runs 1 --max-parallel 1 --calls 6 --latency-ms 0`",
             f"{single['wall_s'] * 1000:.1f} ms wall", "single-run"))
o = report("overhead-200-events")["points"][0]
p = o["engine_overhead_per_iteration_ms"]
rows.append(("engine overhead per iteration, one run at a time, 200-event journal: ≤ 1 ms p50",
             "`delta bench load --runs 10 --max-parallel 1 --calls 67 --latency-ms 0`",
             f"p50 {p['p50']:.2f} ms, p99 {p['p99']:.2f} ms", "overhead-200-events"))
s = report("load-1000-stream")["points"][0]
u = report("load-1000-unstreamed")["points"][0]
rows.append(("1,000 runs @ 1,000, streamed (the default): ≤ 10 s wall, ≤ 300 MiB",
             "`delta bench load --runs 1000 --max-parallel 1000 --calls 6 --latency-ms 200 --stream on`",
             f"{s['wall_s']:.2f} s, {mib(s['peak_rss_bytes'])}, engine CPU {s['engine_cpu_per_iteration_ms']:.3f} ms per iteration",
             "load-1000-stream"))
rows.append(("1,000 runs @ 1,000, unstreamed",
             "the same with `--stream off`",
             f"{u['wall_s']:.2f} s, {mib(u['peak_rss_bytes'])}, engine CPU {u['engine_cpu_per_iteration_ms']:.3f} ms per iteration",
             "load-1000-unstreamed"))
extra = s["engine_cpu_per_iteration_ms"] - u["engine_cpu_per_iteration_ms"]
rows.append(("streaming's extra engine CPU per iteration at 1,000 @ 1,000: ≤ 0.05 ms",
             "the two rows above",
             f"{extra:+.3f} ms", "load-1000-stream"))
t = report("load-10000")["points"][0]
rows.append(("10,000 runs @ 10,000 in one process: all complete, ≤ 2 GiB",
             "`delta bench load --runs 10000 --max-parallel 10000 --calls 6 --latency-ms 200`",
             f"{t['completed_runs']}/{t['runs']} completed, {mib(t['peak_rss_bytes'])}, {t['wall_s']:.1f} s, {t['peak_open_fds']} peak fds",
             "load-10000"))
b = report("baseline-50")
rows.append(("vs one `delta run` process per run @ 50/50: ≥ 20× less memory",
             "`delta bench load --runs 50 --max-parallel 50 --calls 6 --latency-ms 200 --baseline process-per-run`",
             f"{b['comparison']['memory_ratio']:.1f}× less memory, {b['comparison']['wall_ratio']:.1f}× wall",
             "baseline-50"))
v = report("serve")
rows.append(("`delta serve`: 50 terminal workers × 3 viewers, 1 MiB each; keystroke echo",
             "`delta bench serve --workers 50 --viewers 3 --bytes 1048576`",
             f"echo p99 {v['echo_p99_ms']:.2f} ms, {v['fanout_mib_per_s']:.0f} MiB/s fan-out, server {v['server_peak_rss_mib']:.0f} MiB",
             "serve"))
w = report("serve-batch")
paint = w.get("first_paint_cold_ms")
rows.append(("`delta serve` watching a 10,000-run orchestration: page ≤ 1 s, list requests ≤ 100 ms p99, ≤ 200 MiB",
             "`delta bench serve-batch --runs 10000`",
             (f"first paint {paint:.0f} ms, " if paint is not None else "no browser, ") +
             f"list p99 {w['list_p99_ms']:.1f} ms, server {w['server_peak_rss_mib']:.0f} MiB",
             "serve-batch"))
i = report("installed-size")
rows.append(("installed `delta` ≤ 25 MB, a panic still names file and line",
             "`scripts/install.sh` (stripped, line tables in `.debug/delta.debug`)",
             f"{i['installed_bytes'] / 1e6:.1f} MB (release build {i['release_build_bytes'] / 1e6:.0f} MB; debug file {i['debug_file_bytes'] / 1e6:.0f} MB)",
             "installed-size"))
for target, command, today, name in rows:
    print(f"| {target} | {command} | {today} | {link(name)} |")
