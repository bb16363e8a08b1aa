#!/usr/bin/env bash
# Starts (`up`) or stops (`down`) Arize Phoenix on 127.0.0.1 for the trace-export tests: an
# OpenTelemetry receiver (OTLP over HTTP at /v1/traces) with a UI and a REST API that lists a
# project's spans with their parents (GET /v1/projects/<name>/spans). It runs offline, its
# storage (SQLite) in a folder of its own that `down` removes.
#
#   scripts/phoenix-local.sh install  # installs what is missing (≈ 3 min and ≈ 850 MB the first
#                                     # time); callers at the same time wait for one another
#                                     # (CI starts it early, in the background)
#   scripts/phoenix-local.sh up       # installs what is missing, starts the server
#   scripts/phoenix-local.sh down     # stops the server it started, removes its storage
#   scripts/phoenix-local.sh status   # exit 0 when the server answers
#   scripts/phoenix-local.sh env      # the variables the tests read, as `export` lines
#
# Environment: DELTA_PHOENIX_VENV (default /opt/delta-phoenix-venv as root, else
# ~/.cache/delta/phoenix-venv) is the Python virtual environment it installs into (nothing is
# installed when Phoenix is there); DELTA_PHOENIX_DIR (default /tmp/delta-phoenix) holds the
# server's log, pid, storage and the `env` file; DELTA_PHOENIX_PORT (default 18096) is the
# HTTP port (UI, REST API, OTLP/HTTP), DELTA_PHOENIX_GRPC_PORT (default 18097) its OTLP/gRPC
# port, unused by delta but bound by Phoenix (on 127.0.0.1 too). Needs python3 with venv.
set -euo pipefail

if [ "$(id -u)" = "0" ]; then
  VENV="${DELTA_PHOENIX_VENV:-/opt/delta-phoenix-venv}"
else
  VENV="${DELTA_PHOENIX_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/delta/phoenix-venv}"
fi
DIR="${DELTA_PHOENIX_DIR:-/tmp/delta-phoenix}"
PORT="${DELTA_PHOENIX_PORT:-18096}"
GRPC_PORT="${DELTA_PHOENIX_GRPC_PORT:-18097}"
VERSION=20.26.1

die() { echo "phoenix-local: $*" >&2; exit 1; }

url() { echo "http://127.0.0.1:$PORT"; }

# /healthz answers once the server (and its database) is up.
answers() { curl -fsS -m 2 "$(url)/healthz" >/dev/null 2>&1; }

installed() {
  [ -x "$VENV/bin/phoenix" ] &&
    "$VENV/bin/python" -c 'import phoenix.server' >/dev/null 2>&1
}

# Installs unless installed; one install at a time (the others wait for it, then find it done).
install() {
  mkdir -p "$DIR"
  exec 9>"$DIR/install.lock"
  flock 9
  installed || install_now
  flock -u 9
}

install_now() {
  command -v python3 >/dev/null 2>&1 || die "python3 not found (apt-get install -y python3 python3-venv)"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" || die "cannot create the virtual environment $VENV (apt-get install -y python3-venv)"
  echo "phoenix-local: installing arize-phoenix $VERSION into $VENV (about 3 minutes, 850 MB)" >&2
  "$VENV/bin/pip" install -q "arize-phoenix==$VERSION" ||
    die "pip could not install arize-phoenix $VERSION"
}

write_env() {
  mkdir -p "$DIR"
  {
    echo "export DELTA_PHOENIX_URL=$(url)"
    echo "export DELTA_PHOENIX_OTLP_ENDPOINT=$(url)"
  } >"$DIR/env"
}

up() {
  install
  write_env
  if answers; then
    return 0
  fi
  mkdir -p "$DIR/data"
  # Offline and on loopback: no telemetry of its own, no login, storage in $DIR/data.
  PHOENIX_HOST=127.0.0.1 PHOENIX_PORT="$PORT" PHOENIX_GRPC_PORT="$GRPC_PORT" \
    PHOENIX_WORKING_DIR="$DIR/data" PHOENIX_TELEMETRY_ENABLED=false \
    setsid "$VENV/bin/phoenix" serve >"$DIR/server.log" 2>&1 &
  echo $! >"$DIR/pid"
  for _ in $(seq 1 240); do
    answers && return 0
    kill -0 "$(cat "$DIR/pid")" 2>/dev/null || die "the server exited; see $DIR/server.log"
    sleep 0.5
  done
  die "the server did not answer on $(url) within 120 s; see $DIR/server.log"
}

down() {
  if [ -f "$DIR/pid" ]; then
    # setsid made it a group leader: its workers go with it.
    kill -- "-$(cat "$DIR/pid")" 2>/dev/null || kill "$(cat "$DIR/pid")" 2>/dev/null || true
    rm -f "$DIR/pid"
  fi
  rm -rf "$DIR/data"
}

case "${1:-}" in
  install) install ;;
  up) up; echo "phoenix-local: Phoenix answers on $(url)" >&2 ;;
  down) down ;;
  status) answers ;;
  env) installed || die "not installed: run scripts/phoenix-local.sh up"; write_env; cat "$DIR/env" ;;
  *) die "usage: scripts/phoenix-local.sh install|up|down|status|env" ;;
esac
