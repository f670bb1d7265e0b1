import Logging
import NIOCore
import Synchronization
import NIOHTTP1
import NIOPosix

/// One HTTP request as a handler sees it: the whole body already read, within the configured limit.
public struct ServerRequest: Sendable {
    public var method: String
    /// The request target as sent, e.g. `/v1/webhooks/hpp-status?token=abc`.
    public var uri: String
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// The connecting process's user on a unix socket (`SO_PEERCRED`), `nil` over TCP.
    public var peerUID: UInt32?

    public init(method: String, uri: String, headers: [(name: String, value: String)] = [], body: [UInt8] = [], peerUID: UInt32? = nil) {
        self.method = method
        self.uri = uri
        self.headers = headers
        self.body = body
        self.peerUID = peerUID
    }

    /// The path without the query string.
    public var path: String { uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? uri }

    /// Query parameters, percent-decoded; the first occurrence of a name wins.
    public var query: [String: String] {
        guard let mark = uri.firstIndex(of: "?") else { return [:] }
        var result: [String: String] = [:]
        for pair in uri[uri.index(after: mark)...].split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = Self.decode(parts[0])
            if result[name] == nil { result[name] = parts.count > 1 ? Self.decode(parts[1]) : "" }
        }
        return result
    }

    public func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name.lowercased() == wanted }?.value
    }

    private static func decode(_ text: Substring) -> String {
        let bytes = Array(text.utf8)
        var out: [UInt8] = []
        var index = 0
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count,
                let value = UInt8(String(decoding: bytes[index + 1...index + 2], as: UTF8.self), radix: 16)
            {
                out.append(value)
                index += 3
            } else {
                out.append(bytes[index] == UInt8(ascii: "+") ? UInt8(ascii: " ") : bytes[index])
                index += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

public struct ServerResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// What a handler answers: a response, or an abrupt close with no response (a TCP reset where the socket allows).
public enum ServerReply: Sendable {
    case response(ServerResponse)
    case reset
}

public typealias RequestHandler = @Sendable (ServerRequest) async -> ServerReply

/// Where a server listens.
public enum ListenAddress: Sendable, CustomStringConvertible {
    case tcp(host: String, port: Int)
    case unix(path: String)
    /// An already bound and listening socket, e.g. passed by systemd socket activation.
    case adopted(descriptor: Int32)

    /// Parses `HOST:PORT`, `[V6]:PORT`, `unix:/path` or `/path`.
    public init?(parsing text: String) {
        if text.hasPrefix("unix:") { self = .unix(path: String(text.dropFirst(5))); return }
        if text.hasPrefix("/") { self = .unix(path: text); return }
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65_535).contains(port)
        else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return nil }
        self = .tcp(host: host, port: port)
    }

    public var description: String {
        switch self {
        case .tcp(let host, let port): host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        case .unix(let path): "unix:\(path)"
        case .adopted(let fd): "fd:\(fd)"
        }
    }
}

/// A small HTTP/1.1 server on SwiftNIO: keep-alive, a body limit, one task per connection, and nothing else.
/// ``bind(_:configuration:logger:handler:)`` binds at once (so callers learn the port); ``run()`` serves until the
/// surrounding task is cancelled, then closes the listener and waits for open connections to finish.
public struct HTTPServer: Sendable {
    public struct Configuration: Sendable {
        public var maxBodyBytes: Int
        public var backlog: Int32
        /// A request must arrive whole within this time of its connection being opened or of the previous answer:
        /// slow clients (slowloris) are cut off. Headers larger than SwiftNIO's parser limit (80 KiB) get 400.
        public var requestTimeout: Duration
        /// Connections served at once; more wait, unread, in the listen backlog until one ends. With `maxBodyBytes`
        /// this bounds the memory requests take: each connection holds at most one body of at most that size.
        public var maxConnections: Int
        /// Told of a request the server refuses itself, before any handler sees it (a body over the limit: 413), so
        /// that it is recorded like the handler's refusals.
        public var refused: (@Sendable (_ refusal: Refusal) async -> Void)?

        public init(
            maxBodyBytes: Int = 1 << 20, backlog: Int32 = 256, requestTimeout: Duration = .seconds(10), maxConnections: Int = 256,
            refused: (@Sendable (_ refusal: Refusal) async -> Void)? = nil
        ) {
            self.maxBodyBytes = maxBodyBytes
            self.backlog = backlog
            self.requestTimeout = requestTimeout
            self.maxConnections = maxConnections
            self.refused = refused
        }
    }

    /// A request the server answered itself: its status, a stable word and what was wrong (the path, never the query).
    public struct Refusal: Sendable, Equatable {
        public let status: Int
        public let error: String
        public let detail: String
    }

    typealias Connection = NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>

