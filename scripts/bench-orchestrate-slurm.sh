#!/usr/bin/env bash
# benches/orchestrate-1000 under the local executor and under `--executor slurm` on the
# single-node cluster of scripts/slurm-local.sh: wall time, peak RSS of the orchestrating
# process, time from the orchestration's start to the first run's start, and what
# submitting cost per item (the sbatch calls' time, from the executor's log lines).
#
#   scripts/slurm-local.sh up && cargo build --release
#   scripts/bench-orchestrate-slurm.sh            # both executors, once each
#   EXECUTORS=slurm RUNS=3 scripts/bench-orchestrate-slurm.sh
#
# Each run gets a fresh workspace under ${BENCH_DIR:-/tmp} (removed afterwards unless KEEP=1).
set -euo pipefail
cd "$(dirname "$0")/.."
DELTA="${DELTA:-target/release/delta}"
EXECUTORS="${EXECUTORS:-local slurm}"
RUNS="${RUNS:-1}"
[ -x "$DELTA" ] || { echo "build first: cargo build --release" >&2; exit 2; }

for executor in $EXECUTORS; do
  for _ in $(seq 1 "$RUNS"); do
    ws="$(mktemp -d "${BENCH_DIR:-/tmp}/orchestrate-1000-$executor.XXXXXX")"
    extra=()
    [ "$executor" = slurm ] && extra=(--executor slurm --relay-listen 127.0.0.1:0)
    /usr/bin/time -f "%e %M %U %S" -o "$ws.time" "$DELTA" -v orchestrate \
      benches/orchestrate-1000/plan.yaml --llm-script benches/orchestrate-1000/llm-script.yaml \
      -w "$ws" --format json "${extra[@]}" >"$ws.json" 2>"$ws.err" || true
    python3 - "$executor" "$ws" <<'PY'
import json, re, sys, glob, os
from datetime import datetime
executor, ws = sys.argv[1], sys.argv[2]
summary = json.load(open(ws + ".json"))
wall, rss_kb, user, sys_cpu = open(ws + ".time").read().split()[-4:]
started = datetime.fromisoformat(summary["started_at"].replace("Z", "+00:00")).timestamp()
starts = []
for meta in glob.glob(os.path.join(ws, ".delta", "*", "metadata.json")):
    m = json.load(open(meta))
    starts.append(m["start_time_unix"] / 1000)
first = min(starts) - started if starts else float("nan")
sbatch_ms, items = 0, 0
for line in open(ws + ".err"):
    found = re.search(r"submitted (\d+) run\(s\) of stage \S+ as Slurm job \S+ in (\d+) ms", line)
    if found:
        items += int(found.group(1)); sbatch_ms += int(found.group(2))
per_item = f"{sbatch_ms / items:.2f} ms ({sbatch_ms} ms for {items} items)" if items else "-"
print(f"{executor}: {summary['status']} {summary['totals']['completed']}/{summary['totals']['total']}, "
      f"wall {wall} s, peak RSS {int(rss_kb) // 1024} MiB, CPU {user} user {sys_cpu} sys, "
      f"first run started after {first:.2f} s, submission {per_item}")
PY
    [ "${KEEP:-0}" = 1 ] || rm -rf "$ws" "$ws.json" "$ws.err" "$ws.time"
  done
done
