// What a rule's API speaks, so that `import FerryRules` is enough: a record's data and state,
// a record's name, a write's operation and the writer's role; one by one, so that no other wire
// type can clash with a name of the app's.
@_exported import typealias FerryProtocol.JSONObject
@_exported import enum FerryProtocol.JSONValue
@_exported import enum FerryProtocol.MutationOp
@_exported import struct FerryProtocol.RecordRef
@_exported import struct FerryProtocol.RecordState
@_exported import struct FerryProtocol.SpaceRole
