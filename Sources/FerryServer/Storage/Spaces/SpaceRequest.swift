import FerryProtocol

/// Checks of a space management request's own fields, before any storage is touched.
enum SpaceRequest {
    /// Throws `bad_request` naming the field when `space` is not a valid space id.
    static func check(space: String) throws(ProtocolViolation) {
        if let problem = ProtocolValidation.spaceIDProblem(space) { throw .badRequest(problem) }
    }

    /// Throws `bad_request` naming the field when `user` cannot name a user.
    static func check(user: String) throws(ProtocolViolation) {
        if let problem = ProtocolValidation.userIDProblem(user) {
            throw .badRequest("user: " + problem.replacingOccurrences(of: "sub ", with: ""))
        }
    }
}
