@_exported import GRDB

@_exported import typealias FerryProtocol.JSONObject
// What Ferry's API speaks, so that `import Ferry` is enough: the wire types an app meets
// (a record's data, a change's operation, the server's state in a conflict, the protocol's
// limits), one by one so that no other wire type (`Change`, `Mutation`, `ErrorCode`…) can
// clash with a name of the app's, and GRDB, whose `Database` an app writes its synced tables with.
@_exported import enum FerryProtocol.JSONValue
@_exported import struct FerryProtocol.Membership
@_exported import enum FerryProtocol.MutationOp
@_exported import enum FerryProtocol.ProtocolLimits
@_exported import struct FerryProtocol.RecordState
@_exported import struct FerryProtocol.SpaceMember
@_exported import struct FerryProtocol.SpaceRole
@_exported import struct FerryProtocol.UpdateRequirement
