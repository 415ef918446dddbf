/// A request that breaks PROTOCOL.md as a whole, with the code to answer it with
/// and a message that names the offending field.
public struct ProtocolViolation: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: ErrorCode
    public var message: String

    public init(_ code: ErrorCode, _ message: String) {
        self.code = code
        self.message = message
    }

    public static func badRequest(_ message: String) -> ProtocolViolation { .init(.badRequest, message) }

    public var description: String { "\(code.rawValue): \(message)" }
}
