internal import CCurl
import Foundation
import Synchronization

/// ``HTTPTransport`` over libcurl. One `curl_multi` handle, driven by one dedicated thread, carries every transfer:
/// connections are reused across requests, HTTP/2 is negotiated over TLS when offered, and no Swift task ever blocks
/// on the network. TLS verification stays on; `http_proxy`/`https_proxy`/`no_proxy` are honoured (libcurl reads
/// them itself).
public final class CurlTransport: HTTPTransport {
    public struct Configuration: Sendable {
        public var connectTimeout: Duration
        public var requestTimeout: Duration
        public var userAgent: String
        public var maxConnectionsPerHost: Int
        public var maxResponseBytes: Int
        /// Extra CA bundle (PEM) to trust, e.g. for a TLS-terminating test server. `nil` uses the system store.
        public var caBundlePath: String?
        /// Connect to this unix socket instead of the URL's host (the daemon's ingest socket, for tools and benches).
        public var unixSocketPath: String?

        public init(
            connectTimeout: Duration = .seconds(5), requestTimeout: Duration = .seconds(30),
            userAgent: String = "klarna-reconciler", maxConnectionsPerHost: Int = 32,
            maxResponseBytes: Int = 8 << 20, caBundlePath: String? = nil, unixSocketPath: String? = nil
        ) {
            self.connectTimeout = connectTimeout
            self.requestTimeout = requestTimeout
            self.userAgent = userAgent
            self.maxConnectionsPerHost = maxConnectionsPerHost
            self.maxResponseBytes = maxResponseBytes
            self.caBundlePath = caBundlePath
            self.unixSocketPath = unixSocketPath
        }
    }

    public let configuration: Configuration
    private let driver: CurlMultiDriver

    public init(configuration: Configuration = Configuration()) {
        CurlGlobal.initialize()
        self.configuration = configuration
        self.driver = CurlMultiDriver(maxConnectionsPerHost: configuration.maxConnectionsPerHost)
    }

    deinit { driver.shutdown() }

    /// The libcurl version string, for `--version` and the User-Agent's platform part.
    public static var libcurlVersion: String { String(cString: curl_version()) }

    public func execute(_ request: HTTPRequest) async throws -> HTTPResponse {
        // A task cancelled before this point would otherwise still send: its cancel could reach the driver first.
        try Task.checkCancellation()
        let transfer = try CurlTransfer(request: request, configuration: configuration)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                transfer.continuation = continuation
                driver.submit(transfer)
            }
        } onCancel: {
            driver.cancel(transfer)
        }
    }

    /// Stops the driver thread; in-flight requests fail with ``TransportError/Kind/shutdown``.
    public func shutdown() { driver.shutdown() }
}

private enum CurlGlobal {
    // curl_global_init is not thread-safe: run it exactly once, before the first handle exists.
    static let initialized: Bool = curl_global_init(3 /* CURL_GLOBAL_ALL */) == CURLE_OK
    static func initialize() { precondition(initialized, "curl_global_init failed") }
}

/// One request in flight: its easy handle, the buffers libcurl writes into, and the continuation to resume.
final class CurlTransfer: @unchecked Sendable {
    // Touched by the creating task until submit(), then only by the driver thread.
    let easy: UnsafeMutableRawPointer
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private let errorBuffer: UnsafeMutablePointer<CChar>
    var continuation: CheckedContinuation<HTTPResponse, any Error>?
    private var body: [UInt8] = []
    private var headers = HTTPHeaders()
    private let maxResponseBytes: Int
    private(set) var overflowed = false

    init(request: HTTPRequest, configuration: CurlTransport.Configuration) throws {
        guard let easy = curl_easy_init() else {
            throw TransportError(kind: .other, requestMayHaveBeenSent: false, detail: "curl_easy_init failed")
        }
        self.easy = easy
        self.maxResponseBytes = configuration.maxResponseBytes
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
        do { try configure(request, configuration) } catch {
            release()
            throw error
        }
    }

