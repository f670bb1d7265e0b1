/// HTTP header fields in order, with case-insensitive lookup.
public struct HTTPHeaders: Sendable, Hashable, Sequence {
    public private(set) var fields: [Field]

    public struct Field: Sendable, Hashable {
        public let name: String
        public let value: String
    }

    public init(_ fields: [(String, String)] = []) {
        self.fields = fields.map { Field(name: $0.0, value: $0.1) }
    }

    public mutating func add(_ name: String, _ value: String) { fields.append(Field(name: name, value: value)) }

    public subscript(name: String) -> String? {
        fields.first { $0.name.caseInsensitiveEquals(name) }?.value
    }

    public func makeIterator() -> IndexingIterator<[Field]> { fields.makeIterator() }
}

extension String {
    func caseInsensitiveEquals(_ other: String) -> Bool {
        utf8.count == other.utf8.count && lowercased() == other.lowercased()
    }
}

/// Basic-auth credentials. The password is never printed: not by `description`, not by `dump`.
public struct BasicCredentials: Sendable, Hashable, CustomStringConvertible, CustomReflectable {
    public let username: String
    public let password: String

    public init(username: String, password: String) {
        self.username = username
        self.password = password
    }

    public var description: String { "BasicCredentials(username: \(username), password: <redacted>)" }
    public var customMirror: Mirror { Mirror(self, children: ["username": username, "password": "<redacted>"]) }
}

public struct HTTPRequest: Sendable {
    public var method: String
    public var url: String
    public var headers: HTTPHeaders
    public var body: [UInt8]?
    public var credentials: BasicCredentials?
    /// Overrides the transport's total timeout for this request.
    public var timeout: Duration?
    /// Send on a new connection, never a pooled one. A request on a reused connection that dies before any answer
    /// is re-sent by libcurl on its own; for a write that would be a second side effect nobody asked for, so
    /// writes take a fresh connection and every retry stays with the caller.
    public var freshConnection: Bool

    public init(
        method: String, url: String, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8]? = nil,
        credentials: BasicCredentials? = nil, timeout: Duration? = nil, freshConnection: Bool = false
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.credentials = credentials
        self.timeout = timeout
        self.freshConnection = freshConnection
    }
}

public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    public var body: [UInt8]

    public init(status: Int, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A 2xx: the server did what was asked.
    public var succeeded: Bool { (200..<300).contains(status) }
}

/// A failure below HTTP: nothing, or not all of a response, came back.
public struct TransportError: Error, Sendable, CustomStringConvertible {
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        public static let connectFailed = Kind(name: "connect failed")
        public static let timeout = Kind(name: "timeout")
        public static let connectionReset = Kind(name: "connection reset")
        public static let tls = Kind(name: "TLS failure")
        public static let responseTooLarge = Kind(name: "response too large")
        public static let invalidRequest = Kind(name: "invalid request")
        public static let shutdown = Kind(name: "transport shut down")
        public static let other = Kind(name: "transport failure")
        public var description: String { name }
    }

    public let kind: Kind
    /// `true` when the request may have reached the server, so a side effect may have happened.
    public let requestMayHaveBeenSent: Bool
    /// The transport's own words (libcurl's error buffer), free of credentials.
    public let detail: String

    public init(kind: Kind, requestMayHaveBeenSent: Bool, detail: String) {
        self.kind = kind
        self.requestMayHaveBeenSent = requestMayHaveBeenSent
        self.detail = detail
    }

    public var description: String { "\(kind): \(detail)" }
}

/// Sends one HTTP request. Implementations must not block the caller's thread while waiting.
public protocol HTTPTransport: Sendable {
    /// - Throws: ``TransportError`` or `CancellationError`.
    func execute(_ request: HTTPRequest) async throws -> HTTPResponse
}
