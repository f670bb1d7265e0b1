import Foundation
import Logging
import ReconcilerCore
import Telemetry

/// Typed calls to Klarna's HPP, KP, OM, Settlements, Disputes and Klarna Network APIs over an ``HTTPTransport``.
///
/// Every call logs one line with a local request id, the operation, the HTTP status, the duration and Klarna's
/// correlation id, and fails with a ``KlarnaAPIError`` that says whether retrying is safe. Retrying itself is the
/// caller's choice: side effects belong to the engine's intents (Engine's `Reconciler`), not to this layer.
public struct KlarnaClient: Sendable {
    public let configuration: KlarnaConfiguration
    private let transport: any HTTPTransport
    let logger: Logger

    /// The account this client calls for: the `account` label of its calls' metrics.
    public let account: AccountID

    public init(configuration: KlarnaConfiguration, transport: any HTTPTransport, logger: Logger, account: AccountID = .default) {
        self.configuration = configuration
        self.transport = transport
        self.logger = logger
        self.account = account
    }

    /// The User-Agent this product sends, in Klarna's SDK convention.
    public static func userAgent(libcurl: String) -> String {
        "\(ProductInfo.name)/\(ProductInfo.version) (Library/\(ProductInfo.name)_\(ProductInfo.version); Language/Swift_6; OS/Linux; \(libcurl.split(separator: " ").first ?? "libcurl"))"
    }

    // MARK: Hosted Payment Page

    public func readHPPSession(id: String) async throws -> HPPSession {
        try await decode(HPPSession.self, send(.readHPPSession, "GET", "/hpp/v1/sessions/\(segment(id))", resource: id))
    }

    /// Disables the session; the consumer can no longer pay with it. Klarna answers 400 for a completed session.
    public func disableHPPSession(id: String) async throws {
        _ = try await send(.disableHPPSession, "DELETE", "/hpp/v1/sessions/\(segment(id))", resource: id)
    }

    // MARK: Klarna Payments

    public func readPaymentSession(id: String) async throws -> PaymentSession {
        try await decode(PaymentSession.self, send(.readPaymentSession, "GET", "/payments/v1/sessions/\(segment(id))", resource: id))
    }

    /// Places the order with an authorization token (valid 60 minutes). Klarna documents no idempotency for this
    /// call: after an unclear failure read the KP session before anything else (``KlarnaAPIError/outcomeUnknown``).
    public func createOrder(
        authorizationToken: String, order: CreateOrderRequest, idempotencyKey: String? = nil
    ) async throws -> CreateOrderResponse {
        let path = "/payments/v1/authorizations/\(segment(authorizationToken))/order"
        return try await decode(
            CreateOrderResponse.self,
            send(.createOrder, "POST", path, resource: Redact.tail(authorizationToken), body: encode(order), idempotencyKey: idempotencyKey))
    }

    /// Releases an authorization that will not be used (`204`).
    public func cancelAuthorization(authorizationToken: String) async throws {
        let path = "/payments/v1/authorizations/\(segment(authorizationToken))"
        _ = try await send(.cancelAuthorization, "DELETE", path, resource: Redact.tail(authorizationToken))
    }

    public func createCustomerToken(
        authorizationToken: String, request: CustomerTokenRequest, idempotencyKey: String? = nil
    ) async throws -> CustomerTokenResponse {
        let path = "/payments/v1/authorizations/\(segment(authorizationToken))/customer-token"
        return try await decode(
            CustomerTokenResponse.self,
            send(.createCustomerToken, "POST", path, resource: Redact.tail(authorizationToken), body: encode(request), idempotencyKey: idempotencyKey)
        )
    }

    // MARK: Customer tokens

    /// The token's status (and what else Klarna says of it); the token goes to the log by its tail only.
    public func readCustomerToken(_ token: String) async throws -> CustomerToken {
        try await decode(
            CustomerToken.self, send(.readCustomerToken, "GET", "/customer-token/v1/tokens/\(segment(token))", resource: Redact.tail(token)))
    }

