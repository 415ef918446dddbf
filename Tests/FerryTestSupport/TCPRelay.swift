import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A loopback TCP relay in front of a real service (the test object store), which a test takes
/// down and brings back: while down, the connections through it are cut and new ones are closed
/// at once, which is what a server sees of a store that stopped, without stopping the store
/// other tests share.
public final class TCPRelay: Sendable {
    /// Where the relay listens on 127.0.0.1.
    public let port: Int
    private let listener: NIOAsyncChannel<NIOAsyncChannel<ByteBuffer, ByteBuffer>, Never>
    private let state = NIOLockedValueBox((up: true, open: [ObjectIdentifier: any Channel]()))
    private let accepting: Task<Void, Never>

    /// A relay to `host:port` (the service must listen there).
    public init(to host: String, port target: Int) async throws {
        let group = MultiThreadedEventLoopGroup.singleton
        listener = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: "127.0.0.1", port: 0) { channel in
                channel.eventLoop.makeCompletedFuture { try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) }
            }
        port = listener.channel.localAddress?.port ?? 0
        let (listener, state) = (listener, state)
        accepting = Task {
            try? await listener.executeThenClose { inbound in
                try await withThrowingDiscardingTaskGroup { tasks in
                    for try await connection in inbound {
                        tasks.addTask { await Self.relay(connection, to: host, port: target, state: state) }
                    }
                }
            }
        }
    }

    private static func relay(
        _ connection: NIOAsyncChannel<ByteBuffer, ByteBuffer>,
        to host: String,
        port: Int,
        state: NIOLockedValueBox<(up: Bool, open: [ObjectIdentifier: any Channel])>
    ) async {
        guard state.withLockedValue({ $0.up }) else {
            try? await connection.channel.close()
            return
        }
        do {
            let upstream = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture { try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) }
            }
            state.withLockedValue {
                $0.open[ObjectIdentifier(connection.channel)] = connection.channel
                $0.open[ObjectIdentifier(upstream.channel)] = upstream.channel
            }
            defer {
                state.withLockedValue {
                    $0.open[ObjectIdentifier(connection.channel)] = nil
                    $0.open[ObjectIdentifier(upstream.channel)] = nil
                }
            }
            try await connection.executeThenClose { clientIn, clientOut in
                try await upstream.executeThenClose { serviceIn, serviceOut in
                    try await withThrowingTaskGroup(of: Void.self) { pipes in
                        pipes.addTask { for try await bytes in clientIn { try await serviceOut.write(bytes) } }
                        pipes.addTask { for try await bytes in serviceIn { try await clientOut.write(bytes) } }
                        // Either side ending ends the connection.
                        try await pipes.next()
                        pipes.cancelAll()
                    }
                }
            }
        } catch {
            try? await connection.channel.close()
        }
    }

    /// Cuts every connection through the relay and closes new ones until `bringUp()`.
    public func takeDown() async {
        let open = state.withLockedValue { state in
            state.up = false
            return Array(state.open.values)
        }
        for channel in open { try? await channel.close() }
    }

    public func bringUp() {
        state.withLockedValue { $0.up = true }
    }

    /// Stops listening and cuts every connection.
    public func close() async {
        await takeDown()
        try? await listener.channel.close()
        await accepting.value
    }
}
