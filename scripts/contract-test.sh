#!/usr/bin/env bash
# Contract test: runs schemathesis (all checks) against a real Ferry server and openapi.yaml.
#   scripts/contract-test.sh [FERRY_BINARY]          default .build/debug/ferry-server (the deployed executable)
# Environment:
#   FERRY_VENV                   venv for schemathesis (default .build/schemathesis-venv; created if missing)
#   FERRY_CONTRACT_EXAMPLES      test cases per operation and phase (default 500; about 75 s on 2 idle cores)
#   FERRY_CONTRACT_SEED          hypothesis seed (default 20261123); same seed + same server = same run
#   FERRY_CONTRACT_REPORT_DIR    where the JUnit report goes (default .build/contract-report)
# Exits with schemathesis's status (0: no failures).
set -uo pipefail
started=$(date +%s)
SCHEMATHESIS_VERSION=4.32.5
root=$(cd "$(dirname "$0")/.." && pwd)
# Paths given by the caller are relative to where they ran this; defaults to the repository.
absolute() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
ferry=$(absolute "${1:-$root/.build/debug/ferry-server}")
venv=$(absolute "${FERRY_VENV:-$root/.build/schemathesis-venv}")
report_dir=$(absolute "${FERRY_CONTRACT_REPORT_DIR:-$root/.build/contract-report}")
examples=${FERRY_CONTRACT_EXAMPLES:-500}
seed=${FERRY_CONTRACT_SEED:-20261123}
cd "$root"

