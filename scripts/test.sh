#!/usr/bin/env bash
# The whole test suite, as the README and CI run it: the formatter's lint and the size limits
# (scripts/check-sizes.py: no file of Sources over 600 lines, no function over 80), then a throwaway
# PostgreSQL cluster (scripts/with-postgres.sh) for the server suites that run on both storage
# engines and a throwaway S3 store (scripts/with-s3.sh, SeaweedFS from PyPI) for the attachment
# suites that run on both attachment stores, and `swift test` beside them, then the contract test (schemathesis against a real
# `ferry-server`, the deployed executable, which must link no test doubles), then the documentation (scripts/check-docs.sh), then the README's example app:
# shown word for word (scripts/check-readme.py), built and run against a real server
# (scripts/run-example.sh), then the demo with its timeline page checked in headless Chromium
# (scripts/check-timeline.sh; the page, its DOM and a screenshot stay in artifacts/).
# Arguments go to `swift test`, for example: scripts/test.sh --filter Push
set -euo pipefail
cd "$(dirname "$0")/.."
swift format lint --strict --recursive --parallel Package.swift Sources Tests Examples
python3 scripts/check-sizes.py
# Swift Testing runs every test at once by default; on a 2-core machine the CPU-heavy suites
# (real servers, fault schedules, large syncs) then starve each other past their 60 s time limits.
# Six at a time ran all 208 tests in 287 s where unbounded runs failed about 30 of them.
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH="${SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH:-6}"
scripts/with-postgres.sh scripts/with-s3.sh swift test "$@"
# The deployed executable carries no test doubles (RunningTheServer, "Which executable").
# (Counted, not `grep -q`: with pipefail, grep leaving early makes nm die of SIGPIPE.)
[ -x .build/debug/ferry-server ] || { echo "no .build/debug/ferry-server: swift test builds it" >&2; exit 1; }
doubles=$(nm .build/debug/ferry-server | grep -c FerryTesting || true)
if [ "$doubles" -ne 0 ]; then
    echo "ferry-server links FerryTesting ($doubles symbols): the deployed server must not carry test doubles" >&2
    exit 1
fi
scripts/contract-test.sh
scripts/check-docs.sh
python3 scripts/check-readme.py
scripts/run-example.sh
scripts/check-timeline.sh
