import FerryProtocol
import Foundation
import NIOCore

/// Where attachments' bytes live (ATTACHMENTS.md, "Where bytes live"): whole attachments by
/// digest, and uploads in progress by an id the server gave them. Bytes pass through in chunks,
/// never whole in memory; an upload becomes an attachment only once its bytes hash to its digest.
public protocol BlobStore: Sendable {
    /// The size of the attachment, or `nil` when the store does not hold it.
    func size(of digest: AttachmentDigest) async throws -> Int64?

    /// Calls `chunk` with the bytes of `range` of the attachment, in order.
    func read(_ digest: AttachmentDigest, range: Range<Int64>, chunk: (ByteBuffer) async throws -> Void) async throws

    /// The bytes an upload holds so far, or `nil` when there is no such upload.
    func offset(of upload: UploadID) async throws -> Int64?

    /// Appends `chunks` to `upload` at `offset`, which must be what the upload holds
    /// (`UploadOffsetMismatch` otherwise, and nothing is written); returns the new offset. A new
    /// upload is created when `creating`, else `UploadNotFound` is thrown. A cut connection keeps
    /// what arrived.
    func append<Chunks: AsyncSequence>(_ chunks: Chunks, to upload: UploadID, at offset: Int64, creating: Bool) async throws -> Int64
    where Chunks.Element == ByteBuffer

    /// Makes `upload` the attachment `digest` if its bytes hash to it, else discards it and
    /// throws `DigestMismatch`. Returns the attachment's size. The attachment is written even
    /// when the store holds it: true bytes replace wrong ones, and an upload of bytes another
    /// user holds takes the same path and time as new ones (it never tells that they are held).
    func complete(_ upload: UploadID, as digest: AttachmentDigest) async throws -> Int64

    /// Discards an upload in progress; nothing if there is none.
    func discard(_ upload: UploadID) async throws

    /// Deletes the attachment unless `stillWanted` says otherwise, asked once the bytes can no
    /// longer be read under its name: an upload of the same bytes completing meanwhile keeps them.
    /// Returns whether the bytes went.
    func purge(_ digest: AttachmentDigest, unless stillWanted: @Sendable () async throws -> Bool) async throws -> Bool

    /// Takes the attachment out of reach for good, kept aside for an operator: its bytes were
    /// found not to hash to `digest` (a store's fault). Moves what is there now and hashes the
    /// moved copy: true bytes (a completion replaced the object meanwhile) go back. Returns
    /// whether wrong bytes were taken aside. The next upload of the true bytes writes the
    /// attachment anew: a completion always writes it.
    func quarantine(_ digest: AttachmentDigest) async throws -> Bool

    /// Discards the uploads last written to before `cutoff` (abandoned); returns how many.
    func discardUploads(untouchedSince cutoff: Date) async throws -> Int
}

/// An upload in progress, named by the server: 32 lowercase hex digits.
public struct UploadID: Hashable, Sendable, CustomStringConvertible {
    /// The 32 lowercase hex digits.
    public let value: String

    /// A new, random id.
    public init() {
        value = (0..<2).map { _ in String(UInt64.random(in: .min ... .max), radix: 16).leftPadded(to: 16) }.joined()
    }

    /// The id `text` names, or `nil` when it is not 32 lowercase hex digits.
    public init?(_ text: String) {
        guard text.utf8.count == 32, text.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }) else { return nil }
        value = text
    }

    /// The id, as `value`.
    public var description: String { value }
}

/// An append that does not start where the upload ends.
public struct UploadOffsetMismatch: Error, Sendable {
    /// What the upload holds.
    public var expected: Int64
}

/// The store did not answer, or answered that it cannot now (an object store down, restarting
/// or overloaded): the request is answered `503` with `Retry-After`, and the client tries again.
public struct BlobStoreUnavailable: Error, Sendable, CustomStringConvertible {
    /// What failed: the request and the store's answer or the connection's error.
    public var reason: String
    /// An unavailable store, for `reason`.
    public init(_ reason: String) { self.reason = reason }
    /// "the attachment store is unavailable: " and the reason, for logs.
    public var description: String { "the attachment store is unavailable: \(reason)" }
}

/// An upload whose bytes do not hash to the digest it was to be: it is discarded.
public struct DigestMismatch: Error, Sendable {
    /// The digest the bytes were uploaded as.
    public var expected: AttachmentDigest
    /// The digest of the bytes that arrived.
    public var actual: AttachmentDigest
}

extension String {
    fileprivate func leftPadded(to length: Int) -> String {
        String(repeating: "0", count: max(0, length - count)) + self
    }
}
