// What Ferry's API speaks, so that `import Ferry` is enough: the wire types (`Mutation`,
// `MutationOp`, `JSONObject`, `RecordState`…) and GRDB, whose `Database` an app writes its
// synced tables with.
@_exported import FerryProtocol
@_exported import GRDB
