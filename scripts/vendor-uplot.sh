#!/usr/bin/env bash
# vendor-uplot.sh - refresh the chart library the web console uses: uPlot, pinned, from npm,
# into console/vendor/uplot/ (committed: the build itself never needs npm or the network).
# Usage: scripts/vendor-uplot.sh      (run from the repository root; needs npm)
# To move to another version, change VERSION and SHA256 (of the npm tarball) together.
set -euo pipefail
VERSION=1.6.32
SHA256=4b8a8191e425658e3ea8c8c1314b0fc679c861ee3a1af2b20c7b16ba50b5133d
dest=console/vendor/uplot
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "uplot@$VERSION" >/dev/null)
echo "$SHA256  $tmp/uplot-$VERSION.tgz" | sha256sum -c --quiet
tar -xzf "$tmp/uplot-$VERSION.tgz" -C "$tmp"
mkdir -p "$dest"
cp "$tmp/package/dist/uPlot.esm.js" "$tmp/package/dist/uPlot.min.css" "$tmp/package/LICENSE" "$dest/"
echo "uplot $VERSION (npm, sha256 $SHA256)" >"$dest/VERSION"
echo "vendor-uplot: $dest updated to uPlot $VERSION"
