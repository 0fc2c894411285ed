#!/usr/bin/env bash
# Maintainers only: refresh the JavaScript the book serves itself (book/_vendor/).
# Run by hand when upgrading; the build and the tests never download anything.
set -euo pipefail
cd "$(dirname "$0")/.."
HTML_MANAGER=${HTML_MANAGER:-1.0.15}   # matches ipywidgets 8.1
REQUIREJS=${REQUIREJS:-2.3.8}
MATHJAX=${MATHJAX:-3.2.2}              # Sphinx 7 speaks MathJax 3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "@jupyter-widgets/html-manager@$HTML_MANAGER" "requirejs@$REQUIREJS" "mathjax@$MATHJAX" >/dev/null)
for f in "$tmp"/*.tgz; do mkdir -p "${f%.tgz}"; tar xzf "$f" -C "${f%.tgz}"; done
out=book/_vendor
rm -rf "$out/html-manager" "$out/mathjax" "$out/require.js"
mkdir -p "$out/html-manager" "$out/mathjax/output/chtml/fonts" "$out/mathjax/input/tex"
cp "$tmp"/requirejs-*/package/require.js "$out/require.js"
hm="$tmp"/jupyter-widgets-html-manager-*/package/dist
# The icon fonts are loaded relative to the script; browsers take woff2/woff first.
cp $hm/embed-amd.js $hm/*.LICENSE.txt $hm/*.woff2 $hm/*.woff "$out/html-manager/"
mj="$tmp"/mathjax-*/package
cp "$mj/es5/tex-chtml.js" "$mj/LICENSE" "$out/mathjax/"
cp -r "$mj/es5/output/chtml/fonts/woff-v2" "$out/mathjax/output/chtml/fonts/"
cp -r "$mj/es5/input/tex/extensions" "$out/mathjax/input/tex/"
cp -r "$mj/es5/ui" "$out/mathjax/"
echo "vendored: html-manager $HTML_MANAGER, requirejs $REQUIREJS, mathjax $MATHJAX"
