#!/usr/bin/env python3
"""Whether an upload's timing tells a stranger that another user holds the same bytes (issue 50).

A victim uploads files; the adversary then uploads files of the same size, half of them held by
the victim and half fresh, timing each whole upload, in a shuffled order. The adversary learns a
threshold on the time from N such uploads (the threshold that classifies them best), then
classifies N more with it. At chance it scores about 50%; the issue asks at most 60% over 60.

    scripts/upload-timing.py [--database sqlite:/tmp/t.sqlite | postgres://…] [--uploads 60] [--size 65536]

It starts `.build/debug/ferry serve` (or FERRY_BIN) on a free port with attachments in a temporary
folder, mints tokens with `ferry token`, and prints the accuracy.
"""
import argparse
import hashlib
import http.client
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

SECRET = "upload-timing-secret-0123456789abcdef"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def token(binary, user):
    return subprocess.check_output([binary, "token", "--user", user, "--secret", SECRET], text=True).strip()


def upload(port, tok, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    start = time.perf_counter()
    conn.request("POST", f"/v1/attachments/{digest}", body=data,
                 headers={"Authorization": f"Bearer {tok}", "Content-Type": "application/octet-stream"})
    response = conn.getresponse()
    response.read()
    elapsed = time.perf_counter() - start
    conn.close()
    if response.status != 201:
        sys.exit(f"upload answered {response.status}")
    return elapsed


def accuracy(samples, threshold, faster_is_held):
    return sum(1 for t, held in samples if (t < threshold) == (held == faster_is_held)) / len(samples)


def learn(samples):
    """The threshold and direction that classify `samples` best: the adversary's training."""
    times = sorted(t for t, _ in samples)
    candidates = [(threshold, direction) for threshold in times + [times[-1] + 1] for direction in (True, False)]
    return max(candidates, key=lambda c: accuracy(samples, *c))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", default=None, help="ferry serve --database (default: a temporary SQLite file)")
    parser.add_argument("--uploads", type=int, default=60)
    parser.add_argument("--size", type=int, default=64 * 1024)
    args = parser.parse_args()
    binary = os.environ.get("FERRY_BIN", ".build/debug/ferry")
    folder = tempfile.mkdtemp(prefix="ferry-timing-")
    database = args.database or f"sqlite:{folder}/timing.sqlite"
    port = free_port()
    server = subprocess.Popen(
        [binary, "serve", "--port", str(port), "--jwt-secret", SECRET, "--rate-limit", "off", "--database", database,
         "--attachments", f"file:{folder}/blobs"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        victim, stranger = token(binary, "victim"), token(binary, "stranger")
        rng = random.Random(50)
        def trials():
            held = [rng.randbytes(args.size) for _ in range(args.uploads // 2)]
            for data in held:
                upload(port, victim, data)
            pairs = [(data, True) for data in held] + [(rng.randbytes(args.size), False) for _ in range(args.uploads - len(held))]
            rng.shuffle(pairs)
            return [(upload(port, stranger, data), is_held) for data, is_held in pairs]

        for _ in range(5):  # warm the connection paths
            upload(port, stranger, rng.randbytes(args.size))
        training, test = trials(), trials()
        threshold, faster_is_held = learn(training)
        mean = lambda xs: sum(xs) / len(xs) * 1000
        print(f"uploads: {len(test)} of {args.size} bytes on {database.split(':')[0]} (after {len(training)} to learn from); "
              f"held {mean([t for t, h in test if h]):.2f} ms, fresh {mean([t for t, h in test if not h]):.2f} ms on average; "
              f"the learned threshold classifies {accuracy(test, threshold, faster_is_held) * 100:.0f}% (chance: 50%)")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
