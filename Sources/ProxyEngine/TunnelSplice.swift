import CLibevent
import ProxyCore

/// Moves bytes both ways between a client and an upstream (a CONNECT tunnel, or an upgraded
/// connection after 101), each direction as far as the other side's output allows. The proxy
/// looks at none of it.
enum TunnelSplice {
    /// One round each way; returns the bytes moved from the client and from the upstream.
    static func pump(client: ClientTransport, upstream: UpstreamLeg, highWatermark: Int) -> (fromClient: UInt64, fromUpstream: UInt64) {
        pump(clientInput: client.input, clientOutput: client.output, upstream: upstream, highWatermark: highWatermark)
    }

    /// The same round for any client side (an RFC 8441 stream's request and response buffers too).
    static func pump(
        clientInput: OpaquePointer, clientOutput: OpaquePointer, upstream: UpstreamLeg, highWatermark: Int
    ) -> (fromClient: UInt64, fromUpstream: UInt64) {
        guard let upstreamInput = upstream.input, let upstreamOutput = upstream.output else { return (0, 0) }
        return (
            move(from: clientInput, to: upstreamOutput, highWatermark: highWatermark),
            move(from: upstreamInput, to: clientOutput, highWatermark: highWatermark)
        )
    }

    /// Everything that side sent, whatever the other side's backlog (it hung up: this is the end).
    static func handOver(from input: OpaquePointer, to output: OpaquePointer) -> UInt64 {
        UInt64(EventBuffer.move(from: input, to: output, count: EventBuffer.length(input)))
    }

    private static func move(from input: OpaquePointer, to output: OpaquePointer, highWatermark: Int) -> UInt64 {
        let room = highWatermark - EventBuffer.length(output)
        guard room > 0 else { return 0 }
        return UInt64(EventBuffer.move(from: input, to: output, count: min(room, EventBuffer.length(input))))
    }
}
