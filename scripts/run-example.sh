#!/usr/bin/env bash
# Runs the README's example app (Examples/FerryExample) and the spaces example (Examples/FerrySpacesExample) against a real `ferry serve` on a free
# loopback port, with tokens from `ferry token`, and fails unless the app reports "done"; then the field-service company's app
# (Examples/FieldService/App) against its own server with its rules (Examples/FieldService/Server), which must send one email.
#   scripts/run-example.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
swift build --product ferry
swift build --product FerryExample
swift build --product FerrySpacesExample
swift build --product FieldServiceServer
swift build --product FieldServiceApp
bin=$(swift build --show-bin-path)

work=$(mktemp -d)
server_pid=
rules_pid=
stop() {
    if [ -n "$1" ] && kill -0 "$1" 2>/dev/null; then
        kill -TERM "$1" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$1" 2>/dev/null || true
        wait "$1" 2>/dev/null || true
    fi
}
cleanup() {
    stop "$server_pid"
    stop "$rules_pid"
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

secret=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
"$bin/ferry" serve --database "sqlite:$work/server.sqlite" --port 0 --jwt-secret "$secret" >"$work/server.log" 2>&1 &
server_pid=$!
url=
for _ in $(seq 1 100); do
    url=$(sed -n 's/^Ferry server listening on \(http:[^ ]*\).*/\1/p' "$work/server.log" | head -1)
    [ -n "$url" ] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$url" ]; then
    echo "run-example: the server did not start:" >&2
    cat "$work/server.log" >&2
    exit 2
fi

# The app's stores go under $work (removed on exit, whatever happens); five minutes at most.
TMPDIR=$work FERRY_SERVER_URL=$url \
    FERRY_TOKEN_ALICE=$("$bin/ferry" token --user alice --secret "$secret") \
    FERRY_TOKEN_BOB=$("$bin/ferry" token --user bob --secret "$secret") \
    timeout 300 "$bin/FerryExample" | tee "$work/example.log"
tail -1 "$work/example.log" | grep -qx done || { echo "run-example: the example did not finish with 'done'" >&2; exit 1; }
TMPDIR=$work FERRY_SERVER_URL=$url \
    FERRY_TOKEN_ALICE=$("$bin/ferry" token --user alice --secret "$secret") \
    FERRY_TOKEN_BOB=$("$bin/ferry" token --user bob --secret "$secret") \
    FERRY_TOKEN_BACKEND=$("$bin/ferry" token --user backend --admin --secret "$secret") \
    timeout 300 "$bin/FerrySpacesExample" | tee "$work/spaces-example.log"
tail -1 "$work/spaces-example.log" | grep -qx done || { echo "run-example: the spaces example did not finish with 'done'" >&2; exit 1; }

# The field-service company's own server, with its rules and its mail log.
FERRY_JWT_SECRET=$secret "$bin/FieldServiceServer" --database "$work/field-service.sqlite" --mail-log "$work/mail.log" --port 0 \
    >"$work/field-service.log" 2>&1 &
rules_pid=$!
rules_url=
for _ in $(seq 1 100); do
    rules_url=$(sed -n 's/^Field service server listening on \(http:[^ ]*\).*/\1/p' "$work/field-service.log" | head -1)
    [ -n "$rules_url" ] && break
    kill -0 "$rules_pid" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$rules_url" ]; then
    echo "run-example: the field-service server did not start:" >&2
    cat "$work/field-service.log" >&2
    exit 2
fi
TMPDIR=$work FERRY_SERVER_URL=$rules_url \
    FERRY_TOKEN_DISPATCHER=$("$bin/ferry" token --user dispatcher --secret "$secret") \
    FERRY_TOKEN_WORKER=$("$bin/ferry" token --user worker --secret "$secret") \
    timeout 300 "$bin/FieldServiceApp" | tee "$work/field-service-app.log"
tail -1 "$work/field-service-app.log" | grep -qx done || { echo "run-example: the field-service app did not finish with 'done'" >&2; exit 1; }
# The job done asked for one email, delivered after its push committed (within a few seconds).
for _ in $(seq 1 100); do [ -s "$work/mail.log" ] && break; sleep 0.1; done
emails=$(grep -c ' email.job_done j1$' "$work/mail.log" || true)
[ "$emails" -eq 1 ] || { echo "run-example: the job done sent $emails emails, not 1" >&2; cat "$work/mail.log" >&2; exit 1; }
echo "run-example: passed"
