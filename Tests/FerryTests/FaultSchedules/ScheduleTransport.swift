import Ferry
import FerryTestSupport
import Foundation

/// The faults a schedule injects between a client and the server.
enum InjectedFault: String, CaseIterable {
    case dropped = "request dropped before the server"
    case reset = "connection reset at a random moment"
    case lostAnswer = "answer lost after the server committed"
    case rateLimited = "429 with Retry-After"
    case rateLimitedBare = "429 without Retry-After"
    case internalError = "500"
    case unavailable = "503"
    case slow = "slow answer"
    case restart = "server restarted during the request"
    case killed = "client process killed during a request"
}

/// Holds killed clients' requests until the schedule ends: a killed process never does
/// anything again, so its task must not go on while the schedule runs.
actor Freezer {
    private var frozen: [CheckedContinuation<Void, any Error>] = []
    private var thawed = false

    func freeze() async throws {
        guard !thawed else { throw CancellationError() }
        try await withCheckedThrowingContinuation { frozen.append($0) }
    }

    /// Lets every frozen request fail, so the killed clients' tasks end.
    func thaw() {
        thawed = true
        for continuation in frozen { continuation.resume(throwing: CancellationError()) }
        frozen.removeAll()
    }
}

/// One client process's network: it reaches the schedule's server wherever it listens now, and
/// by the schedule's seeded rolls drops, resets, delays or answers requests itself, restarts
/// the server mid-request, or freezes the process for good (a kill).
final class ScheduleTransport: SyncTransport, @unchecked Sendable {
    // @unchecked: `generator`, `faultsOn`, `killCountdown`, `killed` and `onKilled` are only
    // touched under `lock`; the rest is immutable and Sendable.
    private let user: String
    private let name: String
    private let server: RestartableServer
    private let ledger: ScheduleLedger
    private let freezer: Freezer
    private let lock = NSLock()
    private var generator: JitterGenerator
    private var faultsOn = true
    private var killCountdown: Int?
    private var killed = false
    private var onKilled: (@Sendable () -> Void)?
    private var beforePush: (@Sendable () -> Void)?

    init(user: String, name: String, seed: UInt64, server: RestartableServer, ledger: ScheduleLedger, freezer: Freezer) {
        self.user = user
        self.name = name
        self.server = server
        self.ledger = ledger
        self.freezer = freezer
        self.generator = JitterGenerator(seed: seed)
    }

    func turnFaultsOff() { lock.withLock { faultsOn = false } }

    /// Kills the process at its request number `request` from now (0 is the next one).
    /// Runs `hook` when the next push is about to go out (its batch marked in flight), once.
    func beforeNextPush(_ hook: (@Sendable () -> Void)?) {
        lock.withLock { beforePush = hook }
    }

    func armKill(atRequest request: Int, onKilled: @escaping @Sendable () -> Void) {
        lock.withLock {
            killCountdown = request
            self.onKilled = onKilled
        }
    }

    func send(_ request: TransportRequest) async throws -> TransportResponse {
        if request.path == "/v1/push",
            let hook = lock.withLock({ () -> (@Sendable () -> Void)? in
                defer { beforePush = nil }
                return beforePush
            })
        {
            hook()
        }
        let (fault, roll) = lock.withLock { () -> (InjectedFault?, Int) in
            let roll = Int.random(in: 0..<1000, using: &generator)
            if killed { return (.killed, roll) }
            if let countdown = killCountdown {
                if countdown == 0 {
                    killCountdown = nil
                    killed = true
                    return (.killed, roll)
                }
                killCountdown = countdown - 1
            }
            return (faultsOn ? Self.fault(for: roll % 100) : nil, roll)
        }
        guard let fault else { return try await deliver(request) }
        let what = "\(name) \(request.method) \(request.path.prefix(60))"
        if fault != .killed { ledger.count(fault.rawValue, what) }
        switch fault {
        case .dropped:
            throw URLError(.notConnectedToInternet)
        case .reset:
            // The request goes on without its client, so the server may apply it at any time,
            // even after the client has resent it.
            Task { _ = try? await self.forward(request) }
            try await Task.sleep(for: .microseconds(roll * 3))
            throw URLError(.networkConnectionLost)
        case .lostAnswer:
            _ = try await forward(request)
            throw URLError(.networkConnectionLost)
        case .rateLimited, .rateLimitedBare, .internalError, .unavailable:
            let status = [InjectedFault.rateLimited: 429, .rateLimitedBare: 429, .internalError: 500, .unavailable: 503][fault]!
            let headers = fault == .rateLimited || fault == .unavailable ? ["Retry-After": "\(1 + roll % 3)"] : [:]
            return TransportResponse(status: status, headers: headers, body: Data(#"{"error":{"code":"internal","message":"injected"}}"#.utf8))
        case .slow:
            try await Task.sleep(for: .milliseconds(roll % 30))
            return try await deliver(request)
        case .restart:
            async let answer = forward(request)
            try await Task.sleep(for: .microseconds(roll * 2))
            try await server.restart()
            let response = try await answer
            return try await deliverAnswer(response, to: request)
        case .killed:
            let first = lock.withLock { () -> (@Sendable () -> Void)? in
                defer { onKilled = nil }
                return onKilled
            }
            if first != nil {
                ledger.count(fault.rawValue, what)
                if roll % 2 == 0 { _ = try? await forward(request) }  // killed after the server committed
            }
            first?()
            try await freezer.freeze()
            throw CancellationError()
        }
    }

    /// A download's streamed answer: the exchange goes through `send` with its faults, and now
    /// and then the body is cut halfway, so the client holds part of a chunk and must go on from it.
    func openStream(_ request: TransportRequest) async throws -> TransportStream {
        let response = try await send(request)
        let cut = lock.withLock { faultsOn && response.body.count > 1 && Int.random(in: 0..<8, using: &generator) == 0 }
        if cut { ledger.count("download cut mid-body", "\(name) \(request.method) \(request.path.prefix(60))") }
        let body = cut ? response.body.prefix(response.body.count / 2) : response.body
        return TransportStream(
            status: response.status,
            headers: response.headers,
            body: AsyncThrowingStream { continuation in
                if !body.isEmpty { continuation.yield(Data(body)) }
                continuation.finish(throwing: cut ? URLError(.networkConnectionLost) : nil)
            }
        )
    }

    /// Percent ranges of each fault; about 60% of requests pass untouched.
    private static func fault(for percent: Int) -> InjectedFault? {
        let shares: [(InjectedFault, Int)] = [
            (.dropped, 5), (.reset, 5), (.lostAnswer, 8), (.rateLimited, 4), (.rateLimitedBare, 3),
            (.internalError, 3), (.unavailable, 3), (.slow, 6), (.restart, 2),
        ]
        var threshold = 0
        for (fault, share) in shares {
            threshold += share
            if percent < threshold { return fault }
        }
        return nil
    }

    private func forward(_ request: TransportRequest) async throws -> TransportResponse {
        let url = await server.baseURL
        guard !url.isEmpty else { throw URLError(.cannotConnectToHost) }
        return try await URLSessionTransport(baseURL: URL(string: url)!).send(request)
    }

    private func deliver(_ request: TransportRequest) async throws -> TransportResponse {
        try await deliverAnswer(try await forward(request), to: request)
    }

    /// Hands an answer to the client, unless the process was killed meanwhile.
    private func deliverAnswer(_ response: TransportResponse, to request: TransportRequest) async throws -> TransportResponse {
        if lock.withLock({ killed }) {
            try await freezer.freeze()
            throw CancellationError()
        }
        ledger.delivered(user: user, process: name, request: request, response: response)
        return response
    }
}
