import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension URLSessionTransport {
    /// Opens a streamed exchange over a session of its own (a delegate receives the body as it
    /// arrives; `URLSession.bytes(for:)` does not exist on Linux). No byte for `idleTimeout`
    /// seconds fails the stream: the server's keep-alives come every 15 s.
    public func openStream(_ request: TransportRequest) async throws -> TransportStream {
        guard let url = request.url(on: baseURL) else {
            throw FerryError.protocolViolation("cannot build a URL from \(request.path)")
        }
        var urlRequest = URLRequest(url: url, timeoutInterval: Self.streamIdleTimeout)
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        let receiver = StreamReceiver()
        // A session of its own, configured as the app's: a stream must not take one of its connections for hours.
        let session = URLSession(configuration: self.session.configuration, delegate: receiver, delegateQueue: nil)
        let task = session.dataTask(with: urlRequest)
        receiver.onEnd = {
            // Off the caller's thread, as `perform` cancels (swift-corelibs-foundation#5412).
            DispatchQueue.global().async {
                if task.state == .running { task.cancel() }
                session.finishTasksAndInvalidate()
            }
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                receiver.start(continuation)
                task.resume()
            }
        } onCancel: {
            receiver.end()
        }
    }

    /// Seconds without a byte after which a stream is taken for dead: three keep-alives missed.
    static let streamIdleTimeout: TimeInterval = 45
}

/// Receives one streamed exchange for ``URLSessionTransport/openStream(_:)``: resumes the opener
/// with the head, then yields the body's chunks.
private final class StreamReceiver: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    // @unchecked: `opening`, `ended` and `onEnd` are only read and written under `lock`; the
    // continuation of `body` is thread-safe.
    private let lock = NSLock()
    private var opening: CheckedContinuation<TransportStream, any Error>?
    private var ended = false
    var onEnd: (@Sendable () -> Void)? {
        get { lock.withLock { endHandler } }
        set { lock.withLock { endHandler = newValue } }
    }
    private var endHandler: (@Sendable () -> Void)?
    private let body: AsyncThrowingStream<Data, any Error>
    private let chunks: AsyncThrowingStream<Data, any Error>.Continuation

    override init() {
        (body, chunks) = AsyncThrowingStream.makeStream(of: Data.self)
        super.init()
        chunks.onTermination = { [weak self] _ in self?.end() }
    }

    func start(_ continuation: CheckedContinuation<TransportStream, any Error>) {
        let endedAlready = lock.withLock {
            opening = continuation
            return ended
        }
        if endedAlready { finish(with: CancellationError()) }
    }

    /// The consumer stopped (or was cancelled): close the connection.
    func end() {
        let handler = lock.withLock {
            ended = true
            return endHandler
        }
        handler?()
        finish(with: CancellationError())
    }

    func urlSession(
        _ session: URLSession,
        dataTask: URLSessionDataTask,
        didReceive response: URLResponse,
        completionHandler: @escaping (URLSession.ResponseDisposition) -> Void
    ) {
        let opener = lock.withLock {
            defer { opening = nil }
            return opening
        }
        if let opener {
            if let http = response as? HTTPURLResponse {
                var headers: [String: String] = [:]
                for (name, value) in http.allHeaderFields {
                    if let name = name as? String, let value = value as? String { headers[name] = value }
                }
                opener.resume(returning: TransportStream(status: http.statusCode, headers: headers, body: body))
            } else {
                opener.resume(throwing: FerryError.protocolViolation("not an HTTP response"))
            }
        }
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        chunks.yield(data)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        if let error { finish(with: error) } else { finish(with: nil) }
        session.finishTasksAndInvalidate()
    }

    /// Fails an opener still waiting for the head, and ends the body.
    private func finish(with error: (any Error)?) {
        let opener = lock.withLock {
            defer { opening = nil }
            return opening
        }
        opener?.resume(throwing: error ?? URLError(.badServerResponse))
        chunks.finish(throwing: error)
    }
}
