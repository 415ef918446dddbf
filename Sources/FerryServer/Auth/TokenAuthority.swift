import FerryProtocol
import Foundation
import JWTKit

/// Issues and verifies the HS256 bearer tokens of PROTOCOL.md.
///
/// JWTKit checks the signature; this type adds what the protocol demands on
/// top: only HS256 is accepted whatever the header claims, a header with `crit` is
/// refused, `exp` and a non-empty `sub` are required, and every refusal says which rule failed.
public struct TokenAuthority: Sendable {
    /// HS256 needs a key at least as long as its 32-byte output.
    public static let minimumSecretBytes = 32

    private let keys: JWTKeyCollection

    /// An authority that signs and verifies with `secret`. Throws ``TokenSecretTooShort`` when `secret` has fewer
    /// than ``TokenAuthority/minimumSecretBytes`` UTF-8 bytes.
    public init(secret: String) async throws(TokenSecretTooShort) {
        try Self.check(secret: secret)
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        self.keys = keys
    }

    /// Throws ``TokenSecretTooShort`` when `secret` cannot sign: what ``TokenAuthority/init(secret:)`` checks, for a
    /// command that checks its input before it does anything.
    public static func check(secret: String) throws(TokenSecretTooShort) {
        guard secret.utf8.count >= minimumSecretBytes else { throw TokenSecretTooShort(length: secret.utf8.count) }
    }

