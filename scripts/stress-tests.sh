#!/usr/bin/env bash
# Runs the built test binary again and again to catch rare hangs; on a hang, dumps every
# thread with gdb. Build first with `swift build --build-tests`.
#   scripts/stress-tests.sh [RUNS] [FILTER]      e.g. scripts/stress-tests.sh 20 SessionTests
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
filter=${2:-.}
limit=90   # seconds a run may take before it counts as hung
binary=$(find .build -path '*debug/ferryPackageTests.xctest' -type f | head -1)
[ -x "$binary" ] || { echo "no test binary: run swift build --build-tests first" >&2; exit 2; }
out=$(mktemp -d)
hung=0
for run in $(seq 1 "$runs"); do
    log=$out/run-$run.log
    "$binary" --testing-library swift-testing --filter "$filter" </dev/null >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 "$limit"); do sleep 1; kill -0 "$pid" 2>/dev/null || break; done
    if kill -0 "$pid" 2>/dev/null; then
        hung=$((hung + 1))
        gdb -p "$pid" -batch -ex "thread apply all bt" >"$out/run-$run.threads" 2>&1
        kill -9 "$pid"; wait "$pid" 2>/dev/null
        echo "run $run: HUNG; output $log, threads $out/run-$run.threads"
    else
        wait "$pid"; echo "run $run: exit $?, $(grep -c '✔ Test "' "$log") tests passed"
    fi
done
echo "$hung of $runs runs hung"
[ "$hung" -eq 0 ]
