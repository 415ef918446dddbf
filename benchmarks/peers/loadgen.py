#!/usr/bin/env python3
"""One load generator for Ferry and for a peer JSON sync server (Kinto), so that both are
measured by the same client code on the same machine: upload, a fresh download in pages, and a
delta of changes. Each server is asked what a real client asks, and every answer is parsed
whole (json.loads), as a client must.

  loadgen.py --ferry URL --ferry-token T --kinto URL --records N [--rounds R]

Prints one JSON object per measure and round, then a summary table in Markdown.
"""
import argparse
import base64
import http.client
import json
import statistics
import sys
import time
import urllib.parse
import uuid


class Connection:
    """A keep-alive HTTP/1.1 connection to one server."""

    def __init__(self, base, headers):
        url = urllib.parse.urlsplit(base)
        self.host, self.port = url.hostname, url.port
        self.prefix = url.path.rstrip("/")
        self.headers = headers
        self.connection = http.client.HTTPConnection(self.host, self.port, timeout=300)

    def request(self, method, path, body=None, headers=None):
        all_headers = dict(self.headers)
        all_headers.update(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            all_headers["Content-Type"] = "application/json"
        self.connection.request(method, self.prefix + path, body=data, headers=all_headers)
        response = self.connection.getresponse()
        payload = response.read()
        if response.status >= 300:
            raise SystemExit(f"{method} {path}: {response.status} {payload[:300]!r}")
        return response, (json.loads(payload) if payload else None)


def record(index):
    """The shape both servers store: a small event, as the issue's comparison used."""
    return {"kind": "steps", "value": index, "note": f"record {index}", "at": 1_700_000_000_000 + index}


class Ferry:
    name = "Ferry"

    def __init__(self, url, token):
        self.client = f"loadgen-{uuid.uuid4().hex[:8]}"
        self.http = Connection(url, {"Authorization": f"Bearer {token}", "Ferry-Client-ID": self.client})
        self.next_id = 1
        # A server listing `large_pages` takes a pull limit up to 10,000; an older one up to 1,000.
        _, health = self.http.request("GET", "/v1/health")
        self.largest_page = 10000 if "large_pages" in (health.get("features") or []) else 1000

    def upload(self, start, count, batch=1000):
        for first in range(start, start + count, batch):
            mutations = []
            for index in range(first, min(first + batch, start + count)):
                mutations.append({"id": self.next_id, "entity": "events", "entityID": f"e-{index}", "op": "upsert", "data": record(index)})
                self.next_id += 1
            self.http.request("POST", "/v1/push", {"clientID": self.client, "mutations": mutations})

    def download(self, page, cursor=None):
        """Pulls from `cursor` (from scratch without one) until caught up; returns (records, cursor)."""
        received = 0
        while True:
            query = {"limit": page}
            if cursor:
                query["cursor"] = cursor
            _, body = self.http.request("GET", "/v1/pull?" + urllib.parse.urlencode(query))
            received += len(body["changes"])
            cursor = body["cursor"]
            if not body["hasMore"]:
                return received, cursor

    def change(self, indexes):
        mutations = []
        for index in indexes:
            data = record(index)
            data["value"] = -index
            mutations.append({"id": self.next_id, "entity": "events", "entityID": f"e-{index}", "op": "upsert", "data": data})
            self.next_id += 1
        self.http.request("POST", "/v1/push", {"clientID": self.client, "mutations": mutations})


class Kinto:
    name = "Kinto"

    def __init__(self, url):
        credentials = base64.b64encode(b"loadgen:loadgen").decode()
        self.http = Connection(url, {"Authorization": f"Basic {credentials}"})
        self.collection = "/buckets/bench/collections/events/records"
        self.http.request("PUT", "/buckets/bench", {"data": {}}, headers={"If-None-Match": "*"})
        self.http.request("PUT", "/buckets/bench/collections/events", {"data": {}}, headers={"If-None-Match": "*"})

    def upload(self, start, count, batch=25):
        # Kinto's batch endpoint takes at most `batch_max_requests` (25 by default) writes.
        for first in range(start, start + count, batch):
            requests = [
                {"method": "PUT", "path": f"{self.collection}/e-{index}", "body": {"data": record(index)}}
                for index in range(first, min(first + batch, start + count))
            ]
            _, body = self.http.request("POST", "/batch", {"requests": requests})
            failed = [answer for answer in body["responses"] if answer["status"] >= 300]
            if failed:
                raise SystemExit(f"Kinto refused a write: {failed[0]}")

    def download(self, page, since=None):
        """Reads the collection's records in pages of `page` (`_since` for a delta), following
        `Next-Page`; returns (records, the collection's timestamp for the next delta)."""
        # Kinto's own order (newest first), which its clients read in and it pages fastest.
        query = {"_limit": page}
        if since is not None:
            query["_since"] = since
        path = f"{self.collection}?" + urllib.parse.urlencode(query)
        received = 0
        timestamp = since
        while path:
            response, body = self.http.request("GET", path)
            received += len(body["data"])
            etag = response.getheader("ETag")
            if etag is None:
                raise SystemExit("Kinto answered a page without an ETag: no timestamp for a delta")
            timestamp = int(etag.strip('"'))
            following = response.getheader("Next-Page")
            path = urllib.parse.urlsplit(following).path.removeprefix(self.http.prefix) + "?" + urllib.parse.urlsplit(following).query if following else None
        return received, timestamp

    def change(self, indexes):
        for first in range(0, len(indexes), 25):
            requests = []
            for index in indexes[first : first + 25]:
                data = record(index)
                data["value"] = -index
                requests.append({"method": "PUT", "path": f"{self.collection}/e-{index}", "body": {"data": data}})
            _, body = self.http.request("POST", "/batch", {"requests": requests})
            failed = [answer for answer in body["responses"] if answer["status"] >= 300]
            if failed:
                raise SystemExit(f"Kinto refused a change: {failed[0]}")


def seed_kinto(database, start, end):
    """The records from `start` to `end` as Kinto's API would store them: its trigger gives
    each its own increasing `last_modified`."""
    import psycopg2

    connection = psycopg2.connect(database.replace("postgres://", "postgresql://", 1))
    with connection, connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO objects (id, parent_id, resource_name, last_modified, data, deleted)
            SELECT 'e-' || i, '/buckets/bench/collections/events', 'record', NULL,
                jsonb_build_object('kind', 'steps', 'value', i, 'note', 'record ' || i, 'at', 1700000000000 + i), false
            FROM generate_series(%s, %s) AS i
            """,
            (start, end - 1),
        )
    connection.close()


def analyze(database):
    import psycopg2

    connection = psycopg2.connect(database.replace("postgres://", "postgresql://", 1))
    connection.autocommit = True
    connection.cursor().execute("VACUUM ANALYZE")
    connection.close()


def timed(work):
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ferry", required=True, help="Ferry's base URL")
    parser.add_argument("--ferry-token", required=True, help="a token of Ferry's user (ferry token --user U --secret S)")
    parser.add_argument("--kinto", required=True, help="Kinto's base URL, with /v1")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--upload-records", type=int, default=2_000, help="records each server's upload is timed on (Kinto takes minutes for 100,000)")
    parser.add_argument("--kinto-seed", help="Kinto's PostgreSQL database: the records past the timed upload go in by SQL (its API takes minutes for 100,000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--analyze", nargs="*", default=[], help="databases to VACUUM ANALYZE once seeded (both servers'), so neither reads unsettled tables")
    arguments = parser.parse_args()

    ferry = Ferry(arguments.ferry, arguments.ferry_token)
    kinto = Kinto(arguments.kinto)
    results = []

    def report(measure, server, seconds, count):
        line = {"measure": measure, "server": server, "seconds": round(seconds, 4), "records": count, "per_second": round(count / seconds)}
        results.append(line)
        print(json.dumps(line), flush=True)

    # Upload: the first records of each, one client, each server's own batches.
    for server in (ferry, kinto):
        seconds, _ = timed(lambda: server.upload(0, arguments.upload_records))
        report("upload", server.name, seconds, arguments.upload_records)
    # The rest, untimed (Ferry by its API; Kinto by its API unless run.sh seeded it in SQL).
    ferry.upload(arguments.upload_records, arguments.records - arguments.upload_records)
    if arguments.kinto_seed:
        seed_kinto(arguments.kinto_seed, arguments.upload_records, arguments.records)
    else:
        kinto.upload(arguments.upload_records, arguments.records - arguments.upload_records)

    for database in arguments.analyze:
        analyze(database)

    for _ in range(arguments.rounds):
        for page in (1000, 10000):
            for server in (ferry, kinto):
                if server is ferry and page > ferry.largest_page:
                    continue  # an older Ferry's pages stop at 1,000 records
                seconds, (count, _) = timed(lambda: server.download(page))
                if count != arguments.records:
                    raise SystemExit(f"{server.name} brought {count} records, not {arguments.records}")
                report(f"fresh download, pages of {page}", server.name, seconds, count)
        for server in (ferry, kinto):
            _, (_, position) = timed(lambda: server.download(1000))
            changed = list(range(0, arguments.records, max(1, arguments.records // 100)))[:100]
            server.change(changed)
            seconds, (count, _) = timed(lambda: server.download(1000, position))
            if count != len(changed):
                raise SystemExit(f"{server.name}'s delta brought {count} records, not the {len(changed)} changed")
            report("delta of 100 changes", server.name, seconds, count)

    print("\n| measure | Ferry | Kinto | Ferry's speed / Kinto's |")
    print("| --- | --- | --- | --- |")
    measures = []
    for line in results:
        if line["measure"] not in measures:
            measures.append(line["measure"])
    for measure in measures:
        def median(server, field):
            values = [line[field] for line in results if line["measure"] == measure and line["server"] == server]
            return statistics.median(values) if values else None
        if measure.startswith("delta"):
            f, k = median("Ferry", "seconds"), median("Kinto", "seconds")
            print(f"| {measure} | {f * 1000:.2f} ms | {k * 1000:.2f} ms | {k / f:.2f}x |")
        else:
            f, k = median("Ferry", "per_second"), median("Kinto", "per_second")
            ratio = f"{f / k:.2f}x" if f and k else ""
            print(f"| {measure} | {f or '-'} records/s | {k or '-'} records/s | {ratio} |")
    # Each server at its best page size: the measure.
    def best(server):
        downloads = [m for m in measures if m.startswith("fresh download")]
        return max((statistics.median([l["per_second"] for l in results if l["measure"] == m and l["server"] == server] or [0]), m) for m in downloads)
    (f, fm), (k, km) = best("Ferry"), best("Kinto")
    print(f"| fresh download, each at its best page size | {f} records/s ({fm.split(', ')[1]}) | {k} records/s ({km.split(', ')[1]}) | {f / k:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
