#!/usr/bin/env bash
# Measures every figure of the "Current figures" table at the top of BENCHMARKS.md and writes
# its JSON report into docs/bench/current/ (the table quotes these files; the test
# `bench_docs::the_current_table_matches_its_json_reports` checks that it still does).
#
#   scripts/bench-current.sh                 # every workload (≈ 5 min on 2 CPUs)
#   scripts/bench-current.sh load-1000-stream serve   # only these (names below)
#   DELTA_BIN=/path/to/delta scripts/bench-current.sh  # measure another build
#
# Measure on a quiet machine: the figures are CPU seconds and wall times, and every other
# job on the CPUs shows in them. Each load point runs in a fresh folder kept until the end
# (ext4 slows file creation for minutes after a mass deletion: BENCHMARKS.md, "Filesystem").
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=docs/bench/current
want() { [ ${#SELECTED[@]} -eq 0 ] || [[ " ${SELECTED[*]} " == *" $1 "* ]]; }
SELECTED=("$@")
NAMES="single-run overhead-200-events load-1000-stream load-1000-unstreamed load-10000 baseline-50 serve serve-batch installed-size spawn-sandbox load-1000-sandboxed"
for name in "${SELECTED[@]}"; do
  [[ " $NAMES " == *" $name "* ]] || { echo "bench-current.sh: unknown workload '$name' (one of: $NAMES)" >&2; exit 2; }
done
mkdir -p "$OUT"
if [ -z "${DELTA_BIN:-}" ]; then
  cargo build --release --bins --features bench
  DELTA_BIN=target/release/delta
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/delta-bench-current.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

load() { # name, then `delta bench load` arguments
  local name="$1"
  shift
  echo "== $name: delta bench load $*" >&2
  "$DELTA_BIN" bench load "$@" --work-dir "$WORK/$name" --keep --format json --out "$OUT/$name.json" >/dev/null
}

want single-run && load single-run --runs 1 --max-parallel 1 --calls 6 --latency-ms 0
want overhead-200-events && load overhead-200-events --runs 10 --max-parallel 1 --calls 67 --latency-ms 0
want load-1000-stream && load load-1000-stream --runs 1000 --max-parallel 1000 --calls 6 --latency-ms 200 --stream on
want load-1000-unstreamed && load load-1000-unstreamed --runs 1000 --max-parallel 1000 --calls 6 --latency-ms 200 --stream off
want load-10000 && load load-10000 --runs 10000 --max-parallel 10000 --calls 6 --latency-ms 200
want baseline-50 && load baseline-50 --runs 50 --max-parallel 50 --calls 6 --latency-ms 200 --baseline process-per-run
if want spawn-sandbox; then
  echo "== spawn-sandbox: delta bench spawn --sandbox --spawns 2000" >&2
  "$DELTA_BIN" bench spawn --sandbox --spawns 2000 --format json >"$OUT/spawn-sandbox.json"
fi
if want load-1000-sandboxed; then
  DELTA_SANDBOX=workspace-write load load-1000-sandboxed --runs 1000 --max-parallel 1000 --calls 6 --latency-ms 200
fi
if want serve; then
  echo "== serve: delta bench serve --workers 50 --viewers 3 --bytes 1048576" >&2
  "$DELTA_BIN" bench serve --workers 50 --viewers 3 --bytes 1048576 --format json >"$OUT/serve.json"
fi
if want serve-batch; then
  echo "== serve-batch: delta bench serve-batch --runs 10000" >&2
  "$DELTA_BIN" bench serve-batch --runs 10000 --work-dir "$WORK/serve-batch" --format json >"$OUT/serve-batch.json"
fi
if want installed-size; then
  echo "== installed-size: scripts/install.sh --prefix $WORK/prefix" >&2
  scripts/install.sh --prefix "$WORK/prefix" >&2
  size=$(stat -c %s "$WORK/prefix/bin/delta")
  debug=$(stat -c %s "$WORK/prefix/bin/.debug/delta.debug")
  built=$(stat -c %s target/release/delta)
  printf '{"installed_bytes": %s, "debug_file_bytes": %s, "release_build_bytes": %s}\n' \
    "$size" "$debug" "$built" >"$OUT/installed-size.json"
fi
echo "reports in $OUT/" >&2
