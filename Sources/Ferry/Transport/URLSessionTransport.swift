import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `SyncTransport` over `URLSession`, on every platform.
public struct URLSessionTransport: SyncTransport {
    public let baseURL: URL
    private let session: URLSession

    public init(baseURL: URL, session: URLSession = .shared) {
        self.baseURL = baseURL
        self.session = session
    }

    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        guard let url = URL(string: request.path, relativeTo: baseURL) else {
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
private final class DataTaskHandle: @unchecked Sendable {
    // @unchecked: `task` and `cancelled` are only read and written under `lock`.
    private let lock = NSLock()
    private var task: URLSessionDataTask?
    private var cancelled = false

    func start(_ task: URLSessionDataTask) {
        let cancelled = lock.withLock {
            self.task = task
            return self.cancelled
        }
        task.resume()
        if cancelled { Self.cancel(task) }
    }

    func cancel() {
        let task = lock.withLock {
            cancelled = true
            return self.task
        }
        if let task { Self.cancel(task) }
    }

    /// Off the caller's thread: the caller may hold the Swift task's status lock.
    private static func cancel(_ task: URLSessionDataTask) {
        DispatchQueue.global().async { task.cancel() }
    }
}
