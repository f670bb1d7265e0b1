import Crypto
import Foundation
import ReconcilerCore

/// What arrived, before anything is trusted: from the socket (the route names the kind) or a spool file (the body's
/// shape does).
public struct Delivery: Sendable {
    public enum Route: Sendable, Equatable {
        case hppStatus, kpAuthorization, omNotification, klarnaNetwork, track
        case capture(orderID: String)
        /// A spool file: the kind comes from the body's shape.
        case byShape
    }

    public var route: Route
    public var query: [String: String]
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(route: Route, query: [String: String] = [:], headers: [(name: String, value: String)] = [], body: [UInt8]) {
        self.route = route
        self.query = query
        self.headers = headers
        self.body = body
    }

    public func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name.lowercased() == wanted }?.value
    }
}

/// A delivery that was understood and, where Klarna allows it, verified. Still only a hint: the engine re-reads
/// Klarna before any side effect.
public enum Webhook: Sendable, Equatable {
    case hppStatus(eventID: String, hppSessionID: String, kpSessionID: String?, status: String?)
    case kpAuthorization(kpSessionID: String, authorizationTokenTail: String, tokenDigest: String)
    case omNotification(orderID: String, eventType: String)
    case klarnaNetwork(eventID: String, eventType: String, paymentRequestID: String?, state: String?)
    case track(TrackRequest)
    case capture(orderID: String, amount: Int?, requestID: String?)

    public var kind: String {
        switch self {
        case .hppStatus: "hpp_status"
        case .kpAuthorization: "kp_authorization"
        case .omNotification: "om_notification"
        case .klarnaNetwork: "klarna_network"
        case .track: "track_request"
        case .capture: "capture_request"
        }
    }

    /// Repeats of the same delivery share this key and are acknowledged without being processed again.
    public var dedupeKey: String? {
        switch self {
        case .hppStatus(let eventID, _, _, _): "hpp-event:\(eventID)"
        // The token itself never goes into the store: its digest is enough to recognise a repeat.
        case .kpAuthorization(_, _, let digest): "kp-authorization:\(digest)"
        case .omNotification(let orderID, let eventType): "om-notification:\(orderID):\(eventType)"
        case .klarnaNetwork(let eventID, _, _, _): "kn-event:\(eventID)"
        case .track: nil
        case .capture(let orderID, _, let requestID): requestID.map { "capture-request:\(orderID):\($0)" }
        }
    }
}

public struct TrackRequest: Sendable, Equatable {
    public var hppSessionID: String
    public var kpSessionID: String
    public var mode: PlaceOrderMode?
    public var merchantReference: String?
    public var capture: CapturePolicy?
    public var purpose: PaymentPurpose
}

/// Why a delivery was refused: the HTTP status for the socket, a stable `error` word, and the detail for people.
/// Spool files get the same in their `.reason`.
public struct Rejection: Error, Equatable, CustomStringConvertible {
    public let status: Int
    public let error: String
    public let detail: String

    public init(_ status: Int, _ error: String, _ detail: String) {
        self.status = status
        self.error = error
        self.detail = detail
    }

    public var description: String { "\(error): \(detail)" }
}

/// How strictly callback tokens on HPP and KP callbacks are enforced.
public enum CallbackPolicy: String, Sendable, CaseIterable {
    /// A missing or wrong token is refused (401/403).
    case require
    /// Accepted with a warning on the timeline (for a migration period).
    case warn
}

/// Turns deliveries into webhooks: JSON shape, required fields, and authenticity.
public struct WebhookReader: Sendable {
    public let tokens: CallbackTokens?
    public let policy: CallbackPolicy
    public let signingKeys: SigningKeys

    public init(tokens: CallbackTokens?, policy: CallbackPolicy, signingKeys: SigningKeys) {
        self.tokens = tokens
        self.policy = policy
        self.signingKeys = signingKeys
    }

    public static let omEventTypes: Set<String> = ["FRAUD_RISK_ACCEPTED", "FRAUD_RISK_REJECTED", "FRAUD_RISK_STOPPED"]
    public static let networkEventPrefix = "payment.request.state-change."

