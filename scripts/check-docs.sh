#!/usr/bin/env bash
# The documentation as users read it: every public declaration of the library targets has a
# documentation comment (scripts/undocumented.py), and the DocC catalogs of Ferry, FerryServer,
# FerryTesting and FerryDiagnostics build without a single warning.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/undocumented.py
swift package --disable-sandbox generate-documentation \
    --target Ferry --target FerryServer --target FerryTesting --target FerryDiagnostics --warnings-as-errors