if [ ! -x "$ferry" ] && [ $# -eq 0 ]; then swift build --product ferry-server || exit 2; fi
[ -x "$ferry" ] || { echo "contract-test: no ferry binary at $ferry (build first, or pass its path)" >&2; exit 2; }

# Generation depends on hypothesis and jsonschema_rs as much as on schemathesis: pin all three.
pins="schemathesis==$SCHEMATHESIS_VERSION hypothesis==6.170.15 jsonschema_rs==0.60.3"
if [ ! -x "$venv/bin/st" ] || [ "$(cat "$venv/.ferry-contract-pins" 2>/dev/null)" != "$pins" ]; then
    echo "contract-test: installing $pins into $venv"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv" || exit 2
    # shellcheck disable=SC2086
    "$venv/bin/pip" install --quiet --disable-pip-version-check $pins || exit 2
    echo "$pins" >"$venv/.ferry-contract-pins"
fi

work=$(mktemp -d)
server_pid=
st_pid=
cleanup() {
    [ -n "$st_pid" ] && kill -TERM "$st_pid" 2>/dev/null && wait "$st_pid" 2>/dev/null
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill -TERM "$server_pid" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$server_pid" 2>/dev/null
        wait "$server_pid" 2>/dev/null
    fi
    rm -rf "$work"
    echo "contract-test: took $(($(date +%s) - started))s"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

secret=$("$venv/bin/python" -c 'import secrets; print(secrets.token_hex(32))')
"$ferry" serve --database "sqlite:$work/contract.sqlite" --port 0 --jwt-secret "$secret" --rate-limit off \
    >"$work/server.log" 2>&1 &
server_pid=$!

url=
for _ in $(seq 1 100); do
    url=$(sed -n 's/^Ferry server listening on \(http:[^ ]*\).*/\1/p' "$work/server.log" | head -1)
    [ -n "$url" ] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$url" ] || ! curl -fsS "$url/v1/health" >/dev/null; then
    echo "contract-test: the server did not start:" >&2
    cat "$work/server.log" >&2
    exit 2
fi
token=$("$ferry" token --user contract-test --secret "$secret") || exit 2

# Rules of docs/PROTOCOL.md that no JSON Schema can state. A schema-valid request that the
# server refuses with 400 for exactly one of these reasons (its own error message says which)
# is not a contract failure; every other failure stays one. If a message changes, the failures
# come back: update the pattern here.
cat >"$work/hooks.py" <<'EOF'
import hashlib
import json
import re

import schemathesis

def _mutations(case):
    body = case.body if isinstance(case.body, dict) else {}
    mutations = body.get("mutations")
    return mutations if isinstance(mutations, list) else []


def _ints(value):
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _ints(item)
    elif isinstance(value, list):
        for item in value:
            yield from _ints(item)


def _answered(case):
    return "answered" in (case.query or {})


def _forged_cursor(case):
    return "cursor" in (case.query or {})


def _ids_not_increasing(case):
    ids = [m.get("id") for m in _mutations(case) if isinstance(m, dict)]
    return any(not (isinstance(a, int) and isinstance(b, int) and a < b) for a, b in zip(ids, ids[1:]))


def _integer_past_64_bits(case):
    return any(not (-(2**63) <= n < 2**63) for n in _ints(case.body))


def _whole_float(case):
    return any(
        isinstance(m, dict) and any(isinstance(m.get(k), float) and m[k].is_integer() for k in ("id", "baseVersion", "changedAt"))
        for m in _mutations(case)
    )


def _body_bytes(case):
    body = case.body
    if body is None or body.__class__.__name__ == "NotSet":
        return b""
    # Generated binary bodies come as schemathesis's Binary: a str (empty) holding the bytes in `data`.
    data = getattr(body, "data", body)
    if isinstance(data, (bytes, bytearray)):
        return bytes(data)
    return data.encode() if isinstance(data, str) else None


def _not_its_digest(case):
    data = _body_bytes(case)
    digest = (case.path_parameters or {}).get("digest", "")
    return data is not None and "sha256:" + hashlib.sha256(data).hexdigest() != digest


VERSION_HEADERS = {
    "ferry-protocol": r"1\.[0-9]{1,9}",
    "ferry-app-version": r"[0-9]{1,9}(\.[0-9]{1,9}){0,3}",
    "ferry-schema-version": r"[0-9]{1,9}",
    "ferry-platform": r"[a-z0-9-]{1,32}",
}


def _version_header_malformed(case):
    # The coverage phase sends header values its patterns forbid and calls them valid.
    headers = {k.lower(): v for k, v in (case.headers or {}).items()}
    return any(name in headers and not re.fullmatch(pattern, str(headers[name])) for name, pattern in VERSION_HEADERS.items())


def _past_attachment_limit(case):
    # The server's largest attachment (--max-attachment-bytes, 5 GiB by default) is its own
    # setting: an announced length, or an append's offset, past it.
    headers = {k.lower(): v for k, v in (case.headers or {}).items()}
    try:
        limit = 5 * 1024**3
        return int(headers.get("upload-length", 0)) > limit or int(headers.get("upload-offset", 0)) > limit
    except (TypeError, ValueError):
        return False


def _length_not_the_bytes(case):
    # Upload-Length announces the whole attachment: a body that ends the upload at another
    # length breaks it (the draft), which a schema cannot say.
    headers = {k.lower(): v for k, v in (case.headers or {}).items()}
    data = _body_bytes(case)
    try:
        return data is not None and int(headers["upload-length"]) != len(data)
    except (KeyError, TypeError, ValueError):
        return False


# Each rule: the error code, the server's message, and a check that the request really broke it,
# so that a server refusing a valid request with one of these messages still fails the run.
UNEXPRESSIBLE = [
    # An HMAC-signed cursor this server issued to this user; a made-up one is invalid_cursor.
    ("invalid_cursor", re.compile(r"^cursor was not issued by this server"), _forged_cursor),
    # Mutation ids strictly increasing within a batch.
    ("bad_request", re.compile(r"^mutations\[[0-9]+\]\.id is -?[0-9]+ but follows -?[0-9]+: ids must be strictly increasing within a batch$"), _ids_not_increasing),
    # An integer literal (no fraction, no exponent) must fit in 64 bits; JSON Schema cannot
    # tell the literal 10^30 (refused, never rounded) from 1e30 (a double, accepted).
    ("bad_request", re.compile(r"^body is not valid JSON \(integer -?[0-9]+ does not fit in 64 bits"), _integer_past_64_bits),
    # Integers written as integers: JSON Schema calls 2.0 and 2e3 integers, the server
    # refuses them for id and baseVersion (see openapi.yaml, Mutation).
    ("bad_request", re.compile(r"^mutations\[[0-9]+\]\.(id|baseVersion|changedAt): expected a whole number, got -?[0-9.e+-]+$"), _whole_float),
    # A pull's answered ids ascending and apart, and named for a client (the Ferry-Client-ID
    # header); a pattern can say neither.
    ("bad_request", re.compile(r"^answered (must be ascending|needs the Ferry-Client-ID header)"), _answered),
    # An attachment's bytes hash to its digest (PROTOCOL.md, "Attachments"): random bytes do not.
    ("digest_mismatch", re.compile(r"^the [0-9]+ bytes uploaded hash to sha256:[0-9a-f]{64}, not "), _not_its_digest),
    ("attachment_too_large", re.compile(r"^an attachment may hold at most [0-9]+ bytes on this server"), _past_attachment_limit),
    ("bad_request", re.compile(r"^the upload ended at [0-9]+ bytes, not the [0-9]+ Upload-Length announced"), _length_not_the_bytes),
    # The same, refused before the body (its Content-Length says so) or as the bytes pass it.
    ("bad_request", re.compile(r"^Content-Length [0-9]+ from offset [0-9]+ goes past the [0-9]+ bytes this upload announced"), _length_not_the_bytes),
    ("bad_request", re.compile(r"^the body goes past the [0-9]+ bytes this upload announced"), _length_not_the_bytes),
    # Who the client is (PROTOCOL.md, "Versions"): a header the pattern forbids is named.
    ("bad_request", re.compile(r"^(Ferry-(Protocol|App-Version|Schema-Version|Platform) must be|this server speaks protocol)"), _version_header_malformed),
]


@schemathesis.hook
def filter_failure(context, failure, case, response):
    # HTTP says a recipient ignores header fields it does not know (RFC 9110, 5.1): a request
    # whose only fault is an extra header is a valid one.
    described = " ".join(str(getattr(failure, name, "")) for name in ("title", "message"))
    if getattr(failure, "code", None) == "ST201" and "in header - object with unexpected properties" in described:
        return False
    if getattr(failure, "code", None) != "ST202" or response.status_code not in (400, 413, 422):
        return True
    try:
        error = json.loads(response.content)["error"]
        code, message = error["code"], error["message"]
    except Exception:
        return True
    for expected_code, pattern, broken in UNEXPRESSIBLE:
        if code == expected_code and pattern.search(message) and broken(case):
            return False
    return True
EOF

# 413 (batch_too_large) is the documented answer to more than 1000 mutations.
cat >"$work/schemathesis.toml" <<EOF
hooks = "$work/hooks.py"

[checks.negative_data_rejection]
expected-statuses = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429, "5xx"]
EOF

command=(
    "$venv/bin/st" --config-file "$work/schemathesis.toml" run "$root/openapi.yaml"
    --url "$url"
    --checks all
    --phases examples,coverage,fuzzing,stateful
    --seed "$seed"
    --generation-database none
    --workers 1
    --continue-on-failure
    --request-timeout 10
    --no-color
)
echo "contract-test: schemathesis $SCHEMATHESIS_VERSION against $url, $examples examples, seed $seed"
# Runs schemathesis with the options above and more. From the temporary directory: schemathesis
# and hypothesis keep caches in the working directory. In the background so that INT or TERM
# reach the traps at once (cleanup stops it too).
run_schemathesis() {
    (cd "$work" && exec "${command[@]}" "$@") &
    st_pid=$!
    wait "$st_pid"
    local run_status=$?
    st_pid=
    [ "$run_status" -eq 0 ] || status=$run_status
}
status=0
run_schemathesis --header "Authorization: Bearer $token" --exclude-operation-id events \
    --max-examples "$examples" --report junit --report-dir "$report_dir"
# The event stream lasts until its token expires: it gets a run of its own, with a token of a
# few seconds minted just before (schemathesis takes about 3 s to start), so that its first
# answers are whole streams, each event checked against openapi.yaml, and the later ones, once
# the token has expired, are 401. Alone, the operation has no links to follow: no stateful phase.
stream_token=$("$ferry" token --user contract-test --secret "$secret" --ttl 8) || exit 2
run_schemathesis --header "Authorization: Bearer $stream_token" --include-operation-id events --max-examples 20 \
    --phases examples,coverage,fuzzing
if [ "$status" -ne 0 ]; then
    # A 500's message carries a request id that the server log also has.
    echo "contract-test: schemathesis exited $status; the server log's last 40 lines:"
    tail -n 40 "$work/server.log"
fi
exit "$status"
