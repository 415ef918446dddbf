#!/usr/bin/env python3
"""Measures what a push of 500 mutations costs a running Ferry server.

Usage: scripts/push-cost.py URL TOKEN [ROUNDS]

Sends ROUNDS pushes (default 40) of 500 new records each, then ROUNDS pushes
updating those records, then ROUNDS pushes that merge by natural key, over
one keep-alive connection, and prints client-side latency percentiles: the
server's cost alone, where `ferry bench` measures the client and server together.
"""
import http.client, json, statistics, sys, time, urllib.parse, uuid

url, token = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 40
parts = urllib.parse.urlparse(url)
connection = http.client.HTTPConnection(parts.hostname, parts.port)
client = "cost-" + uuid.uuid4().hex[:8]
next_id = 1


def push(mutations):
    body = json.dumps({"clientID": client, "mutations": mutations}).encode()
    start = time.perf_counter()
    connection.request("POST", "/v1/push", body, {"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    response = connection.getresponse()
    payload = response.read()
    elapsed = time.perf_counter() - start
    if response.status != 200:
        sys.exit(f"push answered {response.status}: {payload[:300]!r}")
    return elapsed, len(body)


def batch(kind, round_):
    global next_id
    mutations = []
    for index in range(500):
        record = f"{round_}-{index}"
        entity_id = {"insert": "e-" + record, "update": "e-" + record, "merge": "m-" + record}[kind]
        mutations.append({"id": next_id, "entity": "events", "entityID": entity_id, "op": "upsert",
                          "data": {"kind": "steps", "value": index, "round": round_, "pass": kind},
                          "naturalKey": "hk:" + record})
        next_id += 1
    return mutations


for kind in ("insert", "update", "merge"):
    timings, size = [], 0
    for round_ in range(rounds):
        elapsed, size = push(batch(kind, round_))
        timings.append(elapsed * 1000)
    timings.sort()
    p50 = statistics.median(timings)
    p95 = timings[int(len(timings) * 0.95) - 1]
    print(f"{kind:6}: {rounds} pushes of 500 ({size // 1024} KiB each): p50 {p50:.1f} ms, p95 {p95:.1f} ms, "
          f"{500 * 1000 / p50:,.0f} mutations/s at p50")
