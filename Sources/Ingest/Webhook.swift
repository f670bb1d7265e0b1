import Crypto
import Foundation
import ReconcilerCore

/// What arrived, before anything is trusted: from the socket (the route names the kind) or a spool file (the body's
/// shape does).
public struct Delivery: Sendable {
    public enum Route: Sendable, Equatable {
        case hppStatus, kpAuthorization, omNotification, klarnaNetwork, track
        case capture(orderID: String)
        /// `POST /v1/orders/{order_id}/refunds`.
        case refund(orderID: String)
        /// `POST /v1/customer-tokens/{token}/charges`.
        case charge(token: String)
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

extension Delivery.Route {
    /// What a route that moves money takes (refunds, charges), which only the unix socket may ask for; nil for others.
    public var movesMoney: String? {
        switch self {
        case .refund: "refunds"
        case .charge: "charges"
        default: nil
        }
    }
}

/// A delivery that was understood and, where Klarna allows it, verified. Still only a hint: the engine re-reads
/// Klarna before any side effect.
public enum Webhook: Sendable, Equatable {
    /// `account`: the one the callback URL names (signed in its token); the default account without one.
    case hppStatus(eventID: String, hppSessionID: String, kpSessionID: String?, status: String?, account: AccountID = .default)
    case kpAuthorization(kpSessionID: String, authorizationTokenTail: String, tokenDigest: String, account: AccountID = .default)
    case omNotification(orderID: String, eventType: String)
    /// `merchantID`: the account Klarna names in `metadata` (`merchant_id`, `subject_account_id` or `account_id`).
    case klarnaNetwork(eventID: String, eventType: String, paymentRequestID: String?, state: String?, merchantID: String?)
    /// A Disputes API v4 webhook (`payment.dispute.*`, signed like Klarna Network's): which dispute to read.
    /// `merchantID` as for ``klarnaNetwork(eventID:eventType:paymentRequestID:state:merchantID:)``.
    case klarnaDispute(eventID: String, eventType: String, disputeID: String, orderID: String?, merchantID: String?)
    case track(TrackRequest)
    case capture(orderID: String, amount: Int?, requestID: String?)
    case refund(RefundAsk)
    case charge(ChargeAsk)

    public var kind: String {
        switch self {
        case .hppStatus: "hpp_status"
        case .kpAuthorization: "kp_authorization"
        case .omNotification: "om_notification"
        case .klarnaNetwork: "klarna_network"
        case .klarnaDispute: "klarna_dispute"
        case .track: "track_request"
        case .capture: "capture_request"
        case .refund: "refund_request"
        case .charge: "charge_request"
        }
    }

