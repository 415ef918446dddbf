import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// ``SyncTransport`` over `URLSession`, on every platform.
public struct URLSessionTransport: SyncTransport {
    /// The server's address; a path it has is kept as a prefix of every request's path.
    public let baseURL: URL
    let session: URLSession

    /// A transport to the server at `baseURL` over `session` (the shared session by default).
    public init(baseURL: URL, session: URLSession = .shared) {
        self.baseURL = baseURL
        self.session = session
    }

    /// Sends `request` and returns the server's answer, whatever its status.
    ///
    /// - Throws: the session's `URLError` for failures below HTTP (cancelling the call cancels the request), and
    ///   ``FerryError/protocolViolation(_:underlying:)`` when `request.path` makes no URL or the answer is not HTTP.
    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        guard let url = request.url(on: baseURL) else {
            throw FerryError.protocolViolation("cannot build a URL from \(request.path)")
        }
        var urlRequest = URLRequest(url: url)
        urlRequest.httpMethod = request.method
        urlRequest.httpBody = request.body
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await perform(urlRequest)
        guard let http = response as? HTTPURLResponse else {
            throw FerryError.protocolViolation("not an HTTP response")
        }
        var headers: [String: String] = [:]
        for (name, value) in http.allHeaderFields {
            if let name = name as? String, let value = value as? String { headers[name] = value }
        }
        return TransportResponse(status: http.statusCode, headers: headers, body: data)
    }

    /// Like `URLSession.data(for:)`, but safe to cancel on Linux.
    ///
    /// swift-corelibs-foundation's `data(for:)` cancels its data task synchronously from the
    /// cancellation handler, which runs under the Swift task's status lock, while the session's
    /// queue may be resuming that same task: a lock inversion that deadlocks both threads
    /// (swift-corelibs-foundation#5412). Ferry cancels runs on sign-out, so it cancels the data
    /// task from another queue instead.
    private func perform(_ request: URLRequest) async throws -> (Data, URLResponse) {
        let handle = DataTaskHandle()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let task = session.dataTask(with: request) { data, response, error in
                    handle.finish()
                    if let error {
                        continuation.resume(throwing: error)
                    } else if let response {
                        continuation.resume(returning: (data ?? Data(), response))
                    } else {
                        continuation.resume(throwing: URLError(.badServerResponse))
                    }
                }
                handle.start(task)
            }
        } onCancel: {
            handle.cancel()
        }
    }
}

/// The data task of one request, cancelled even when cancellation comes before it starts.
///
/// swift-corelibs-foundation crashes ("a task that is not in the registry") when a task is
/// cancelled as it finishes, so a finished task is not cancelled: the completion handler marks
/// it, and the cancel, which runs on another queue, checks the mark and the task's state. This
/// narrows that race on Linux; it cannot close it from outside Foundation.
private final class DataTaskHandle: @unchecked Sendable {
    // @unchecked: `task`, `cancelled` and `finished` are only read and written under `lock`.
    private let lock = NSLock()
    private var task: URLSessionDataTask?
    private var cancelled = false
    private var finished = false

    func start(_ task: URLSessionDataTask) {
        let cancelled = lock.withLock {
            self.task = task
            return self.cancelled
        }
        task.resume()
        if cancelled { cancelUnlessFinished() }
    }

    /// Called by the completion handler, before it resumes the caller.
    func finish() {
        lock.withLock { finished = true }
    }

    func cancel() {
        let started = lock.withLock {
            cancelled = true
            return task != nil
        }
        if started { cancelUnlessFinished() }
    }

    /// Off the caller's thread: the caller may hold the Swift task's status lock.
    private func cancelUnlessFinished() {
        DispatchQueue.global().async {
            guard let task = self.lock.withLock({ self.finished ? nil : self.task }), task.state == .running else { return }
            task.cancel()
        }
    }
}
