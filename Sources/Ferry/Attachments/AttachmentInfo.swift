import Foundation

/// What a store knows of one attachment (``FerryStore/attachmentInfo(_:)``), for a screen that
/// shows a file before opening it.
public struct AttachmentInfo: Sendable, Equatable {
    /// The digest, as a column holds it.
    public var digest: String
    /// Its size in bytes.
    public var size: Int64
    /// Its media type, as attached or as the server answered it (`image/jpeg`); `nil` when none said.
    public var contentType: String?
    /// Its file in the store's folder, named with an extension a viewer understands when the
    /// media type is a common one; `nil` when not here (evicted, or never fetched).
    public var localFile: URL?
    /// Whether it waits for upload.
    public var waitsForUpload: Bool
}
