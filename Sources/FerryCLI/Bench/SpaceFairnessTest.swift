import AsyncHTTPClient
import FerryProtocol
import FerryServer
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// `ferry bench --only fairness`, shared spaces: two members of one space of 20 MiB on a
/// `ferry serve` with its default limits but a quota no one reaches: with the default quota,
/// the heavy member's load would be cheap 429s within a second, and this measures what its
/// requests in progress cost the others. One member keeps four full downloads of the space in
/// flight (each starting over when done), holds 16 live streams and pushes small changes into
/// the space under 200 client ids in turn, waiting `Retry-After` after a 429 as the reference
/// client does; the other member pushes one change and pulls it back, one request at a time.
/// Reports the other member's push and pull latencies idle and under that load.
struct SpaceFairnessTest {
    var database: DatabaseURL
    /// Push-and-pull rounds of the other member, idle and again under load.
    var probes = 300
    var downloads = 4
    var streams = 16
    var clientIDs = 200
    /// Records of 250 KiB in the space: 20 MiB.
    var records = 82

    struct Report: Sendable {
        /// The other member's latencies in milliseconds, sorted.
        var pushIdle: [Double]
        var pullIdle: [Double]
        var pushUnderLoad: [Double]
        var pullUnderLoad: [Double]
        /// Whole downloads of the space the heavy member finished under load, and its answers by status.
        var downloadsFinished: Int
        var heavyStatuses: [Int: Int]
        /// The server's most resident memory under load, in MiB (Linux's VmHWM).
        var memoryPeak: Double
    }

    func run(in folder: URL) async throws -> Report {
        let secret = TokenAuthority.randomSecret()
        let server = try ServerProcess(
            arguments: ["serve", "--database", database.description, "--port", "0", "--jwt-secret", secret, "--rate-limit", "1000000/60"],
            log: folder.appendingPathComponent("serve-space-fairness.log")
        )
        defer { server.stop() }
        let endpoint = "http://127.0.0.1:\(try await server.port())"
        let authority = try await TokenAuthority(secret: secret)
        let run = UUID().uuidString.prefix(6).lowercased()
        let (owner, heavy, other) = (
            try await authority.issue(userID: "\(run)-owner", ttl: .seconds(3600)),
            try await authority.issue(userID: "\(run)-heavy", ttl: .seconds(3600)),
            try await authority.issue(userID: "\(run)-other", ttl: .seconds(3600))
        )
        let http = HTTPClient(
            eventLoopGroup: HTTPClient.defaultEventLoopGroup,
            configuration: .init(connectionPool: .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 128))
        )
        do {
            let client = SpacesBench.Client(endpoint: endpoint, http: http)
            let space = "\(run)-team"
            try await client.send("PUT", Endpoint.spaces + "/\(space)", token: owner)
            for member in ["heavy", "other"] {
                try await client.send("PUT", Endpoint.spaces + "/\(space)/members/\(run)-\(member)", token: owner, body: #"{"role":"write"}"#)
            }
            try await seed(space, client: client, token: owner)
            let report = try await measure(space, client: client, heavy: heavy, other: other, server: server)
            try await http.shutdown()
            return report
        } catch {
            try? await http.shutdown()
            throw error
        }
    }

    /// `records` records of 250 KiB written into the space, 14 to a push (3.5 MB).
    private func seed(_ space: String, client: SpacesBench.Client, token: String) async throws {
        let large = String(repeating: "x", count: 250 * 1024)
        for start in stride(from: 0, to: records, by: 14) {
            let mutations = (start..<min(start + 14, records)).map { index in
                #"{"id":\#(index + 1),"entity":"photos","entityID":"p-\#(index)","op":"upsert","data":{"body":"\#(large)"},"space":"\#(space)"}"#
            }
            try await client.send(
                "POST",
                Endpoint.push,
                token: token,
                body: #"{"clientID":"owner","mutations":["# + mutations.joined(separator: ",") + "]}"
            )
        }
    }

    /// The heavy member's live streams, once every one is open. Streams end only when the server
    /// closes them: the caller cancels them once measured.
    private func openStreams(_ heavy: String, client: SpacesBench.Client) async throws -> [Task<Void, any Error>] {
        let opened = NIOLockedValueBox(0)
        let streams = (0..<self.streams).map { _ in
            Task {
                // A stream refused (the member's other requests in progress, its quota) is opened
                // again after Retry-After, as the reference client does.
                while !Task.isCancelled {
                    var request = HTTPClientRequest(url: client.endpoint + Endpoint.events)
                    request.headers.add(name: "Authorization", value: "Bearer \(heavy)")
                    request.headers.add(name: "Accept", value: "text/event-stream")
                    let response = try await client.http.execute(request, timeout: .seconds(600))
                    guard response.status == .ok else {
                        _ = try await response.body.collect(upTo: 1024 * 1024)
                        try await Task.sleep(for: .seconds(1))
                        continue
                    }
                    opened.withLockedValue { $0 += 1 }
                    defer { opened.withLockedValue { $0 -= 1 } }
                    for try await _ in response.body {}
                }
            }
        }
        for _ in 0..<60 where opened.withLockedValue({ $0 }) < self.streams { try await Task.sleep(for: .seconds(1)) }
        guard opened.withLockedValue({ $0 }) == self.streams else {
            for stream in streams { stream.cancel() }
            throw CommandFailure("the heavy member opened \(opened.withLockedValue { $0 }) of \(self.streams) live streams in a minute")
        }
        return streams
    }

