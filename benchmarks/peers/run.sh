#!/usr/bin/env bash
# Ferry and a peer JSON sync server (Kinto 26.5 under gunicorn, 4 workers) on one throwaway
# PostgreSQL 15 cluster with fsync on, driven by one load generator (loadgen.py):
#   benchmarks/peers/run.sh [RECORDS] [ROUNDS]
# Needs a release build (swift build -c release --product ferry; FERRY_BINARY names another) and Python 3 with venv; Kinto,
# gunicorn and psycopg2 go into a virtual environment under .build/peers. See README.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/benchmarks/peers"
records=${1:-100000}
rounds=${2:-3}
ferry=${FERRY_BINARY:-$root/.build/release/ferry}  # another build's, for an A/B
[ -x "$ferry" ] || { echo "peers: build Ferry first: swift build -c release --product ferry" >&2; exit 2; }

venv="$root/.build/peers"
if [ ! -x "$venv/bin/gunicorn" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "kinto[postgresql]==26.5.0" "gunicorn==27.0.1"
fi

if [ -z "${FERRY_TEST_POSTGRES_URL:-}" ]; then
    # A cluster with production's durability, for this run only.
    exec env FERRY_POSTGRES_SETTINGS="-c fsync=on -c synchronous_commit=on -c full_page_writes=on" \
        "$root/scripts/with-postgres.sh" "$0" "$records" "$rounds"
fi

work=$(mktemp -d)
pids=()
cleanup() {
    status=$?
    if [ "$status" -ne 0 ]; then
        for log in "$work"/*.log; do echo "--- $log" >&2; tail -20 "$log" >&2; done
    fi
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
psql_url=${FERRY_TEST_POSTGRES_URL}
base=${psql_url%/*}
psql() { "$venv/bin/python" - "$@" <<'PY'
import sys, psycopg2
connection = psycopg2.connect(sys.argv[1]); connection.autocommit = True
connection.cursor().execute(sys.argv[2])
PY
}
psql "$psql_url" "CREATE DATABASE ferry"
psql "$psql_url" "CREATE DATABASE kinto"

# Ferry: the reference server, no rate limit (the load generator is one client).
secret=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
"$ferry" serve --database "$base/ferry" --port 0 --jwt-secret "$secret" --rate-limit off --max-requests-per-user 100 >"$work/ferry.log" 2>&1 &
pids+=($!)
ferry_url=
for _ in $(seq 1 200); do
    ferry_url=$(sed -n 's/^Ferry server listening on \(http:[^ ]*\).*/\1/p' "$work/ferry.log" | head -1)
    [ -n "$ferry_url" ] && break
    sleep 0.1
done
[ -n "$ferry_url" ] || { cat "$work/ferry.log" >&2; exit 2; }
token=$("$ferry" token --user bench --secret "$secret")

# Kinto: PostgreSQL storage and permissions, basic auth (any user:password is a principal),
# pages of up to 10,000 records (its storage_max_fetch_size), 4 gunicorn workers.
kinto_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -e "s|@DATABASE@|${base/#postgres:/postgresql:}/kinto|g" -e "s|@SECRET@|$secret|g" "$here/kinto.ini" >"$work/kinto.ini"
"$venv/bin/kinto" migrate --ini "$work/kinto.ini" >"$work/kinto-migrate.log" 2>&1 || { echo "peers: kinto migrate failed" >&2; exit 2; }
(cd "$work" && exec "$venv/bin/gunicorn" --paste "$work/kinto.ini" --workers 4 --bind "127.0.0.1:$kinto_port" >"$work/kinto.log" 2>&1) &
pids+=($!)
kinto_up=
for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$kinto_port/v1/" >/dev/null && { kinto_up=1; break; }; sleep 0.1; done
[ -n "$kinto_up" ] || { echo "peers: Kinto did not start" >&2; exit 2; }

"$venv/bin/python" "$here/loadgen.py" --ferry "$ferry_url" --ferry-token "$token" --kinto "http://127.0.0.1:$kinto_port/v1" \
    --records "$records" --rounds "$rounds" --kinto-seed "$base/kinto" --analyze "$base/ferry" "$base/kinto"
