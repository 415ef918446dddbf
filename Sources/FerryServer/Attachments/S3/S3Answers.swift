import Foundation
import XMLCoder

/// The XML bodies of S3's answers that the client reads, decoded by XMLCoder: entities are read
/// as XML reads them (SeaweedFS writes the quotes around an ETag as `&#34;`), whatever the order
/// or the whitespace of the elements. Elements are S3's names, first letter lowered (`UploadId`
/// is `uploadId`, `ETag` is `eTag`).
enum S3Answers {
    /// An error body: `<Error><Code>…</Code><Message>…</Message></Error>`.
    struct Failure: Decodable {
        var code: String?
        var message: String?
    }

    /// A page of `ListObjectsV2`.
    struct Listing: Decodable {
        struct Contents: Decodable, Equatable {
            var key: String
            var size: Int64
            var lastModified: String?
            var eTag: String?
        }
        /// Absent from a page that lists nothing.
        var contents: [Contents]?
        var isTruncated: Bool?
        var nextContinuationToken: String?
    }

    /// `CreateMultipartUpload`'s answer.
    struct CreatedUpload: Decodable {
        var uploadId: String
    }

    /// `UploadPartCopy`'s answer.
    struct CopiedPart: Decodable {
        var eTag: String
    }

    /// `text` decoded as `T`; `nil` when it is not one (an empty body, another answer).
    static func decode<T: Decodable>(_ type: T.Type, from text: String) -> T? {
        // Values as the store wrote them: a key may begin or end with a space.
        let decoder = XMLDecoder(trimValueWhitespaces: false)
        decoder.keyDecodingStrategy = .convertFromCapitalized
        return try? decoder.decode(T.self, from: Data(text.utf8))
    }

    /// The code and message of an error body; `nil` each when the body says none.
    static func failure(in text: String) -> Failure {
        decode(Failure.self, from: text) ?? Failure()
    }
}
