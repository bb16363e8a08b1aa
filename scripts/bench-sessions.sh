#!/usr/bin/env bash
# Measures end-to-end latency of the session tools with the built binaries:
#   1. median of `delta-sessions exec <id> true` (one CLI process per exec);
#   2. median of PTY `write` (`echo`-style input to `cat`) followed by `read --timeout`
#      that returns as soon as the echo arrives (two CLI processes per iteration).
# Usage: scripts/bench-sessions.sh [ITERATIONS] [BIN_DIR]   (defaults: 50, target/release)
# Works in a private temp folder and ends every session it starts.
set -euo pipefail

iterations=${1:-50}
bin_dir=${2:-target/release}
sessions=$(realpath "$bin_dir/delta-sessions")
pty=$(realpath "$bin_dir/delta-sessions-pty")
work=$(mktemp -d)
export XDG_RUNTIME_DIR="$work/xdg"
mkdir -p "$XDG_RUNTIME_DIR"
unset DELTA_SESSIONS_DIR DELTA_SESSIONS_PTY_DIR
cd "$work"

shell_id=
pty_id=
finish() {
  [[ -n $pty_id ]] && "$pty" end "$pty_id" >/dev/null 2>&1 || true
  [[ -n $shell_id ]] && "$sessions" end "$shell_id" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap finish EXIT

json_field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }

# Prints the median of the numbers (milliseconds) on stdin.
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

now_us() { local t=${EPOCHREALTIME/./}; echo "$t"; }

shell_id=$("$sessions" start | json_field session_id)
"$sessions" exec "$shell_id" true >/dev/null # warm-up
for ((i = 0; i < iterations; i++)); do
  start=$(now_us)
  "$sessions" exec "$shell_id" true >/dev/null
  end=$(now_us)
  awk -v d=$((end - start)) 'BEGIN { printf "%.3f\n", d / 1000 }'
done >"$work/exec.ms"

pty_id=$("$pty" start cat | json_field session_id)
for ((i = 0; i < iterations; i++)); do
  start=$(now_us)
  printf 'ping%d\\n' "$i" | "$pty" write "$pty_id" >/dev/null
  echo_seen=$("$pty" read "$pty_id" --timeout 2000)
  end=$(now_us)
  [[ $echo_seen == *ping* ]] || { echo "iteration $i: echo not seen: $echo_seen" >&2; exit 1; }
  "$pty" read "$pty_id" --timeout 20 >/dev/null # drain cat's own copy of the line
  awk -v d=$((end - start)) 'BEGIN { printf "%.3f\n", d / 1000 }'
done >"$work/pty.ms"

echo "iterations: $iterations (binaries: $bin_dir)"
echo "delta-sessions exec <id> true        median $(median <"$work/exec.ms") ms"
echo "delta-sessions-pty write -> read echo median $(median <"$work/pty.ms") ms"