    /// - Returns: the webhook and, under the `warn` policy, a warning to record with it.
    public func read(_ delivery: Delivery) throws(Rejection) -> (Webhook, warning: String?) {
        let object = try Self.jsonObject(delivery.body)
        let route = delivery.route == .byShape ? try Self.shape(of: object) : delivery.route
        switch route {
        case .hppStatus:
            let eventID = try Self.string(object, "event_id")
            guard let session = object["session"] as? [String: Any] else { throw Rejection(400, "bad_field", "session must be an object (the HPP session as read)") }
            let hppSessionID = try Self.string(session, "session_id", in: "session.")
            if let fromQuery = delivery.query["hpp_session_id"], !fromQuery.isEmpty, fromQuery != "{{session_id}}", fromQuery != hppSessionID {
                throw Rejection(400, "mismatch", "hpp_session_id in the URL (\(fromQuery.prefix(80))) is not the session in the body (\(hppSessionID.prefix(80)))")
            }
            let kp = delivery.query["kp_session_id"]
            let warning = try checkToken(.hppStatus, kpSessionID: kp, delivery)
            return (.hppStatus(eventID: eventID, hppSessionID: hppSessionID, kpSessionID: kp, status: session["status"] as? String), warning)
        case .kpAuthorization:
            let token = try Self.string(object, "authorization_token")
            let kpSessionID = try Self.string(object, "session_id")
            if let fromQuery = delivery.query["kp_session_id"], !fromQuery.isEmpty, fromQuery != kpSessionID {
                throw Rejection(400, "mismatch", "kp_session_id in the URL is not the session_id in the body")
            }
            let warning = try checkToken(.kpAuthorization, kpSessionID: kpSessionID, delivery)
            let digest = SHA256.hash(data: Array(token.utf8)).map { String(format: "%02x", $0) }.joined()
            return (.kpAuthorization(kpSessionID: kpSessionID, authorizationTokenTail: String(token.suffix(6)), tokenDigest: digest), warning)
        case .omNotification:
            let orderID = try Self.string(object, "order_id")
            let eventType = try Self.string(object, "event_type")
            guard Self.omEventTypes.contains(eventType) else {
                throw Rejection(400, "unknown_event_type", "event_type \(eventType.prefix(80)) is not one of \(Self.omEventTypes.sorted().joined(separator: ", "))")
            }
            return (.omNotification(orderID: orderID, eventType: eventType), nil)
        case .klarnaNetwork:
            // Nothing is read from an unsigned or wrongly signed body, not even its shape.
            if let failure = signingKeys.check(body: delivery.body, signature: delivery.header("Klarna-Signature"), keyID: delivery.header("Klarna-Signing-Key-Id")) {
                throw Rejection(400, "bad_signature", signingKeys.isEmpty ? "no webhook-signing-keys credential is configured" : failure.description)
            }
            guard let metadata = object["metadata"] as? [String: Any], let payload = object["payload"] as? [String: Any] else {
                throw Rejection(400, "bad_field", "metadata and payload must be objects")
            }
            let eventID = try Self.string(metadata, "event_id", in: "metadata.")
            let eventType = try Self.string(metadata, "event_type", in: "metadata.")
            guard eventType.hasPrefix(Self.networkEventPrefix) else {
                throw Rejection(400, "unknown_event_type", "event_type \(eventType.prefix(80)) is not a \(Self.networkEventPrefix)* event")
            }
            return (.klarnaNetwork(eventID: eventID, eventType: eventType, paymentRequestID: payload["payment_request_id"] as? String, state: payload["state"] as? String), nil)
        case .track:
            return (.track(try Self.trackRequest(object)), nil)
        case .capture(let orderID):
            return (.capture(orderID: try Self.id(orderID, "order id"), amount: try Self.amount(object), requestID: try Self.optionalString(object, "request_id")), nil)
        case .byShape:
            // A capture request in a spool file names its order in the body.
            return (.capture(orderID: try Self.string(object, "order_id"), amount: try Self.amount(object), requestID: try Self.optionalString(object, "request_id")), nil)
        }
    }

    private func checkToken(_ kind: CallbackTokens.Kind, kpSessionID: String?, _ delivery: Delivery) throws(Rejection) -> String? {
        let problem: Rejection?
        if let tokens {
            if let token = delivery.query["token"], !token.isEmpty, let kpSessionID, !kpSessionID.isEmpty {
                problem = tokens.isValid(token, kind, kpSessionID: kpSessionID) ? nil : Rejection(403, "bad_token", "the callback token does not match \(kind.rawValue) for this KP session")
            } else {
                problem = Rejection(401, "missing_token", "token and kp_session_id are required in the callback URL (see klarna-reconciler callback-url)")
            }
        } else {
            problem = Rejection(403, "bad_token", "callback tokens cannot be checked: no callback-key credential is configured")
        }
        guard let problem else { return nil }
        if policy == .warn { return "accepted without a valid callback token (policy warn): \(problem.detail)" }
        throw problem
    }

