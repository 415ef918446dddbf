// The wire types FerryTesting's API speaks beyond Ferry's: what `FerryTestServer.seed` sends
// and `records(of:)` returns.
@_exported import struct FerryProtocol.Change
@_exported import struct FerryProtocol.Mutation