    private let listener: NIOAsyncChannel<Connection, Never>
    private let configuration: Configuration
    private let slots: ConnectionSlots
    private let handler: RequestHandler
    private let logger: Logger

    /// The bound address, e.g. with the port the kernel picked for `port: 0`.
    public let localAddress: ListenAddress

    public static func bind(
        _ address: ListenAddress, configuration: Configuration = Configuration(), logger: Logger,
        handler: @escaping RequestHandler
    ) async throws -> HTTPServer {
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: configuration.backlog)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.so_reuseaddr), value: 1)
        let initializer: @Sendable (any Channel) -> EventLoopFuture<Connection> = { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                return try Connection(wrappingChannelSynchronously: channel)
            }
        }
        let listener: NIOAsyncChannel<Connection, Never>
        switch address {
        case .tcp(let host, let port):
            listener = try await bootstrap.bind(host: host, port: port, childChannelInitializer: initializer)
        case .unix(let path):
            listener = try await bootstrap.bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true, childChannelInitializer: initializer)
        case .adopted(let descriptor):
            listener = try await bootstrap.bind(descriptor, childChannelInitializer: initializer)
        }
        let local: ListenAddress
        switch (address, listener.channel.localAddress) {
        case (.tcp, let bound?): local = .tcp(host: bound.ipAddress ?? "127.0.0.1", port: bound.port ?? 0)
        default: local = address
        }
        return HTTPServer(
            listener: listener, configuration: configuration, slots: ConnectionSlots(configuration.maxConnections), handler: handler,
            logger: logger, localAddress: local)
    }

    /// Returns once the listener's event loop has run a task: a wedged loop never returns (the watchdog's probe).
    public func probe() async {
        try? await listener.channel.eventLoop.submit {}.get()
    }

    public var port: Int? {
        if case .tcp(_, let port) = localAddress { return port }
        return nil
    }

    public func run() async throws {
        try await withThrowingDiscardingTaskGroup { group in
            try await listener.executeThenClose { inbound in
                for try await connection in inbound {
                    // At the limit the next connection waits for a slot instead of being served: it is not read, so
                    // a flood costs the kernel's backlog, not the daemon's memory.
                    _ = await slots.acquire {
                        logger.warning(
                            "all \(configuration.maxConnections) connections are busy: new ones wait for one to end (ingest.max_connections)")
                    }
                    group.addTask {
                        await serve(connection)
                        slots.release()
                    }
                }
            }
        }
    }

    private func serve(_ connection: Connection) async {
        let channel = connection.channel
        // Cut off a client that does not finish its request in time; re-armed after every answer.
        var deadline = channel.eventLoop.scheduleTask(in: .nanoseconds(configuration.requestTimeout.nanoseconds)) { channel.close(promise: nil) }
        defer { deadline.cancel() }
        var peerUID: UInt32?
        if case .unixDomainSocket = channel.localAddress, let socket = channel as? any SocketOptionProvider,
            let credentials: PeerCredentials = try? await socket.unsafeGetSocketOption(
                level: NIOBSDSocket.OptionLevel(rawValue: SOL_SOCKET), name: NIOBSDSocket.Option(rawValue: PeerCredentials.option)
            ).get()
        {
            peerUID = credentials.uid
        }
        let tooLarge = ServerResponse(
            status: 413, headers: [("Content-Type", "application/json")],
            body: Array(#"{"error":"too_large","detail":"request body exceeds \#(configuration.maxBodyBytes) bytes"}"#.utf8))
        do {
            try await connection.executeThenClose { inbound, outbound in
                var head: HTTPRequestHead?
                var body: [UInt8] = []
                for try await part in inbound {
                    switch part {
                    case .head(let requestHead):
                        head = requestHead
                        body.removeAll(keepingCapacity: true)
                        if let length = requestHead.headers.first(name: "Content-Length").flatMap(Int.init) {
                            // Refused before reading a byte of it: a 50 MB body is never received.
                            if length > configuration.maxBodyBytes {
                                await refusedAsTooLarge(requestHead, length: "\(length) bytes")
                                try await write(tooLarge, keepAlive: false, version: requestHead.version, to: outbound)
                                return
                            }
                            body.reserveCapacity(length)
                        }
                    case .body(let chunk):
                        let needed = body.count + chunk.readableBytes
                        if needed > configuration.maxBodyBytes {
                            if let requestHead = head {
                                await refusedAsTooLarge(requestHead, length: "more than \(configuration.maxBodyBytes) bytes (sent without a length)")
                                try await write(tooLarge, keepAlive: false, version: requestHead.version, to: outbound)
                            }
                            return
                        }
                        // A chunked body grows by doubling, but never past the limit: one body costs at most the limit.
                        if needed > body.capacity { body.reserveCapacity(min(max(needed, body.capacity * 2), configuration.maxBodyBytes)) }
                        body.append(contentsOf: chunk.readableBytesView)
                    case .end:
                        guard let requestHead = head else { return }
                        deadline.cancel()
                        let request = ServerRequest(
                            method: requestHead.method.rawValue, uri: requestHead.uri,
                            headers: requestHead.headers.map { ($0.name, $0.value) }, body: body, peerUID: peerUID)
                        let reply = await handler(request)
                        switch reply {
                        case .reset:
                            // SO_LINGER 0 turns the close into a TCP RST: the client sees a connection reset.
                            if let socket = connection.channel as? any SocketOptionProvider {
                                try? await socket.setSoLinger(linger(l_onoff: 1, l_linger: 0)).get()
                            }
                            return
                        case .response(let response):
                            // While connections wait for a slot, an answered one is closed rather than kept idle for
                            // the client's next request: its slot goes to the longest waiting connection.
                            let keepAlive = requestHead.isKeepAlive && slots.waitingCount == 0
                            try await write(response, keepAlive: keepAlive, version: requestHead.version, to: outbound)
                            if !keepAlive { return }
                        }
                        head = nil
                        deadline = channel.eventLoop.scheduleTask(in: .nanoseconds(configuration.requestTimeout.nanoseconds)) {
                            channel.close(promise: nil)
                        }
                    }
                }
            }
        } catch {
            logger.debug("connection ended: \(error)")
        }
    }

    private func refusedAsTooLarge(_ head: HTTPRequestHead, length: String) async {
        let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? ""
        await configuration.refused?(
            Refusal(
                status: 413, error: "too_large",
                detail:
                    "\(head.method.rawValue.prefix(20)) \(path.prefix(200)): a body of \(length) is over the limit of \(configuration.maxBodyBytes) (ingest.max_body_bytes)"
            ))
    }

    private func write(
        _ response: ServerResponse, keepAlive: Bool, version: HTTPVersion,
        to outbound: NIOAsyncChannelOutboundWriter<HTTPServerResponsePart>
    ) async throws {
        var headers = HTTPHeaders(response.headers.map { ($0.name, $0.value) })
        headers.replaceOrAdd(name: "Content-Length", value: String(response.body.count))
        headers.replaceOrAdd(name: "Connection", value: keepAlive ? "keep-alive" : "close")
        // All parts in one write: one flush, so an answer leaves in one writev (it took a write for the head and one for the body).
        var parts: [HTTPServerResponsePart] = [
            .head(HTTPResponseHead(version: version, status: .init(statusCode: response.status), headers: headers))
        ]
        if !response.body.isEmpty { parts.append(.body(.byteBuffer(ByteBuffer(bytes: response.body)))) }
        parts.append(.end(nil))
        try await outbound.write(contentsOf: parts)
    }
}

/// Linux's `struct ucred` (`SO_PEERCRED`), which Glibc's Swift module does not export.
struct PeerCredentials {
    static let option: Int32 = 17  // SO_PEERCRED on Linux
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
}

/// The connections that may be served at once; the rest wait their turn in arrival order.
///
/// The accept loop waits in ``acquire()`` before it takes the next connection, so at most one accepted connection
/// waits here; the others wait in NIO's accept buffer and the kernel's listen backlog, unread.
final class ConnectionSlots: Sendable {
    enum Entry {
        case atOnce
        /// Waited, and the slots were not all busy before: the start of a saturation, logged once rather than per
        /// connection.
        case firstToWait
        /// Waited, in a saturation already announced.
        case queued
    }

    private struct State {
        var free: Int
        var waiting: [CheckedContinuation<Void, Never>] = []
        /// Since a connection last had to wait, no slot has been free: one saturation.
        var saturated = false
    }

    private let state: Mutex<State>

    init(_ count: Int) { state = Mutex(State(free: count)) }

    /// Connections waiting for a slot now.
    var waitingCount: Int { state.withLock { $0.waiting.count } }

    /// Returns once the caller has a slot. `announce` runs when a saturation starts, as the caller begins to wait
    /// (not when its wait ends, which may be long after).
    func acquire(announcingSaturation announce: () -> Void = {}) async -> Entry {
        var entry = Entry.atOnce
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            entry = state.withLock { state in
                if state.free > 0 {
                    state.free -= 1
                    return .atOnce
                }
                state.waiting.append(continuation)
                defer { state.saturated = true }
                return state.saturated ? .queued : .firstToWait
            }
            switch entry {
            case .atOnce: continuation.resume()
            case .firstToWait: announce()
            case .queued: break
            }
        }
        return entry
    }

    /// Hands the slot to the longest waiting connection, or frees it (which ends a saturation).
    func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.waiting.isEmpty else {
                state.free += 1
                state.saturated = false
                return nil
            }
            return state.waiting.removeFirst()
        }
        next?.resume()
    }
}

extension Duration {
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
