import Foundation
import ReconcilerCore

/// Klarna's rate-limit headers (Klarna's API reference, rate limiting). `Retry-After` is not documented by Klarna but honoured when sent.
public struct RateLimitHeaders: Sendable, Hashable {
    public var limit: String?
    public var remaining: Int?
    /// `X-Ratelimit-Reset`: time until the window resets.
    public var reset: Duration?
    public var retryAfter: Duration?

    public init(limit: String? = nil, remaining: Int? = nil, reset: Duration? = nil, retryAfter: Duration? = nil) {
        self.limit = limit
        self.remaining = remaining
        self.reset = reset
        self.retryAfter = retryAfter
    }

    public init(headers: HTTPHeaders, now: Date = Date()) {
        limit = headers["X-Ratelimit-Limit"]
        remaining = headers["X-Ratelimit-Remaining"].flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        reset = headers["X-Ratelimit-Reset"].flatMap(Self.seconds)
        retryAfter = headers["Retry-After"].flatMap { Self.seconds($0) ?? Self.httpDate($0, now: now) }
    }

    /// When the server says to come back: `Retry-After` first, else the rate-limit reset.
    public var hint: Duration? { retryAfter ?? reset }

    public var isEmpty: Bool { limit == nil && remaining == nil && reset == nil && retryAfter == nil }

    private static func seconds(_ text: String) -> Duration? {
        guard let value = Double(text.trimmingCharacters(in: .whitespaces)), value.isFinite, value >= 0 else { return nil }
        return Duration(timeInterval: min(value, 86_400))
    }

    private static func httpDate(_ text: String, now: Date) -> Duration? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        guard let date = formatter.date(from: text.trimmingCharacters(in: .whitespaces)) else { return nil }
        return Duration(timeInterval: max(0, date.timeIntervalSince(now)))
    }
}

/// Everything that went wrong with one Klarna call, in Klarna's own terms. Never contains credentials.
public struct KlarnaAPIError: Error, RetryClassifiable, CustomStringConvertible {
    public enum Failure: Sendable {
        /// Klarna answered with a non-2xx status.
        case http(status: Int)
        /// No (complete) answer: connect failure, timeout, reset.
        case transport(TransportError)
        /// A 2xx answer this client cannot read (malformed JSON, a field the spec requires missing, a capture answer that
        /// is neither `201` nor names the capture).
        case undecodableResponse(status: Int, detail: String)
    }

    public let operation: KlarnaOperation
    public let failure: Failure
    /// The local id of this request, also in every log line about it.
    public let requestID: String
    public var errorCode: String?
    public var errorMessages: [String]
    /// `correlation_id` from the error body.
    public var correlationID: String?
    /// The `Klarna-Correlation-Id` response header.
    public var correlationIDHeader: String?
    public var rateLimit: RateLimitHeaders
    /// A declined order's `fraud_status` and `reason` (the customer-token API's 400 body carries them).
    public var fraudStatus: String?
    public var reason: String?

    public init(
        operation: KlarnaOperation, failure: Failure, requestID: String, errorCode: String? = nil,
        errorMessages: [String] = [], correlationID: String? = nil, correlationIDHeader: String? = nil,
        rateLimit: RateLimitHeaders = RateLimitHeaders(), fraudStatus: String? = nil, reason: String? = nil
    ) {
        self.fraudStatus = fraudStatus
        self.reason = reason
        self.operation = operation
        self.failure = failure
        self.requestID = requestID
        self.errorCode = errorCode
        self.errorMessages = errorMessages
        self.correlationID = correlationID
        self.correlationIDHeader = correlationIDHeader
        self.rateLimit = rateLimit
    }

    public var status: Int? {
        switch failure {
        case .http(let status), .undecodableResponse(let status, _): status
        case .transport: nil
        }
    }

    /// What the answer says, for the rules that decide what follows a failure.
    public var answer: KlarnaAnswer { KlarnaAnswer(status: status) }

    /// The id to quote to Klarna support (Merchant Portal → Logs).
    public var klarnaCorrelationID: String? { correlationIDHeader ?? correlationID }

    /// `true` when the call may have changed something at Klarna although it failed: the request went out and no
    /// clear answer came back, or Klarna failed with a 5xx while doing it. Reads never change anything.
    public var outcomeUnknown: Bool {
        guard operation.safety != .read else { return false }
        switch failure {
        case .transport(let error): return error.requestMayHaveBeenSent
        case .undecodableResponse: return true
        case .http(let status): return status >= 500 || status == 408
        }
    }

    public var retryDisposition: RetryDisposition {
        let repeatable = operation.safety != .unsafe
        switch failure {
        case .transport(let error):
            switch error.kind {
            case .tls, .invalidRequest, .responseTooLarge, .shutdown: return .doNotRetry
            default:
                // Never sent: safe for anything. Sent: only where repeating is harmless or deduplicated.
                return (!error.requestMayHaveBeenSent || repeatable) ? .retry(notBefore: nil) : .doNotRetry
            }
        case .undecodableResponse:
            return repeatable ? .retry(notBefore: nil) : .doNotRetry
        case .http(let status):
            switch status {
            case 429:
                // Refused before any processing, whatever the operation.
                return .retry(notBefore: rateLimit.hint)
            case 408, 409, 425, 500...599:
                return repeatable ? .retry(notBefore: rateLimit.retryAfter) : .doNotRetry
            default:
                return .doNotRetry
            }
        }
    }

    public var description: String {
        var parts: [String] = ["Klarna \(operation.name) failed"]
        switch failure {
        case .http(let status): parts.append("HTTP \(status)")
        case .transport(let error): parts.append(error.description)
        case .undecodableResponse(let status, let detail): parts.append("unreadable HTTP \(status) response: \(detail)")
        }
        if let errorCode { parts.append("error_code \(errorCode)") }
        if !errorMessages.isEmpty { parts.append("messages: \(errorMessages.joined(separator: "; "))") }
        if let id = klarnaCorrelationID { parts.append("correlation id \(id)") }
        if let hint = rateLimit.hint { parts.append("retry after \(hint.timeInterval)s") }
        parts.append("request \(requestID)")
        return parts.joined(separator: ", ")
    }
}

/// Klarna's legacy error body (ErrorV2): `{correlation_id, error_code, error_messages}`, and a declined order's
/// `fraud_status` and `reason` (text; anything else there is not read).
struct KlarnaErrorBody: Decodable {
    var correlationID: String?
    var errorCode: String?
    var errorMessages: [String]?
    var fraudStatus: String?
    var reason: String?

    enum CodingKeys: String, CodingKey {
        case correlationID = "correlation_id", errorCode = "error_code", errorMessages = "error_messages"
        case fraudStatus = "fraud_status", reason
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        correlationID = try? container.decodeIfPresent(String.self, forKey: .correlationID)
        errorCode = try? container.decodeIfPresent(String.self, forKey: .errorCode)
        errorMessages = try? container.decodeIfPresent([String].self, forKey: .errorMessages)
        fraudStatus = try? container.decodeIfPresent(String.self, forKey: .fraudStatus)
        reason = try? container.decodeIfPresent(String.self, forKey: .reason)
    }
}
