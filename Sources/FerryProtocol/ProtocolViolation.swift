/// A request that breaks PROTOCOL.md as a whole, with the code to answer it with
/// and a message that names the offending field.
public struct ProtocolViolation: Error, Sendable, Equatable, CustomStringConvertible {
    /// The code to answer with; its `httpStatus` is the response's status.
    public var code: ErrorCode
    /// What is wrong, naming the offending field; the error envelope's `message`.
    public var message: String

    /// A violation answered with `code` and `message`.
    public init(_ code: ErrorCode, _ message: String) {
        self.code = code
        self.message = message
    }

    /// A `bad_request` (400) with `message`.
    public static func badRequest(_ message: String) -> ProtocolViolation { .init(.badRequest, message) }

    /// A push under a new client id from a user who has ``ProtocolLimits/maxClientsPerUser`` already (403).
    public static let tooManyClients = ProtocolViolation(
        .tooManyClients,
        "this user already has \(ProtocolLimits.maxClientsPerUser) client ids, the most a server keeps for one user; "
            + "a client that has not pushed for the server's retention is forgotten: keep one client id per installed app"
    )

    /// The code and the message, as `code: message`.
    public var description: String { "\(code.rawValue): \(message)" }
}
