#!/usr/bin/env bash
# The timeline page in a real browser. `ferry demo --report` plays the demo's seven scenarios (each
# must pass) and writes their journals as one page; headless Chromium loads it, dumps the DOM it
# built and takes a screenshot; scripts/check-timeline.py checks both. The page, the DOM and the
# screenshot stay in artifacts/ for CI to keep.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p artifacts
swift run ferry demo --report artifacts/timeline.html

chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then
    echo "check-timeline: Chromium is not installed (.ci/run installs Debian's chromium package)" >&2
    exit 1
fi
# --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start; the page is our own file.
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --disable-dev-shm-usage)
url="file://$PWD/artifacts/timeline.html"
"$chromium" "${flags[@]}" --dump-dom "$url" >artifacts/timeline.dom.html 2>artifacts/chromium.log
"$chromium" "${flags[@]}" --window-size=1200,1000 --screenshot="$PWD/artifacts/timeline.png" "$url" 2>>artifacts/chromium.log
python3 scripts/check-timeline.py artifacts/timeline.dom.html artifacts/timeline.png