    private func configure(_ request: HTTPRequest, _ configuration: CurlTransport.Configuration) throws {
        func check(_ code: CURLcode, _ what: String) throws {
            guard code == CURLE_OK else {
                throw TransportError(
                    kind: .invalidRequest, requestMayHaveBeenSent: false,
                    detail: "\(what): \(String(cString: curl_easy_strerror(code)))")
            }
        }
        try check(ccurl_easy_setopt_string(easy, CURLOPT_URL, request.url), "URL")
        try check(ccurl_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, "http,https"), "protocols")
        try check(ccurl_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1), "nosignal")
        try check(ccurl_easy_setopt_long(easy, CURLOPT_TCP_KEEPALIVE, 1), "keepalive")
        if request.freshConnection {
            try check(ccurl_easy_setopt_long(easy, CURLOPT_FRESH_CONNECT, 1), "fresh connect")
        }
        try check(ccurl_easy_setopt_long(easy, CURLOPT_SSL_VERIFYPEER, 1), "verify peer")
        try check(ccurl_easy_setopt_long(easy, CURLOPT_SSL_VERIFYHOST, 2), "verify host")
        if let unixSocketPath = configuration.unixSocketPath {
            try check(ccurl_easy_setopt_string(easy, CURLOPT_UNIX_SOCKET_PATH, unixSocketPath), "unix socket")
        }
        if let caBundlePath = configuration.caBundlePath {
            try check(ccurl_easy_setopt_string(easy, CURLOPT_CAINFO, caBundlePath), "CA bundle")
        }
        try check(ccurl_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS)), "HTTP version")
        try check(ccurl_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, configuration.connectTimeout.milliseconds), "connect timeout")
        let timeout = request.timeout ?? configuration.requestTimeout
        try check(ccurl_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, timeout.milliseconds), "timeout")
        try check(ccurl_easy_setopt_string(easy, CURLOPT_USERAGENT, configuration.userAgent), "user agent")
        try check(ccurl_easy_setopt_pointer(easy, CURLOPT_ERRORBUFFER, UnsafeMutableRawPointer(errorBuffer)), "error buffer")

        if let credentials = request.credentials {
            // libcurl builds the Authorization header itself: the secret never sits in a Swift header list.
            try check(ccurl_easy_setopt_long(easy, CURLOPT_HTTPAUTH, 1 /* CURLAUTH_BASIC */), "auth")
            try check(ccurl_easy_setopt_string(easy, CURLOPT_USERNAME, credentials.username), "username")
            try check(ccurl_easy_setopt_string(easy, CURLOPT_PASSWORD, credentials.password), "password")
        }

        switch request.method {
        case "GET":
            try check(ccurl_easy_setopt_long(easy, CURLOPT_HTTPGET, 1), "GET")
        default:
            try check(ccurl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, request.method), "method")
            if let body = request.body, !body.isEmpty {
                try check(ccurl_easy_setopt_offset(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count)), "body size")
                try body.withUnsafeBytes { buffer in
                    // COPYPOSTFIELDS copies: the Swift array may go away after this call.
                    try check(ccurl_easy_setopt_pointer(easy, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: buffer.baseAddress!)), "body")
                }
            } else if request.method == "POST" || request.body != nil {
                try check(ccurl_easy_setopt_offset(easy, CURLOPT_POSTFIELDSIZE_LARGE, 0), "body size")
                try check(ccurl_easy_setopt_string(easy, CURLOPT_COPYPOSTFIELDS, ""), "body")
            }
        }

        var list: UnsafeMutablePointer<curl_slist>?
        for field in request.headers {
            guard !field.name.contains(where: { $0 == "\r" || $0 == "\n" || $0 == ":" }),
                !field.value.contains(where: { $0 == "\r" || $0 == "\n" })
            else {
                curl_slist_free_all(list)
                throw TransportError(kind: .invalidRequest, requestMayHaveBeenSent: false, detail: "header \(field.name) contains a line break")
            }
            list = curl_slist_append(list, "\(field.name): \(field.value)")
        }
        // No "Expect: 100-continue" round trip for small JSON bodies.
        list = curl_slist_append(list, "Expect:")
        headerList = list
        try check(ccurl_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, list), "headers")

        let this = Unmanaged.passUnretained(self).toOpaque()
        try check(ccurl_easy_setopt_data_callback(easy, CURLOPT_WRITEFUNCTION, curlWriteBody), "write function")
        try check(ccurl_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, this), "write data")
        try check(ccurl_easy_setopt_data_callback(easy, CURLOPT_HEADERFUNCTION, curlWriteHeader), "header function")
        try check(ccurl_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, this), "header data")
    }

    fileprivate func appendBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if body.count + bytes.count > maxResponseBytes {
            overflowed = true
            return false
        }
        body.append(contentsOf: bytes)
        return true
    }

    fileprivate func appendHeaderLine(_ bytes: UnsafeRawBufferPointer) {
        let line = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if line.hasPrefix("HTTP/") {
            // A new status line (after 100 Continue or a proxy CONNECT) starts a new header block.
            headers = HTTPHeaders()
        } else if let colon = line.firstIndex(of: ":") {
            let name = String(line[..<colon]).trimmingCharacters(in: .whitespaces)
            let value = String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
            headers.add(name, value)
        }
    }

    /// Builds the outcome once libcurl reports the transfer done. Called on the driver thread.
    func finish(code: CURLcode) -> Result<HTTPResponse, any Error> {
        if code == CURLE_OK {
            var status = 0
            _ = ccurl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
            return .success(HTTPResponse(status: status, headers: headers, body: body))
        }
        return .failure(transportError(for: code))
    }

    private func transportError(for code: CURLcode) -> TransportError {
        var detail = String(cString: errorBuffer)
        if detail.isEmpty { detail = String(cString: curl_easy_strerror(code)) }
        var pretransfer: curl_off_t = 0
        _ = ccurl_easy_getinfo_offset(easy, CURLINFO_PRETRANSFER_TIME_T, &pretransfer)
        let sent = pretransfer > 0
        switch code {
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY:
            return TransportError(kind: .connectFailed, requestMayHaveBeenSent: false, detail: detail)
        case CURLE_OPERATION_TIMEDOUT:
            return TransportError(kind: .timeout, requestMayHaveBeenSent: sent, detail: detail)
        case CURLE_GOT_NOTHING, CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_PARTIAL_FILE, CURLE_HTTP2, CURLE_HTTP2_STREAM:
            return TransportError(kind: .connectionReset, requestMayHaveBeenSent: true, detail: detail)
        case CURLE_WRITE_ERROR where overflowed:
            return TransportError(kind: .responseTooLarge, requestMayHaveBeenSent: true, detail: "response larger than \(maxResponseBytes) bytes")
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CACERT_BADFILE:
            return TransportError(kind: .tls, requestMayHaveBeenSent: false, detail: detail)
        case CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL:
            return TransportError(kind: .invalidRequest, requestMayHaveBeenSent: false, detail: detail)
        default:
            return TransportError(kind: .other, requestMayHaveBeenSent: sent, detail: detail)
        }
    }

    func release() {
        curl_easy_cleanup(easy)
        curl_slist_free_all(headerList)
        headerList = nil
        errorBuffer.deallocate()
    }
}

