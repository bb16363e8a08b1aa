#!/usr/bin/env bash
# Installs the Model Context Protocol reference servers the MCP tests run against, from the
# npm registry, at the versions pinned in scripts/mcp/package-lock.json:
# @modelcontextprotocol/server-everything and @modelcontextprotocol/server-filesystem.
#
#   scripts/mcp-local.sh install   # idempotent: does nothing when the pinned versions are there
#   scripts/mcp-local.sh status    # exit 0 when both servers are installed
#   scripts/mcp-local.sh dir       # prints the folder whose node_modules/.bin holds them
#
# Environment: DELTA_MCP_SERVERS_DIR (default target/mcp-servers in this checkout) is where
# they are installed; the tests look there too (or where DELTA_MCP_SERVERS_DIR points).
# Needs node (>= 18) and npm: Debian's `nodejs` and `npm` packages.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="${DELTA_MCP_SERVERS_DIR:-$PWD/target/mcp-servers}"
BIN="$DIR/node_modules/.bin"

die() { echo "mcp-local: $*" >&2; exit 1; }

installed() {
  [ -x "$BIN/mcp-server-everything" ] && [ -x "$BIN/mcp-server-filesystem" ] &&
    cmp -s scripts/mcp/package-lock.json "$DIR/package-lock.json"
}

case "${1:-}" in
  install)
    if installed; then
      exit 0
    fi
    command -v node >/dev/null 2>&1 || die "node not found; install it first: apt-get install -y nodejs npm"
    command -v npm >/dev/null 2>&1 || die "npm not found; install it first: apt-get install -y npm"
    mkdir -p "$DIR"
    cp scripts/mcp/package.json scripts/mcp/package-lock.json "$DIR/"
    echo "mcp-local: npm ci in $DIR (the two MCP reference servers)" >&2
    (cd "$DIR" && npm ci --no-audit --no-fund --loglevel=error >&2)
    installed || die "npm ci finished but the servers are not in $BIN"
    ;;
  status)
    installed
    ;;
  dir)
    echo "$DIR"
    ;;
  *)
    echo "usage: scripts/mcp-local.sh install|status|dir" >&2
    exit 2
    ;;
esac