    private func measure(_ space: String, client: SpacesBench.Client, heavy: String, other: String, server: ServerProcess) async throws -> Report {
        var cursor = try await client.pullAll(token: other).cursor
        var nextID: Int64 = 1
        let idle = try await probe(space, client: client, token: other, cursor: &cursor, nextID: &nextID)
        let done = FairnessTest.Flag()
        let raw = FairnessTest.Client(http: client.http, endpoint: client.endpoint)
        let streams = try await openStreams(heavy, client: client)
        defer { for stream in streams { stream.cancel() } }
        server.resetPeakMemory()
        return try await withThrowingTaskGroup(of: (finished: Int, statuses: [Int]).self) { group in
            // The load stops however the probes end (the group awaits its tasks before it returns).
            defer { done.set() }
            for _ in 0..<downloads {
                group.addTask {
                    var (finished, statuses) = (0, [Int]())
                    var cursor: String?
                    while !done.isSet {
                        let (status, page) = await pull(client, token: heavy, cursor: cursor)
                        statuses.append(status)
                        guard status == 200 else { continue }
                        guard let page else { throw CommandFailure("a page of the space answered 200 has no cursor at its end") }
                        cursor = page.hasMore ? page.cursor : nil
                        if !page.hasMore { finished += 1 }
                    }
                    return (finished, statuses)
                }
            }
            group.addTask {
                var statuses: [Int] = []
                var id: Int64 = 1
                while !done.isSet {
                    let body =
                        #"{"clientID":"heavy-\#(id % Int64(clientIDs))","mutations":[{"id":\#(id),"entity":"notes","entityID":"h-\#(id % 50)","op":"upsert","data":{"value":\#(id)},"space":"\#(space)"}]}"#
                    let status = (try? await raw.send(.push(ByteBuffer(string: body)), token: heavy)) ?? 0
                    statuses.append(status)
                    if status == 429 { try? await Task.sleep(for: .seconds(1)) }
                    id += 1
                }
                return (0, statuses)
            }
            // The downloads get under way before the first probe.
            try await Task.sleep(for: .seconds(1))
            let loaded = try await probe(space, client: client, token: other, cursor: &cursor, nextID: &nextID)
            done.set()
            let peak = server.peakMemoryMB ?? server.residentMB
            var (finished, statuses) = (0, [Int: Int]())
            for try await answer in group {
                finished += answer.finished
                for status in answer.statuses { statuses[status, default: 0] += 1 }
            }
            return Report(
                pushIdle: idle.push,
                pullIdle: idle.pull,
                pushUnderLoad: loaded.push,
                pullUnderLoad: loaded.pull,
                downloadsFinished: finished,
                heavyStatuses: statuses,
                memoryPeak: peak
            )
        }
    }

    /// Where a page goes on, read from its end: parsing its 4 MiB of changes would spend the
    /// cores the server and the other member need. The server writes `"cursor"` and `"hasMore"`
    /// after the changes, and this benchmark's records hold no key named `cursor`.
    private struct PageEnd {
        var cursor: String
        var hasMore: Bool

        init?(_ body: ByteBuffer) {
            let bytes = Array(body.readableBytesView.suffix(64 * 1024))
            let marker = Array(#"],"cursor":""#.utf8)
            guard
                let start = (0...max(0, bytes.count - marker.count)).reversed().first(where: { bytes[$0..<$0 + marker.count].elementsEqual(marker) }),
                let end = bytes[(start + marker.count)...].firstIndex(of: UInt8(ascii: "\""))
            else { return nil }
            cursor = String(decoding: bytes[(start + marker.count)..<end], as: UTF8.self)
            hasMore = bytes[end...].starts(with: Array(#"","hasMore":true"#.utf8))
        }
    }

    /// A pull's status and where the download goes on (nil unless 200). After a 429 it waits
    /// `Retry-After` (1 s), as the reference client does.
    private func pull(_ client: SpacesBench.Client, token: String, cursor: String?) async -> (Int, PageEnd?) {
        var request = HTTPClientRequest(url: client.endpoint + Endpoint.pull + "?limit=1000" + (cursor.map { "&cursor=\($0)" } ?? ""))
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        guard let response = try? await client.http.execute(request, timeout: .seconds(120)),
            let body = try? await response.body.collect(upTo: 64 * 1024 * 1024)
        else {
            try? await Task.sleep(for: .seconds(1))  // no answer: the next try waits as after a 429
            return (0, nil)
        }
        guard response.status == .ok else {
            if response.status == .tooManyRequests { try? await Task.sleep(for: .seconds(1)) }
            return (Int(response.status.code), nil)
        }
        return (200, PageEnd(body))
    }

    /// `probes` rounds of one push into the space and the pull that brings it back; each one's
    /// latency in ms, sorted. A request not answered 200 fails the benchmark: the other member
    /// must be served.
    private func probe(
        _ space: String,
        client: SpacesBench.Client,
        token: String,
        cursor: inout String,
        nextID: inout Int64
    ) async throws -> (push: [Double], pull: [Double]) {
        var (pushes, pulls) = ([Double](), [Double]())
        for _ in 0..<probes {
            let push = PushRequest(
                clientID: "other",
                mutations: [
                    Mutation(id: nextID, entity: "notes", entityID: "o-\(nextID % 20)", op: .upsert, data: ["value": .integer(nextID)], space: space)
                ]
            )
            nextID += 1
            var started = ContinuousClock.now
            try await client.send("POST", Endpoint.push, token: token, body: String(decoding: try JSONEncoder().encode(push), as: UTF8.self))
            pushes.append(started.duration(to: .now).seconds * 1000)
            started = ContinuousClock.now
            let page = try await client.pull(token: token, cursor: cursor)
            pulls.append(started.duration(to: .now).seconds * 1000)
            cursor = page.cursor
        }
        return (pushes.sorted(), pulls.sorted())
    }
}
