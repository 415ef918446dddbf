// The types FerryTesting's API speaks beyond Ferry's: what `FerryTestServer.seed` sends,
// `records(of:)` returns, and `storedAttachments()` lists.
@_exported import struct FerryProtocol.Change
@_exported import struct FerryProtocol.Mutation
@_exported import struct FerryProtocol.ProtocolVersion
@_exported import struct FerryProtocol.VersionNumber
@_exported import struct FerryServer.ServerRules
@_exported import struct FerryServer.StoredAttachment
@_exported import struct FerryServer.UpdatePolicy
