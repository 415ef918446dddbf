#!/usr/bin/env python3
"""Issue 28, item 1: what large records cost the server and a client, measured for real.

Starts `ferry serve` on DATABASE (default: a SQLite file in a temporary folder), pushes 1,000
records of 250 KiB for one user (15 to a push), then measures:
  - the server's resident memory growth (peak, VmHWM) during 1 and during 4 concurrent pulls of
    everything, each page read whole, as a client does;
  - a fresh `ferry client sync` of that data: its peak resident memory (VmHWM of the process).
Usage: scripts/large-records.py [--ferry .build/release/ferry] [--database postgres://…]
"""
import argparse, json, os, re, subprocess, sys, tempfile, threading, time, urllib.request

parser = argparse.ArgumentParser()
parser.add_argument("--ferry", default=".build/release/ferry")
parser.add_argument("--database")
parser.add_argument("--records", type=int, default=1000)
args = parser.parse_args()
folder = tempfile.mkdtemp(prefix="ferry-large-")
secret = "large-records-secret-0123456789abcdef"
database = args.database or f"sqlite:{folder}/server.sqlite"
serve = subprocess.Popen([args.ferry, "serve", "--database", database, "--port", "0", "--jwt-secret", secret, "--rate-limit", "off"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
port = None
for line in serve.stdout:
    match = re.search(r"listening on http://[^:]+:(\d+)", line)
    if match:
        port = int(match.group(1)); break
threading.Thread(target=lambda: [None for _ in serve.stdout], daemon=True).start()
base = f"http://127.0.0.1:{port}"
user = f"large-{os.getpid()}"
token = subprocess.run([args.ferry, "token", "--user", user, "--secret", secret], capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]

def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])

def request(method, path, body=None):
    req = urllib.request.Request(base + path, data=body, method=method, headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as response:
        return json.loads(response.read())

body = "x" * (250 * 1024)
for first in range(1, args.records + 1, 15):
    ids = range(first, min(first + 15, args.records + 1))
    request("POST", "/v1/push", json.dumps({"clientID": "loader", "mutations": [
        {"id": i, "entity": "docs", "entityID": f"doc-{i}", "op": "upsert", "data": {"body": body}} for i in ids]}).encode())

def pull_all():
    cursor, pages, changes = None, 0, 0
    while True:
        page = request("GET", "/v1/pull?limit=1000" + (f"&cursor={cursor}" if cursor else ""))
        pages += 1; changes += len(page["changes"])
        if not page["hasMore"]:
            return pages, changes
        cursor = page["cursor"]

def server_growth(concurrent):
    with open(f"/proc/{serve.pid}/clear_refs", "w") as f:
        f.write("5")
    before = status_kib(serve.pid, "VmRSS")
    results = []
    threads = [threading.Thread(target=lambda: results.append(pull_all())) for _ in range(concurrent)]
    for t in threads: t.start()
    for t in threads: t.join()
    peak = status_kib(serve.pid, "VmHWM")
    return before / 1024, peak / 1024, results

for concurrent in (1, 4):
    before, peak, results = server_growth(concurrent)
    print(f"server, {concurrent} concurrent pull(s) of {args.records} records of 250 KiB: {results[0][0]} pages, {results[0][1]} changes; "
          f"resident {before:.0f} MiB before, peak {peak:.0f} MiB: {peak - before:.0f} MiB growth, {(peak - before) / concurrent:.0f} MiB per pull")

store = f"{folder}/client"
client = subprocess.Popen([args.ferry, "client", "sync", "--store", store, "--user", user, "--server", base, "--token", token, "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
peak = 0
while client.poll() is None:
    try:
        peak = max(peak, status_kib(client.pid, "VmHWM") or 0)
    except Exception:
        pass
    time.sleep(0.02)
out, err = client.communicate()
print(f"client: a fresh `ferry client sync` of that data: exit {client.returncode}, peak resident {peak / 1024:.0f} MiB (sampled every 20 ms)")
serve.terminate(); serve.wait()