    /// Places an order with the customer token: `body` as it was built when the charge was recorded, the same bytes on
    /// every attempt. The same `idempotencyKey` within 24 h places one order and answers the same.
    public func chargeCustomerToken(_ token: String, body: String, idempotencyKey: String) async throws -> CreateOrderResponse {
        let path = "/customer-token/v1/tokens/\(segment(token))/order"
        return try await decode(
            CreateOrderResponse.self,
            send(.chargeCustomerToken, "POST", path, resource: Redact.tail(token), body: Array(body.utf8), idempotencyKey: idempotencyKey))
    }

    /// Cancels the customer token (`202`): a status Klarna keeps, so sending it again changes nothing.
    public func cancelCustomerToken(_ token: String, idempotencyKey: String) async throws {
        let path = "/customer-token/v1/tokens/\(segment(token))/status"
        _ = try await send(
            .cancelCustomerToken, "PATCH", path, resource: Redact.tail(token), body: Array(#"{"status":"CANCELLED"}"#.utf8),
            idempotencyKey: idempotencyKey)
    }

    // MARK: Order Management

    public func readOrder(id: String) async throws -> Order {
        try await decode(Order.self, send(.readOrder, "GET", "/ordermanagement/v1/orders/\(segment(id))", resource: id))
    }

    /// Captures `request.capturedAmount`. The same `idempotencyKey` within 24 h captures once and answers the same.
    /// Klarna's `201 Created` is the capture made, its id in headers the spec does not require (``CaptureCreated``).
    /// Another 2xx that names no capture is not an answer Klarna documents: its outcome is unknown, and a read of the
    /// order tells (``KlarnaAPIError/Failure/undecodableResponse(status:detail:)``).
    public func createCapture(orderID: String, request: CaptureRequest, idempotencyKey: String) async throws -> CaptureCreated {
        let path = "/ordermanagement/v1/orders/\(segment(orderID))/captures"
        let response = try await send(.createCapture, "POST", path, resource: orderID, body: encode(request), idempotencyKey: idempotencyKey)
        let created = CaptureCreated(captureIDHeader: response.http.headers["Capture-Id"], location: response.http.headers["Location"])
        guard created.captureID != nil || response.http.status == 201 else {
            throw KlarnaAPIError(
                operation: .createCapture,
                failure: .undecodableResponse(status: response.http.status, detail: "neither 201 Created nor a Capture-Id header"),
                requestID: response.requestID, correlationIDHeader: response.http.headers["Klarna-Correlation-Id"])
        }
        return created
    }

    /// Refunds `request.refundedAmount`. The same `idempotencyKey` within 24 h refunds once and answers the same. Klarna's
    /// `201 Created` names the refund in a `Refund-Id` header (or `Location`, `…/refunds/{refund_id}`); another 2xx
    /// that names none has an unknown outcome, which a read of the order tells (by the refund's reference).
    public func createRefund(orderID: String, request: RefundRequest, idempotencyKey: String) async throws -> String? {
        let path = "/ordermanagement/v1/orders/\(segment(orderID))/refunds"
        let response = try await send(.createRefund, "POST", path, resource: orderID, body: encode(request), idempotencyKey: idempotencyKey)
        let location = response.http.headers["Location"].flatMap { URL(string: $0)?.pathComponents } ?? []
        let fromLocation = location.count >= 2 && location[location.count - 2] == "refunds" ? location.last : nil
        let refundID = response.http.headers["Refund-Id"].flatMap { $0.isEmpty ? nil : $0 } ?? fromLocation
        guard refundID != nil || response.http.status == 201 else {
            throw KlarnaAPIError(
                operation: .createRefund,
                failure: .undecodableResponse(status: response.http.status, detail: "neither 201 Created nor a Refund-Id header"),
                requestID: response.requestID, correlationIDHeader: response.http.headers["Klarna-Correlation-Id"])
        }
        return refundID
    }

    public func extendAuthorizationTime(orderID: String, idempotencyKey: String) async throws {
        let path = "/ordermanagement/v1/orders/\(segment(orderID))/extend-authorization-time"
        _ = try await send(.extendAuthorizationTime, "POST", path, resource: orderID, idempotencyKey: idempotencyKey)
    }

    /// Cancels an order that has no captures (else 403 `CANCEL_NOT_ALLOWED`).
    public func cancelOrder(orderID: String, idempotencyKey: String) async throws {
        let path = "/ordermanagement/v1/orders/\(segment(orderID))/cancel"
        _ = try await send(.cancelOrder, "POST", path, resource: orderID, idempotencyKey: idempotencyKey)
    }

    /// Releases what a partial capture left authorized (`204`; 403 when the order is cancelled or has no captures).
    public func releaseRemainingAuthorization(orderID: String, idempotencyKey: String) async throws {
        let path = "/ordermanagement/v1/orders/\(segment(orderID))/release-remaining-authorization"
        _ = try await send(.releaseRemainingAuthorization, "POST", path, resource: orderID, idempotencyKey: idempotencyKey)
    }

    // MARK: Klarna Network

    public func readPaymentRequest(id: String) async throws -> PaymentRequest {
        let path = "/v2/payment/requests/\(segment(id))"
        return try await decode(PaymentRequest.self, send(.readPaymentRequest, "GET", path, resource: id, base: configuration.networkBaseURL))
    }

    // MARK: Plumbing

    struct Answer {
        let http: HTTPResponse
        let requestID: String
        let operation: KlarnaOperation
    }

    /// `query` goes percent-encoded after `path` (``queryString(_:)``), so a URL in a value cannot trip the "//" check.
    func send(
        _ operation: KlarnaOperation, _ method: String, _ path: String, resource: String, query: [(String, String)] = [],
        body: [UInt8]? = nil, idempotencyKey: String? = nil, base: String? = nil, contentType: String = "application/json"
    ) async throws -> Answer {
        let requestID = Self.newRequestID()
        // Paths are constant templates with one id each: an empty id shows as "//" or a trailing "/". Query values
        // are ids or filters too: an empty one would at best be ignored, widening the answer (every transaction).
        guard !path.contains("//"), !path.hasSuffix("/"), !query.contains(where: { $0.1.isEmpty }) else {
            throw KlarnaAPIError(
                operation: operation,
                failure: .transport(TransportError(kind: .invalidRequest, requestMayHaveBeenSent: false, detail: "empty resource id or query value")),
                requestID: requestID)
        }
        var log = logger
        log[metadataKey: "request.id"] = .string(requestID)
        log[metadataKey: "klarna.operation"] = .string(operation.name)
        log[metadataKey: "klarna.resource"] = .string(resource)

        var headers = HTTPHeaders([("Accept", "application/json")])
        if body != nil { headers.add("Content-Type", contentType) }
        if let idempotencyKey {
            headers.add("Klarna-Idempotency-Key", idempotencyKey)
            log[metadataKey: "klarna.idempotency_key"] = .string(idempotencyKey)
        }
        let request = HTTPRequest(
            method: method, url: (base ?? configuration.baseURL) + path + Self.queryString(query), headers: headers,
            body: body, credentials: configuration.credentials, freshConnection: operation.safety != .read)

        let started = ContinuousClock.now
        let response: HTTPResponse
        do {
            response = try await transport.execute(request)
        } catch let error as TransportError {
            count(operation, status: nil, took: ContinuousClock.now - started)
            log[metadataKey: "duration_ms"] = .stringConvertible((ContinuousClock.now - started).milliseconds)
            log.info("Klarna call failed without a response: \(error)")
            throw KlarnaAPIError(operation: operation, failure: .transport(error), requestID: requestID)
        }
        let correlation = response.headers["Klarna-Correlation-Id"]
        count(operation, status: response.status, took: ContinuousClock.now - started)
        log[metadataKey: "http.status"] = .stringConvertible(response.status)
        log[metadataKey: "duration_ms"] = .stringConvertible((ContinuousClock.now - started).milliseconds)
        if let correlation { log[metadataKey: "klarna.correlation_id"] = .string(correlation) }

        guard response.succeeded else {
            let parsed = try? KlarnaJSON.decoder().decode(KlarnaErrorBody.self, from: Data(response.body))
            let error = KlarnaAPIError(
                operation: operation, failure: .http(status: response.status), requestID: requestID,
                errorCode: parsed?.errorCode, errorMessages: parsed?.errorMessages ?? [],
                correlationID: parsed?.correlationID, correlationIDHeader: correlation,
                rateLimit: RateLimitHeaders(headers: response.headers), fraudStatus: parsed?.fraudStatus, reason: parsed?.reason)
            log.info("Klarna call failed: \(error)")
            throw error
        }
        // Side effects are worth a line at info (with Klarna's correlation id); reads only when debugging.
        log.log(level: operation.safety == .read ? .debug : .info, "Klarna call succeeded")
        return Answer(http: response, requestID: requestID, operation: operation)
    }

    /// Every call that went out, by account, operation and result, and how long it took.
    private func count(_ operation: KlarnaOperation, status: Int?, took: Duration) {
        Telemetry.count(
            .klarnaCalls, ("account", account.rawValue), ("operation", operation.name), ("result", KlarnaCallResult(status: status).rawValue))
        Telemetry.time(.klarnaCallDuration, took, ("account", account.rawValue), ("operation", operation.name))
    }

    func decode<T: Decodable>(_ type: T.Type, _ answer: Answer) throws -> T {
        do {
            return try KlarnaJSON.decoder().decode(type, from: Data(answer.http.body))
        } catch {
            throw KlarnaAPIError(
                operation: answer.operation,
                failure: .undecodableResponse(status: answer.http.status, detail: Self.describe(error)),
                requestID: answer.requestID, correlationIDHeader: answer.http.headers["Klarna-Correlation-Id"])
        }
    }

    private func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        Array(try KlarnaJSON.encoder().encode(value))
    }

