#!/usr/bin/env bash
# Brings the pinned xterm.js and its fit addon from the npm registry into
# actors/assets/serve/vendor/ (built files + licence). The page embeds them in the binary, so
# `delta serve` needs nothing at run time. To update: change the versions below, run this
# script, check the page (the browser test: `cargo test -p delta --test cli serve_browser`),
# commit the vendor folder.
set -euo pipefail
XTERM_VERSION=5.5.0
FIT_VERSION=0.10.0

cd "$(dirname "$0")/.."
dest=actors/assets/serve/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

(cd "$work" && npm pack --silent "@xterm/xterm@$XTERM_VERSION" "@xterm/addon-fit@$FIT_VERSION" >/dev/null)
mkdir -p "$dest"
tar -xzf "$work/xterm-xterm-$XTERM_VERSION.tgz" -C "$work"
cp "$work/package/lib/xterm.js" "$dest/xterm.js"
cp "$work/package/css/xterm.css" "$dest/xterm.css"
cp "$work/package/LICENSE" "$dest/LICENSE.xterm"
rm -rf "$work/package"
tar -xzf "$work/xterm-addon-fit-$FIT_VERSION.tgz" -C "$work"
cp "$work/package/lib/addon-fit.js" "$dest/addon-fit.js"
cp "$work/package/LICENSE" "$dest/LICENSE.addon-fit"
cat > "$dest/VERSIONS" <<VERSIONS
@xterm/xterm $XTERM_VERSION
@xterm/addon-fit $FIT_VERSION
VERSIONS
echo "vendored xterm $XTERM_VERSION and addon-fit $FIT_VERSION into $dest"
