#!/usr/bin/env bash
# Usage: scripts/bench-cli.sh RECORDS[,RECORDS...] [FERRY]
#
# Ferry measured from outside, each step a process of its own, as issue 14 measured it:
# `ferry serve --rate-limit off` on a new SQLite file, `ferry client import` of RECORDS
# records (~110 bytes of data, a natural key each), `ferry client sync` (push them, pull them
# back), then a fresh device's `ferry client sync` (its first pull). Prints each step's wall
# time and peak resident memory (GNU time), and the server's peak. Several sizes run in turn,
# each on a new server, so their times compare within one run.
set -euo pipefail
sizes=${1:?usage: scripts/bench-cli.sh RECORDS[,RECORDS...] [FERRY]}
ferry=$(realpath "${2:-.build/release/ferry}")
dir=
server=
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    if [ -n "$dir" ]; then rm -rf "$dir"; fi
    server=
    dir=
}
trap cleanup EXIT

step() {
    local name=$1; shift
    /usr/bin/time -f "%e %M" -o "$dir/time" "$@" > "$dir/step.log" 2>&1 || { cat "$dir/step.log"; exit 1; }
    read -r seconds kilobytes < "$dir/time"
    printf '%-22s %8.2f s  %9.0f /s  peak %4d MB\n' "$name" "$seconds" "$(echo "$records / $seconds" | bc -l)" $((kilobytes / 1024))
}

echo "$(nproc) cores, $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo '?')"
for records in ${sizes//,/ }; do
    dir=$(mktemp -d)
    python3 - "$records" > "$dir/records.jsonl" <<'PY'
import sys
for i in range(int(sys.argv[1])):
    print('{"entityID":"e-%d","data":{"kind":"steps","value":%d,"unit":"count","source":"watch-7"},"naturalKey":"hk:%d"}' % (i, i, i))
PY
    secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
    "$ferry" serve --database "sqlite:$dir/server.sqlite" --port 0 --jwt-secret "$secret" --rate-limit off > "$dir/serve.log" 2>&1 &
    server=$!
    for _ in $(seq 100); do grep -q "listening on" "$dir/serve.log" && break; sleep 0.1; done
    url=$(grep -o "http://[0-9.]*:[0-9]*" "$dir/serve.log" | head -1)
    [ -n "$url" ] || { cat "$dir/serve.log"; exit 1; }
    token=$("$ferry" token --user bench --secret "$secret" | tail -1)
    echo "$records records"
    step import "$ferry" client import --store "$dir/device-1" --user bench --entity events --file "$dir/records.jsonl"
    step "sync (push + pull)" "$ferry" client sync --store "$dir/device-1" --user bench --server "$url" --token "$token" --timeout 3600
    step "first pull" "$ferry" client sync --store "$dir/device-2" --user bench --server "$url" --token "$token" --timeout 3600
    # The floor of import + sync: the same rows written to one indexed SQLite table (WAL,
    # synchronous FULL, as a store) and read back whole, by SQLite's own shell; the lines
    # become one JSON array before the clock starts.
    python3 -c 'import sys; print("[" + ",".join(l.strip() for l in open(sys.argv[1]) if l.strip()) + "]")' "$dir/records.jsonl" > "$dir/records.json"
    step "floor (write + read)" sqlite3 "$dir/floor.sqlite" \
        "PRAGMA journal_mode = WAL;" "PRAGMA synchronous = FULL;" \
        "CREATE TABLE events (id TEXT PRIMARY KEY NOT NULL, natural_key TEXT UNIQUE, data TEXT);" \
        "INSERT INTO events SELECT json_extract(value, '\$.entityID'), json_extract(value, '\$.naturalKey'), json_extract(value, '\$.data') FROM json_each(readfile('$dir/records.json'));" \
        ".output /dev/null" "SELECT id, natural_key, data FROM events;"
    printf '%-22s peak %4d MB\n' "server" $(( $(awk '/VmHWM/ {print $2}' "/proc/$server/status") / 1024 ))
    cleanup
done
