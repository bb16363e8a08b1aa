#!/usr/bin/env bash
# Builds the release binaries and installs them small: delta, delta-sessions and
# delta-sessions-pty go to PREFIX/bin stripped (≈ 25 MB for delta instead of ≈ 100 MB), and
# their line tables go beside them, compressed, in PREFIX/bin/.debug/<name>.debug, linked
# from the binary by a `.gnu_debuglink` section.
#
#   scripts/install.sh                  # PREFIX=$HOME/.local
#   scripts/install.sh --prefix /opt/delta
#   scripts/install.sh --no-debug-file  # stripped binaries only
#
# Why this split (measured in BENCHMARKS.md, "Installed size"): the release profile keeps
# line tables so a backtrace names file and line, but DWARF is three quarters of the file.
# A panic's message names its file and line without any debug info (the location is
# compiled in); a backtrace (RUST_BACKTRACE=1) names the functions and, through the debug
# link, the file and line of every frame, because Rust's backtrace reader follows
# `.gnu_debuglink` to `.debug/<name>.debug` next to the binary and reads zlib-compressed
# sections (zstd-compressed ones it cannot read, so zlib it is). gdb and addr2line follow
# the same link.
#
# Needs objcopy (binutils). Exit codes: 0 installed; 1 a step failed; 2 usage.
set -euo pipefail
cd "$(dirname "$0")/.."

PREFIX="${HOME:-/usr/local}/.local"
DEBUG_FILE=1
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || { echo "install.sh: --prefix needs a folder" >&2; exit 2; }; PREFIX="$2"; shift 2 ;;
    --prefix=*) PREFIX="${1#--prefix=}"; shift ;;
    --no-debug-file) DEBUG_FILE=0; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
command -v objcopy >/dev/null 2>&1 ||
  { echo "install.sh: objcopy not found; install binutils (apt-get install binutils)" >&2; exit 1; }

cargo build --release --bins
BIN="$PREFIX/bin"
mkdir -p "$BIN/.debug"
for name in delta delta-sessions delta-sessions-pty; do
  built="target/release/$name"
  staged="$BIN/.$name.installing"
  cp "$built" "$staged"
  if [ "$DEBUG_FILE" = 1 ]; then
    objcopy --only-keep-debug --compress-debug-sections=zlib "$built" "$BIN/.debug/$name.debug"
    chmod 0644 "$BIN/.debug/$name.debug"
    # --add-gnu-debuglink records the file's name and checksum; the reader looks for it
    # next to the binary and in .debug/ beside it.
    objcopy --strip-all --add-gnu-debuglink="$BIN/.debug/$name.debug" "$staged"
  else
    objcopy --strip-all "$staged"
  fi
  mv -f "$staged" "$BIN/$name"   # atomic: a running delta keeps its old file
  size=$(stat -c %s "$BIN/$name")
  echo "installed $BIN/$name ($((size / 1024 / 1024)) MiB)"
done
case ":$PATH:" in
  *":$BIN:"*) ;;
  *) echo "add it to your PATH: export PATH=\"$BIN:\$PATH\"" ;;
esac
