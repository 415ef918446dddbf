#!/usr/bin/env bash
# Runs a command beside a throwaway PostgreSQL cluster:
#   scripts/with-postgres.sh swift test --filter Push
# The cluster lives in a temporary folder, listens on a free loopback port, and is stopped and
# removed when the command ends, whatever way it ends. The command finds it in
# FERRY_TEST_POSTGRES_URL (a superuser URL; the tests create a database of their own per test).
# Where PostgreSQL cannot be started this script fails with the reason: the PostgreSQL tests never
# skip silently (and without this variable they fail, saying how to run them).
set -euo pipefail

fail() { echo "with-postgres: $*" >&2; exit 1; }

bin=""
for candidate in "$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent)")" /usr/lib/postgresql/*/bin; do
    if [ -x "$candidate/initdb" ] && [ -x "$candidate/pg_ctl" ]; then bin="$candidate"; break; fi
done
[ -n "$bin" ] || fail "PostgreSQL's server programs (initdb, pg_ctl) are not installed; on Debian: apt-get install postgresql"

# initdb refuses to run as root: the cluster then belongs to the postgres user.
as_owner=()
if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || fail "running as root, and there is no 'postgres' user to own the cluster (initdb refuses root)"
    as_owner=(runuser -u postgres --)
fi

dir="$(mktemp -d /tmp/ferry-postgres.XXXXXX)"
[ "$(id -u)" = 0 ] && chown postgres "$dir"
# A free port: bind to 0 and read what the kernel gave.
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

stop() {
    "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap stop EXIT

"${as_owner[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; fail "initdb failed (log above)"; }
# Loopback only, sockets in the cluster's own folder. The suite creates a database per test
# (each one a copy of template0 written to the WAL): for a cluster thrown away at the end,
# syncing that to disk only slows the machine down, so fsync is off unless
# FERRY_POSTGRES_SETTINGS says otherwise (benchmarks pass "-c fsync=on ..." for figures
# with production's durability).
settings="${FERRY_POSTGRES_SETTINGS:--c fsync=off -c synchronous_commit=off -c full_page_writes=off}"
"${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=500 $settings" start >/dev/null \
    || { cat "$dir/server.log" >&2; fail "the PostgreSQL server did not start (log above)"; }

export FERRY_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres"
echo "with-postgres: PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on $FERRY_TEST_POSTGRES_URL (cluster in $dir)" >&2
"$@"