    /// Percent-encodes one path segment so an id can never add path components or a query.
    func segment(_ id: String) -> String {
        id.addingPercentEncoding(withAllowedCharacters: Self.unreserved.union(CharacterSet(charactersIn: ":"))) ?? id
    }

    /// RFC 3986's unreserved characters: ASCII letters and digits and `-._~`.
    private static let unreserved = CharacterSet.alphanumerics
        .intersection(CharacterSet(charactersIn: Unicode.Scalar(0)..<Unicode.Scalar(128))).union(CharacterSet(charactersIn: "-._~"))

    /// `?name=value&…`, or "" for no items. Names and values keep only RFC 3986's unreserved characters, so a value
    /// can never add a parameter (`&`, `=`), end the query (`#`) or read as a space (`+`).
    static func queryString(_ items: [(String, String)]) -> String {
        guard !items.isEmpty else { return "" }
        let encoded = { (text: String) -> String in text.addingPercentEncoding(withAllowedCharacters: unreserved) ?? text }
        return "?" + items.map { item in encoded(item.0) + "=" + encoded(item.1) }.joined(separator: "&")
    }

    private static func newRequestID() -> String {
        var generator = SystemRandomNumberGenerator()
        return String(generator.next() & 0xFFFF_FFFF_FFFF, radix: 16, uppercase: false)
    }

    private static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.keyNotFound(let key, let context):
            return "missing \(path(context.codingPath + [key]))"
        case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
            return "wrong type at \(path(context.codingPath)): \(context.debugDescription)"
        case DecodingError.dataCorrupted(let context):
            return context.codingPath.isEmpty ? "not JSON" : "bad value at \(path(context.codingPath)): \(context.debugDescription)"
        default:
            return "\(error)"
        }
    }

    private static func path(_ keys: [any CodingKey]) -> String {
        keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
    }
}