    /// A new random secret of 32 bytes, as 64 hexadecimal characters: for a server that is given none.
    package static func randomSecret() -> String {
        (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    /// A token for `userID` that expires after `ttl`, rounded up to a whole second. With
    /// `service`, a service token (`"ferry_admin": true`): an app's backend, admin of every space.
    public func issue(userID: String, ttl: Duration, service: Bool = false, now: Date = Date()) async throws -> String {
        // Whole seconds: NumericDate allows fractions, but not every JWT library reads them.
        let expiry = Date(timeIntervalSince1970: (now.timeIntervalSince1970 + ttl.seconds).rounded(.up))
        return try await keys.sign(
            FerryClaims(sub: SubjectClaim(value: userID), exp: ExpirationClaim(value: expiry), ferryAdmin: service ? BoolClaim(value: true) : nil)
        )
    }

    /// The user id of a valid `Authorization` header value.
    public func userID(fromAuthorization header: String?, now: Date = Date()) async throws(AuthFailure) -> String {
        try await caller(fromAuthorization: header, now: now).userID
    }

    /// Who a valid `Authorization` header value speaks for: a user, or a service.
    public func caller(fromAuthorization header: String?, now: Date = Date()) async throws(AuthFailure) -> Caller {
        try await verify(authorization: header, now: now).caller
    }

    /// The user id of a valid token.
    public func userID(fromToken token: String, now: Date = Date()) async throws(AuthFailure) -> String {
        try await caller(fromToken: token, now: now).userID
    }

    /// Who a valid token speaks for.
    public func caller(fromToken token: String, now: Date = Date()) async throws(AuthFailure) -> Caller {
        try await verify(token, now: now).caller
    }

    /// Who a valid `Authorization` header value speaks for, and until when (its `exp`).
    func verify(authorization header: String?, now: Date = Date()) async throws(AuthFailure) -> (caller: Caller, expiresAt: Date) {
        guard let header, !header.isEmpty else { throw .missingHeader }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { throw .notBearer }
        return try await verify(String(parts[1]).trimmingCharacters(in: .whitespaces), now: now)
    }

    /// Who a valid token speaks for, and until when.
    private func verify(_ token: String, now: Date) async throws(AuthFailure) -> (caller: Caller, expiresAt: Date) {
        guard let header = try? DefaultJWTParser().parse(Array(token.utf8), as: AnyClaims.self).header else {
            throw .malformed("it is not three base64url parts with a JSON header and claims")
        }
        guard let algorithm = header.alg else { throw .malformed("its header has no alg") }
        guard algorithm == "HS256" else { throw .wrongAlgorithm(algorithm) }
        // RFC 7515 §4.1.11: a recipient must refuse a token whose `crit` names an extension it
        // does not understand. Ferry understands none, so any `crit` (well-formed or not) is refused.
        if header.fields["crit"] != nil { throw .criticalExtension }

        let claims: FerryClaims
        do {
            claims = try await keys.verify(token, as: FerryClaims.self)
        } catch let error as JWTError where error.errorType == .signatureVerificationFailed {
            throw .badSignature
        } catch {
            throw .malformed("its claims cannot be read (exp must be a number, sub a string)")
        }
        guard let expiry = claims.exp else { throw .missingExpiry }
        guard expiry.value > now else { throw .expired }
        guard let subject = claims.sub?.value, !subject.isEmpty else { throw .missingSubject }
        if let problem = ProtocolValidation.userIDProblem(subject) { throw .malformed(problem) }
        return (Caller(userID: subject, isService: claims.ferryAdmin?.value == true), expiry.value)
    }
}

/// The JWT secret is shorter than HS256 needs (``TokenAuthority/minimumSecretBytes`` UTF-8 bytes).
public struct TokenSecretTooShort: Error, Sendable, CustomStringConvertible {
    /// The secret's length in UTF-8 bytes.
    public var length: Int
    /// What is wrong, with the minimum and a way to generate a good secret.
    public var description: String {
        "the JWT secret is \(length) bytes; HS256 needs at least \(TokenAuthority.minimumSecretBytes) (for example: openssl rand -hex 32)"
    }
}

extension TokenAuthority {
    /// A token's `sub`, read without checking the signature: only to refuse a token meant for
    /// another user before anything is sent. `nil` when the token has no readable `sub`.
    public static func unverifiedSubject(of token: String) -> String? {
        try? DefaultJWTParser().parse(Array(token.utf8), as: FerryClaims.self).payload.sub?.value
    }
}

/// Any claims at all: the header is read before the claims are.
private struct AnyClaims: JWTPayload {
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// The claims Ferry reads; both optional here so that their absence gets its own message.
struct FerryClaims: JWTPayload {
    var sub: SubjectClaim?
    var exp: ExpirationClaim?
    /// `true` on a service token.
    var ferryAdmin: BoolClaim?

    enum CodingKeys: String, CodingKey {
        case sub, exp
        case ferryAdmin = "ferry_admin"
    }

    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// Why a request was not authenticated. The messages never echo the token.
public enum AuthFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// No `Authorization` header.
    case missingHeader
    /// An `Authorization` header that is not `Bearer <token>`.
    case notBearer
    /// Not a readable JWT, and why.
    case malformed(String)
    /// Signed with another algorithm than HS256 (named).
    case wrongAlgorithm(String)
    /// The signature does not match the server's secret.
    case badSignature
    /// No `exp` claim: tokens must expire.
    case missingExpiry
    /// `exp` has passed.
    case expired
    /// No usable `sub` claim (1 to 256 characters, no U+0000).
    case missingSubject
    /// The header's `crit` names extensions this server does not understand (RFC 7515 §4.1.11).
    case criticalExtension

    /// A short name for metrics.
    var metricLabel: String {
        switch self {
        case .missingHeader: "missing_header"
        case .notBearer: "not_bearer"
        case .malformed: "malformed"
        case .wrongAlgorithm: "wrong_algorithm"
        case .badSignature: "bad_signature"
        case .missingExpiry: "missing_expiry"
        case .expired: "expired"
        case .missingSubject: "missing_subject"
        case .criticalExtension: "critical_extension"
        }
    }

    /// Which rule the token broke and what to send instead, without the token: the 401's message.
    public var description: String {
        switch self {
        case .missingHeader: "missing Authorization header; send 'Authorization: Bearer <JWT>'"
        case .notBearer: "the Authorization header must use the Bearer scheme: 'Authorization: Bearer <JWT>'"
        case .malformed(let why): "malformed token: \(why)"
        case .wrongAlgorithm(let algorithm):
            // The name comes from an unauthenticated header: shown only if it looks like one.
            algorithm.count <= 20 && algorithm.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) })
                ? "token is signed with algorithm \(algorithm); this server accepts HS256 only"
                : "token is signed with another algorithm; this server accepts HS256 only"
        case .badSignature: "token signature is wrong: it was not signed with this server's secret"
        case .missingExpiry: "token has no exp claim; tokens must expire"
        case .expired: "token has expired; get a new one"
        case .missingSubject: "token has no sub claim naming the user"
        case .criticalExtension:
            "token header has a crit parameter naming extensions this server does not understand; issue tokens without crit"
        }
    }
}