private let curlWriteBody: ccurl_data_callback = { data, size, count, userdata in
    guard let data, let userdata else { return 0 }
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userdata).takeUnretainedValue()
    let length = size * count
    // Returning less than `length` makes libcurl abort the transfer with CURLE_WRITE_ERROR.
    return transfer.appendBody(UnsafeRawBufferPointer(start: data, count: length)) ? length : 0
}

private let curlWriteHeader: ccurl_data_callback = { data, size, count, userdata in
    guard let data, let userdata else { return 0 }
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userdata).takeUnretainedValue()
    transfer.appendHeaderLine(UnsafeRawBufferPointer(start: data, count: size * count))
    return size * count
}

/// Owns the `curl_multi` handle and the thread that drives it. Other threads talk to it only through `commands`
/// and `curl_multi_wakeup`, so libcurl's handles are only ever touched from one thread.
final class CurlMultiDriver: @unchecked Sendable {
    private enum Command {
        case add(CurlTransfer)
        case cancel(ObjectIdentifier)
    }

    private let multi: UnsafeMutableRawPointer
    private let commands = Mutex<(queue: [Command], stopped: Bool)>(([], false))
    // Driver-thread state.
    private var active: [UnsafeMutableRawPointer: CurlTransfer] = [:]
    private let finished = DispatchSemaphore(value: 0)