    /// The kind of a spool file, from its body's shape (DESIGN §3).
    static func shape(of object: [String: Any]) throws(Rejection) -> Delivery.Route {
        let keys = Set(object.keys)
        if keys.isSuperset(of: ["event_id", "session"]) { return .hppStatus }
        if keys.isSuperset(of: ["authorization_token", "session_id"]) { return .kpAuthorization }
        if keys.isSuperset(of: ["order_id", "event_type"]) { return .omNotification }
        if keys.isSuperset(of: ["metadata", "payload"]) { return .klarnaNetwork }
        if keys.isSuperset(of: ["hpp_session_id", "kp_session_id"]) { return .track }
        if keys.contains("order_id") { return .byShape }
        throw Rejection(400, "unknown_kind", "the body has none of the shapes this daemon reads (keys: \(keys.sorted().prefix(8).joined(separator: ", ")))")
    }

    static func jsonObject(_ body: [UInt8]) throws(Rejection) -> [String: Any] {
        guard !body.isEmpty else { throw Rejection(400, "empty_body", "the body is empty") }
        guard String(validating: body, as: UTF8.self) != nil else { throw Rejection(400, "bad_encoding", "the body is not valid UTF-8") }
        guard !body.contains(0) else { throw Rejection(400, "bad_encoding", "the body contains NUL bytes") }
        let parsed: Any
        do {
            parsed = try JSONSerialization.jsonObject(with: Data(body))
        } catch {
            throw Rejection(400, "malformed_json", "the body is not JSON")
        }
        guard let object = parsed as? [String: Any] else { throw Rejection(400, "malformed_json", "the body must be a JSON object") }
        return object
    }

    static func string(_ object: [String: Any], _ key: String, in prefix: String = "") throws(Rejection) -> String {
        guard let value = object[key] else { throw Rejection(400, "missing_field", "\(prefix)\(key) is required") }
        guard let text = value as? String else { throw Rejection(400, "bad_field", "\(prefix)\(key) must be a string") }
        return try id(text, "\(prefix)\(key)")
    }

    static func optionalString(_ object: [String: Any], _ key: String) throws(Rejection) -> String? {
        guard let value = object[key], !(value is NSNull) else { return nil }
        guard let text = value as? String else { throw Rejection(400, "bad_field", "\(key) must be a string") }
        return try id(text, key)
    }

    /// Ids are 1–255 printable ASCII characters without spaces (Klarna's are UUIDs or `krn:` names).
    static func id(_ text: String, _ what: String) throws(Rejection) -> String {
        guard (1...255).contains(text.utf8.count), text.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw Rejection(400, "bad_field", "\(what) must be 1–255 printable ASCII characters without spaces")
        }
        return text
    }

    static func amount(_ object: [String: Any]) throws(Rejection) -> Int? {
        guard let value = object["amount"], !(value is NSNull) else { return nil }
        // Re-encode the one value and decode it as Int: booleans, fractions and strings are refused.
        struct Box: Decodable { let amount: Int }
        guard let data = try? JSONSerialization.data(withJSONObject: ["amount": value]),
            let amount = try? JSONDecoder().decode(Box.self, from: data).amount, amount > 0
        else { throw Rejection(400, "bad_field", "amount must be a positive whole number of minor units") }
        return amount
    }

    static func trackRequest(_ object: [String: Any]) throws(Rejection) -> TrackRequest {
        func choice<T: RawRepresentable & CaseIterable>(_ key: String, _ type: T.Type) throws(Rejection) -> T? where T.RawValue == String {
            guard let raw = try optionalString(object, key) else { return nil }
            guard let value = T(rawValue: raw) else {
                throw Rejection(400, "bad_field", "\(key) must be one of \(T.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return value
        }
        var reference: String?
        if let value = object["merchant_reference"], !(value is NSNull) {
            guard let text = value as? String, (1...255).contains(text.count) else { throw Rejection(400, "bad_field", "merchant_reference must be a string of 1–255 characters") }
            reference = text
        }
        return TrackRequest(
            hppSessionID: try string(object, "hpp_session_id"), kpSessionID: try string(object, "kp_session_id"),
            mode: try choice("place_order_mode", PlaceOrderMode.self), merchantReference: reference,
            capture: try choice("capture", CapturePolicy.self), purpose: try choice("intent", PaymentPurpose.self) ?? .buy)
    }
}