    /// Repeats of the same delivery share this key and are acknowledged without being processed again.
    public var dedupeKey: String? {
        switch self {
        case .hppStatus(let eventID, _, _, _, _): "hpp-event:\(eventID)"
        // The token itself never goes into the store: its digest is enough to recognise a repeat.
        case .kpAuthorization(_, _, let digest, _): "kp-authorization:\(digest)"
        case .omNotification(let orderID, let eventType): "om-notification:\(orderID):\(eventType)"
        case .klarnaNetwork(let eventID, _, _, _, _): "kn-event:\(eventID)"
        case .klarnaDispute(let eventID, _, _, _, _): "kn-event:\(eventID)"
        case .track: nil
        case .capture(let orderID, _, let requestID): requestID.map { "capture-request:\(orderID):\($0)" }
        // Recorded once by its idempotency key, as an intent: a repeat is answered from that intent.
        case .refund, .charge: nil
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
    /// `account`: the Klarna account the payment belongs to; `nil` for the only one configured.
    public var account: AccountID?
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
    public static let disputeEventPrefix = "payment.dispute."
    /// Disputes API v4's state changes (Klarna's Disputes API v4 reference). Older generations share the prefix with other names
    /// and other ids: refused, their disputes are found by the list.
    public static let disputeEventTypes: Set<String> = [
        "payment.dispute.state-change.initiated", "payment.dispute.state-change.representment", "payment.dispute.state-change.pre-arbitration",
        "payment.dispute.state-change.arbitration", "payment.dispute.state-change.closed",
    ]
    /// v4's updates (a deadline extended, an amount adjusted: the names are partly undocumented).
    public static let disputeUpdatePrefix = "payment.dispute.updated."

    /// - Returns: the webhook and, under the `warn` policy, a warning to record with it.
    ///
    /// A route that carries a signature or a callback token is verified on the raw request first: a forged one is
    /// refused without a byte of its body being parsed. Every body is then read by ``BoundedJSON`` keeping only the
    /// fields its route uses.
    public func read(_ delivery: Delivery) throws(Rejection) -> (Webhook, warning: String?) {
        var warning: String?
        // A callback's account is the one its URL names, signed in its token with the KP session.
        var account = AccountID.default
        if let named = delivery.query["account"] {
            guard let id = AccountID(rawValue: named) else { throw Rejection(400, "bad_field", "account must be an account id: \(AccountID.rule)") }
            account = id
        }
        switch delivery.route {
        case .hppStatus:
            warning = try checkToken(.hppStatus, kpSessionID: delivery.query["kp_session_id"], account: account, delivery)
        case .kpAuthorization:
            // The callback URL names its KP session (`callback-url` prints it), so the token is checked before the
            // body is read; the body must then name the same session.
            warning = try checkToken(.kpAuthorization, kpSessionID: delivery.query["kp_session_id"], account: account, delivery)
        case .klarnaNetwork:
            try checkSignature(delivery)
        case .omNotification, .track, .capture, .refund, .charge, .byShape:
            break
        }
        let object = try Self.jsonObject(delivery.body, keep: Self.keep(for: delivery.route))
        let route = delivery.route == .byShape ? try Self.shape(of: object) : delivery.route
        switch route {
        case .hppStatus:
            let eventID = try Self.string(object, "event_id")
            guard let session = object["session"], case .object = session else {
                throw Rejection(400, "bad_field", "session must be an object (the HPP session as read)")
            }
            let fromQuery = delivery.query["hpp_session_id"].flatMap { $0.isEmpty || $0 == "{{session_id}}" ? nil : $0 }
            let hppSessionID: String
            if session["session_id"] == nil, let fromQuery {
                // HPP's spec requires no field of the session it sends: the callback URL names it (callback-url adds
                // hpp_session_id={{session_id}}, which Klarna fills in).
                hppSessionID = try Self.id(fromQuery, "hpp_session_id")
            } else {
                hppSessionID = try Self.string(session, "session_id", in: "session.")
            }
            if let fromQuery, fromQuery != hppSessionID {
                throw Rejection(
                    400, "mismatch", "hpp_session_id in the URL (\(fromQuery.prefix(80))) is not the session in the body (\(hppSessionID.prefix(80)))"
                )
            }
            let kp = delivery.query["kp_session_id"]
            if delivery.route == .byShape { warning = try checkToken(.hppStatus, kpSessionID: kp, account: account, delivery) }
            return (
                .hppStatus(eventID: eventID, hppSessionID: hppSessionID, kpSessionID: kp, status: Self.text(session["status"]), account: account),
                warning
            )
        case .kpAuthorization:
            let token = try Self.string(object, "authorization_token")
            let kpSessionID = try Self.string(object, "session_id")
            if let fromQuery = delivery.query["kp_session_id"], !fromQuery.isEmpty, fromQuery != kpSessionID {
                throw Rejection(400, "mismatch", "kp_session_id in the URL is not the session_id in the body")
            }
            // A spool file's kind is known only now; its token is checked against the session it names.
            if delivery.route == .byShape { warning = try checkToken(.kpAuthorization, kpSessionID: kpSessionID, account: account, delivery) }
            let digest = SHA256.hash(data: Array(token.utf8)).map { String(format: "%02x", $0) }.joined()
            return (
                .kpAuthorization(kpSessionID: kpSessionID, authorizationTokenTail: String(token.suffix(6)), tokenDigest: digest, account: account),
                warning
            )
        case .omNotification:
            let orderID = try Self.string(object, "order_id")
            let eventType = try Self.string(object, "event_type")
            guard Self.omEventTypes.contains(eventType) else {
                throw Rejection(
                    400, "unknown_event_type",
                    "event_type \(eventType.prefix(80)) is not one of \(Self.omEventTypes.sorted().joined(separator: ", "))")
            }
            return (.omNotification(orderID: orderID, eventType: eventType), nil)
        case .klarnaNetwork:
            if delivery.route == .byShape { try checkSignature(delivery) }
            guard let metadata = object["metadata"], case .object = metadata, let payload = object["payload"], case .object = payload else {
                throw Rejection(400, "bad_field", "metadata and payload must be objects")
            }
            let eventID = try Self.string(metadata, "event_id", in: "metadata.")
            let eventType = try Self.string(metadata, "event_type", in: "metadata.")
            if eventType.hasPrefix(Self.disputeEventPrefix) {
                guard Self.disputeEventTypes.contains(eventType) || eventType.hasPrefix(Self.disputeUpdatePrefix) else {
                    throw Rejection(
                        400, "unknown_event_type",
                        "event_type \(eventType.prefix(80)) is not a Disputes API v4 event (\(Self.disputeEventTypes.sorted().joined(separator: ", ")) or \(Self.disputeUpdatePrefix)*)"
                    )
                }
                let disputeID = try Self.string(payload, "payment_dispute_id", in: "payload.")
                guard DisputeAction.validDisputeID(disputeID) else {
                    throw Rejection(
                        400, "bad_field",
                        "payload.payment_dispute_id must be 1–\(DisputeAction.maxDisputeIDLength) printable characters without spaces")
                }
                return (
                    .klarnaDispute(
                        eventID: eventID, eventType: eventType, disputeID: disputeID, orderID: Self.text(payload["order_id"]),
                        merchantID: Self.merchantID(metadata)), nil
                )
            }
            guard eventType.hasPrefix(Self.networkEventPrefix) else {
                throw Rejection(
                    400, "unknown_event_type",
                    "event_type \(eventType.prefix(80)) is neither a \(Self.networkEventPrefix)* nor a \(Self.disputeEventPrefix)* event")
            }
            return (
                .klarnaNetwork(
                    eventID: eventID, eventType: eventType, paymentRequestID: Self.text(payload["payment_request_id"]),
                    state: Self.text(payload["state"]),
                    merchantID: Self.merchantID(metadata)), nil
            )
        case .track:
            return (.track(try Self.trackRequest(object)), nil)
        case .capture(let orderID):
            return (
                .capture(
                    orderID: try Self.id(orderID, "order id"), amount: try Self.amount(object),
                    requestID: try Self.optionalString(object, "request_id")), nil
            )
        case .refund(let orderID):
            return (.refund(try Self.refundAsk(orderID: try Self.id(orderID, "order id"), object)), nil)
        case .charge(let token):
            return (.charge(try Self.chargeAsk(token: try Self.id(token, "customer token"), object, body: delivery.body)), nil)
        case .byShape:
            // A capture request in a spool file names its order in the body.
            return (
                .capture(
                    orderID: try Self.string(object, "order_id"), amount: try Self.amount(object),
                    requestID: try Self.optionalString(object, "request_id")), nil
            )
        }
    }

    /// The account a signed Klarna webhook names in its `metadata`: `merchant_id`, `subject_account_id` or `account_id`.
    private static func merchantID(_ metadata: BoundedJSON) -> String? {
        ["merchant_id", "subject_account_id", "account_id"].lazy.compactMap { text(metadata[$0]) }.first
    }

    /// Nothing is read from an unsigned or wrongly signed Klarna Network body, not even its shape.
    private func checkSignature(_ delivery: Delivery) throws(Rejection) {
        if let failure = signingKeys.check(
            body: delivery.body, signature: delivery.header("Klarna-Signature"), keyID: delivery.header("Klarna-Signing-Key-Id"))
        {
            throw Rejection(400, "bad_signature", signingKeys.isEmpty ? "no webhook-signing-keys credential is configured" : failure.description)
        }
    }

    private func checkToken(
        _ kind: CallbackTokens.Kind, kpSessionID: String?, account: AccountID, _ delivery: Delivery
    ) throws(Rejection) -> String? {
        let problem: Rejection?
        if let tokens {
            if let token = delivery.query["token"], !token.isEmpty, let kpSessionID, !kpSessionID.isEmpty {
                problem =
                    tokens.isValid(token, kind, kpSessionID: kpSessionID, account: account)
                    ? nil
                    : Rejection(
                        403, "bad_token", "the callback token does not match \(kind.rawValue) for this KP session and account \(account)")
            } else {
                problem = Rejection(
                    401, "missing_token", "token and kp_session_id are required in the callback URL (see klarna-reconciler callback-url)")
            }
        } else {
            problem = Rejection(403, "bad_token", "callback tokens cannot be checked: no callback-key credential is configured")
        }
        guard let problem else { return nil }
        if policy == .warn { return "accepted without a valid callback token (policy warn): \(problem.detail)" }
        throw problem
    }

    /// What each route reads of its body; a spool file keeps what any kind reads, to tell its kind by its shape.
    static func keep(for route: Delivery.Route) -> BoundedJSON.Keep {
        func fields(_ names: String...) -> BoundedJSON.Keep { .fields(Dictionary(uniqueKeysWithValues: names.map { ($0, .value) })) }
        let hppStatus = BoundedJSON.Keep.fields(["event_id": .value, "session": fields("session_id", "status")])
        let kpAuthorization = fields("authorization_token", "session_id")
        let omNotification = fields("order_id", "event_type")
        let klarnaNetwork = BoundedJSON.Keep.fields([
            "metadata": fields("event_id", "event_type", "merchant_id", "subject_account_id", "account_id"),
            "payload": fields("payment_request_id", "state", "payment_dispute_id", "order_id"),
        ])
        let track = fields("hpp_session_id", "kp_session_id", "place_order_mode", "merchant_reference", "capture", "intent", "account")
        let capture = fields("order_id", "amount", "request_id")
        let refund = fields("amount", "reference", "description")
        let charge = BoundedJSON.Keep.fields([
            "amount": .value, "currency": .value, "reference": .value, "tax_amount": .value, "merchant_reference1": .value,
            "merchant_reference2": .value, "capture": .value, "account": .value,
            "order_lines": .value,
        ])
        switch route {
        case .hppStatus: return hppStatus
        case .kpAuthorization: return kpAuthorization
        case .omNotification: return omNotification
        case .klarnaNetwork: return klarnaNetwork
        case .track: return track
        case .capture: return capture
        case .refund: return refund
        case .charge: return charge
        case .byShape: return [kpAuthorization, omNotification, klarnaNetwork, track, capture].reduce(hppStatus) { $0.union($1) }
        }
    }

    /// The kind of a spool file, from its body's shape (docs/operations.md, "The spool directory").
    static func shape(of object: BoundedJSON) throws(Rejection) -> Delivery.Route {
        let keys = object.keys
        if keys.isSuperset(of: ["event_id", "session"]) { return .hppStatus }
        if keys.isSuperset(of: ["authorization_token", "session_id"]) { return .kpAuthorization }
        if keys.isSuperset(of: ["order_id", "event_type"]) { return .omNotification }
        if keys.isSuperset(of: ["metadata", "payload"]) { return .klarnaNetwork }
        if keys.isSuperset(of: ["hpp_session_id", "kp_session_id"]) { return .track }
        if keys.contains("order_id") { return .byShape }
        throw Rejection(
            400, "unknown_kind",
            "the body has none of the shapes this daemon reads (it needs event_id and session, authorization_token and session_id, order_id and event_type, metadata and payload, hpp_session_id and kp_session_id, or order_id)"
        )
    }

    /// The body as a JSON object, read within ``BoundedJSON/Limits/deliveries``.
    static func jsonObject(_ body: [UInt8], keep: BoundedJSON.Keep) throws(Rejection) -> BoundedJSON {
        guard !body.isEmpty else { throw Rejection(400, "empty_body", "the body is empty") }
        guard !body.contains(0) else { throw Rejection(400, "bad_encoding", "the body contains NUL bytes") }
        let parsed: BoundedJSON
        do {
            parsed = try BoundedJSON.read(body, keep: keep)
        } catch {
            throw Rejection(400, error.reason.rawValue, error.reason == .malformed ? "the body is not JSON: \(error.detail)" : error.detail)
        }
        guard case .object = parsed else { throw Rejection(400, "malformed_json", "the body must be a JSON object") }
        return parsed
    }

    static func text(_ value: BoundedJSON?) -> String? {
        if case .string(let text) = value { return text }
        return nil
    }

    static func string(_ object: BoundedJSON, _ key: String, in prefix: String = "") throws(Rejection) -> String {
        guard let value = object[key] else { throw Rejection(400, "missing_field", "\(prefix)\(key) is required") }
        guard let text = text(value) else { throw Rejection(400, "bad_field", "\(prefix)\(key) must be a string") }
        return try id(text, "\(prefix)\(key)")
    }

    static func optionalString(_ object: BoundedJSON, _ key: String) throws(Rejection) -> String? {
        guard let value = object[key], value != .null else { return nil }
        guard let text = text(value) else { throw Rejection(400, "bad_field", "\(key) must be a string") }
        return try id(text, key)
    }

    /// Ids are 1–255 printable ASCII characters without spaces (Klarna's are UUIDs or `krn:` names).
    static func id(_ text: String, _ what: String) throws(Rejection) -> String {
        guard (1...255).contains(text.utf8.count), text.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw Rejection(400, "bad_field", "\(what) must be 1–255 printable ASCII characters without spaces")
        }
        return text
    }

    /// A whole, positive number of minor units, written as an integer (`1.5`, `1e3`, `true` and `"100"` are not).
    static func amount(_ object: BoundedJSON) throws(Rejection) -> Int? {
        guard let value = object["amount"], value != .null else { return nil }
        guard case .number(let written) = value, let amount = Int(written), amount > 0 else {
            throw Rejection(400, "bad_field", "amount must be a positive whole number of minor units")
        }
        return amount
    }

    /// `{"amount", "reference", "description"}`: a positive amount, a reference of 1–255 characters, and at most 255
    /// characters of description (Klarna's limits).
    static func refundAsk(orderID: String, _ object: BoundedJSON) throws(Rejection) -> RefundAsk {
        guard let amount = try amount(object) else { throw Rejection(400, "missing_field", "amount is required") }
        func text(_ key: String, required: Bool) throws(Rejection) -> String? {
            guard let value = object[key], value != .null else {
                if required { throw Rejection(400, "missing_field", "\(key) is required") }
                return nil
            }
            guard let text = Self.text(value) else { throw Rejection(400, "bad_field", "\(key) must be a string") }
            if let problem = RefundAsk.textProblem(text) { throw Rejection(400, "bad_field", "\(key) \(problem)") }
            return text
        }
        return RefundAsk(
            orderID: orderID, amount: amount, reference: try text("reference", required: true)!, description: try text("description", required: false)
        )
    }

    /// `{"reference", "amount", "currency", "tax_amount", "order_lines", "merchant_reference1", "merchant_reference2",
    /// "capture", "account"}`: the charge's own checks (``ChargeAsk/problem``) name the field that is wrong.
    public static func chargeAsk(token: String, _ object: BoundedJSON, body: [UInt8]) throws(Rejection) -> ChargeAsk {
        guard let amount = try amount(object) else { throw Rejection(400, "missing_field", "amount is required") }
        func text(_ key: String, required: Bool = false) throws(Rejection) -> String? {
            guard let value = object[key], value != .null else {
                if required { throw Rejection(400, "missing_field", "\(key) is required") }
                return nil
            }
            guard let text = Self.text(value) else { throw Rejection(400, "bad_field", "\(key) must be a string") }
            return text
        }
        func whole(_ value: BoundedJSON?, _ key: String) throws(Rejection) -> Int? {
            guard let value, value != .null else { return nil }
            guard case .number(let written) = value, let number = Int(written) else {
                throw Rejection(400, "bad_field", "\(key) must be a whole number")
            }
            return number
        }
        var lines: [ChargeLine]?
        if let value = object["order_lines"], value != .null {
            guard case .array = value else { throw Rejection(400, "bad_field", "order_lines must be an array of order lines") }
            // The bounded read checked the body's size, depth and counts; the lines are decoded from it as they are.
            struct Lines: Decodable {
                let orderLines: [ChargeLine]
                enum CodingKeys: String, CodingKey { case orderLines = "order_lines" }
            }
            do {
                lines = try JSONDecoder().decode(Lines.self, from: Data(body)).orderLines
            } catch {
                throw Rejection(
                    400, "bad_field", "order_lines: each line needs name (a string), quantity, unit_price and total_amount (whole numbers)")
            }
        }
        var capture: CapturePolicy?
        if let raw = try text("capture") {
            guard let policy = CapturePolicy(rawValue: raw) else {
                throw Rejection(400, "bad_field", "capture must be one of \(CapturePolicy.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            capture = policy
        }
        var account: AccountID?
        if let raw = try text("account") {
            guard let id = AccountID(rawValue: raw) else { throw Rejection(400, "bad_field", "account must be an account id: \(AccountID.rule)") }
            account = id
        }
        let ask = ChargeAsk(
            token: token, reference: try text("reference", required: true)!, amount: amount, currency: try text("currency", required: true)!,
            taxAmount: try whole(object["tax_amount"], "tax_amount") ?? 0, lines: lines, merchantReference1: try text("merchant_reference1"),
            merchantReference2: try text("merchant_reference2"), capture: capture, account: account)
        if let problem = ask.problem { throw Rejection(400, "bad_field", "\(problem.field) \(problem.reason)") }
        return ask
    }

    static func trackRequest(_ object: BoundedJSON) throws(Rejection) -> TrackRequest {
        func choice<T: RawRepresentable & CaseIterable>(_ key: String, _ type: T.Type) throws(Rejection) -> T? where T.RawValue == String {
            guard let raw = try optionalString(object, key) else { return nil }
            guard let value = T(rawValue: raw) else {
                throw Rejection(400, "bad_field", "\(key) must be one of \(T.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return value
        }
        var reference: String?
        if let value = object["merchant_reference"], value != .null {
            guard let text = text(value), (1...255).contains(text.count) else {
                throw Rejection(400, "bad_field", "merchant_reference must be a string of 1–255 characters")
            }
            reference = text
        }
        var account: AccountID?
        if let raw = try optionalString(object, "account") {
            guard let id = AccountID(rawValue: raw) else { throw Rejection(400, "bad_field", "account must be an account id: \(AccountID.rule)") }
            account = id
        }
        return TrackRequest(
            hppSessionID: try string(object, "hpp_session_id"), kpSessionID: try string(object, "kp_session_id"),
            mode: try choice("place_order_mode", PlaceOrderMode.self), merchantReference: reference,
            capture: try choice("capture", CapturePolicy.self), purpose: try choice("intent", PaymentPurpose.self) ?? .buy, account: account)
    }
}