    init(maxConnectionsPerHost: Int) {
        multi = curl_multi_init()
        _ = ccurl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, maxConnectionsPerHost)
        _ = ccurl_multi_setopt_long(multi, CURLMOPT_PIPELINING, 2 /* CURLPIPE_MULTIPLEX */)
        let thread = Thread { [self] in run() }
        thread.name = "curl-multi"
        thread.start()
    }

    func submit(_ transfer: CurlTransfer) {
        let accepted = commands.withLock { state -> Bool in
            guard !state.stopped else { return false }
            state.queue.append(.add(transfer))
            return true
        }
        if accepted {
            curl_multi_wakeup(multi)
        } else {
            transfer.release()
            transfer.continuation?.resume(
                throwing: TransportError(kind: .shutdown, requestMayHaveBeenSent: false, detail: "transport is shut down"))
        }
    }

    func cancel(_ transfer: CurlTransfer) {
        commands.withLock { $0.queue.append(.cancel(ObjectIdentifier(transfer))) }
        curl_multi_wakeup(multi)
    }

    func shutdown() {
        let first = commands.withLock { state -> Bool in
            defer { state.stopped = true }
            return !state.stopped
        }
        guard first else { return }
        curl_multi_wakeup(multi)
        finished.wait()
    }

    private func run() {
        var running: Int32 = 0
        while true {
            let (pending, stopped) = commands.withLock { state in
                defer { state.queue.removeAll(keepingCapacity: true) }
                return (state.queue, state.stopped)
            }
            for command in pending { apply(command) }
            if stopped { break }
            curl_multi_perform(multi, &running)
            collectFinished()
            var ignored: Int32 = 0
            curl_multi_poll(multi, nil, 0, 1_000, &ignored)
        }
        for (_, transfer) in active {
            complete(transfer, .failure(TransportError(kind: .shutdown, requestMayHaveBeenSent: true, detail: "transport shut down")))
        }
        active.removeAll()
        curl_multi_cleanup(multi)
        finished.signal()
    }

    private func apply(_ command: Command) {
        switch command {
        case .add(let transfer):
            active[transfer.easy] = transfer
            curl_multi_add_handle(multi, transfer.easy)
        case .cancel(let id):
            // The cancel may arrive before, during or after the transfer; only an active one needs undoing.
            guard let transfer = active.values.first(where: { ObjectIdentifier($0) == id }) else { return }
            complete(transfer, .failure(CancellationError()))
        }
    }

    private func collectFinished() {
        var remaining: Int32 = 0
        while let message = curl_multi_info_read(multi, &remaining) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle,
                let transfer = active[easy]
            else { continue }
            complete(transfer, transfer.finish(code: ccurl_msg_result(message)))
        }
    }

    private func complete(_ transfer: CurlTransfer, _ result: Result<HTTPResponse, any Error>) {
        curl_multi_remove_handle(multi, transfer.easy)
        active[transfer.easy] = nil
        let continuation = transfer.continuation
        transfer.continuation = nil
        transfer.release()
        continuation?.resume(with: result)
    }
}

extension Duration {
    var milliseconds: Int {
        let (seconds, attoseconds) = components
        return Int(seconds) * 1_000 + Int(attoseconds / 1_000_000_000_000_000)
    }
}
