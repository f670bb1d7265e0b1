import Foundation

/// One merchant account the sandbox serves: its merchant id (`K100001`) and the Basic auth credentials of its API
/// user. Every resource belongs to one merchant, and another merchant's calls find it no more than one that does not
/// exist.
public struct SandboxMerchant: Sendable, Codable, Equatable {
    public var id: String
    public var username: String
    public var password: String

    public init(id: String, username: String, password: String) {
        self.id = id
        self.username = username
        self.password = password
    }
}

/// A test scenario for one payment: the KP session the merchant created and the HPP session in front of it.
/// Every field is optional in JSON; ``KlarnaSandbox`` fills in a plausible default.
public struct SessionSpec: Codable, Sendable {
    public var orderAmount: Int?
    public var orderTaxAmount: Int?
    public var purchaseCurrency: String?
    public var purchaseCountry: String?
    public var locale: String?
    public var orderLines: [SandboxOrderLine]?
    public var merchantReference: String?
    /// `NONE` (default), `PLACE_ORDER` or `CAPTURE_ORDER`.
    public var placeOrderMode: String?
    /// `buy` (default), `tokenize` or `buy_and_tokenize`.
    public var intent: String?
    /// Fraud status of the order once placed: `ACCEPTED` (default) or `PENDING`.
    public var fraudStatus: String?
    /// For `PENDING`: seconds after placement when Klarna decides, and what (`ACCEPTED` / `REJECTED`).
    public var fraudDecisionAfterSeconds: Double?
    public var fraudDecision: String?
    /// HPP statuses the consumer goes through, relative to creation.
    public var schedule: [ScheduleStep]?
    /// Seconds until the HPP session expires (Klarna: one hour before its payment session, 47 hours by default).
    public var hppExpiresAfterSeconds: Double?
    /// The merchant id the sessions (and the order placed for them) belong to; `nil` for the primary merchant.
    public var merchant: String?

    public init(
        orderAmount: Int? = nil, orderTaxAmount: Int? = nil, purchaseCurrency: String? = nil,
        purchaseCountry: String? = nil, locale: String? = nil, orderLines: [SandboxOrderLine]? = nil,
        merchantReference: String? = nil, placeOrderMode: String? = nil, intent: String? = nil,
        fraudStatus: String? = nil, fraudDecisionAfterSeconds: Double? = nil, fraudDecision: String? = nil,
        schedule: [ScheduleStep]? = nil, hppExpiresAfterSeconds: Double? = nil, merchant: String? = nil
    ) {
        self.orderAmount = orderAmount
        self.orderTaxAmount = orderTaxAmount
        self.purchaseCurrency = purchaseCurrency
        self.purchaseCountry = purchaseCountry
        self.locale = locale
        self.orderLines = orderLines
        self.merchantReference = merchantReference
        self.placeOrderMode = placeOrderMode
        self.intent = intent
        self.fraudStatus = fraudStatus
        self.fraudDecisionAfterSeconds = fraudDecisionAfterSeconds
        self.fraudDecision = fraudDecision
        self.schedule = schedule
        self.hppExpiresAfterSeconds = hppExpiresAfterSeconds
        self.merchant = merchant
    }
}

public struct ScheduleStep: Codable, Sendable {
    public var afterSeconds: Double
    public var status: String

    public init(afterSeconds: Double, status: String) {
        self.afterSeconds = afterSeconds
        self.status = status
    }
}

public struct SandboxOrderLine: Codable, Sendable, Equatable {
    public var type: String?
    public var reference: String?
    public var name: String
    public var quantity: Int
    public var unitPrice: Int
    public var taxRate: Int?
    public var totalAmount: Int
    public var totalTaxAmount: Int?

    public init(
        name: String, quantity: Int, unitPrice: Int, totalAmount: Int, taxRate: Int? = nil, totalTaxAmount: Int? = nil, reference: String? = nil,
        type: String? = nil
    ) {
        self.name = name
        self.quantity = quantity
        self.unitPrice = unitPrice
        self.totalAmount = totalAmount
        self.taxRate = taxRate
        self.totalTaxAmount = totalTaxAmount
        self.reference = reference
        self.type = type
    }
}

extension SandboxOrderLine {
    /// The lines' `total_amount`s added up; `nil` when the sum overflows `Int` (no order can be that large).
    static func total(_ lines: [SandboxOrderLine]) -> Int? {
        var sum = 0
        for line in lines {
            let (next, overflow) = sum.addingReportingOverflow(line.totalAmount)
            if overflow { return nil }
            sum = next
        }
        return sum
    }
}

public struct CreatedSession: Codable, Sendable {
    public var kpSessionId: String
    public var hppSessionId: String
    public var expiresAt: Date
}

/// A fault to inject on one route (an operation name such as `om.create_capture`), on one API's routes (`settlements.*`)
/// or on every Klarna route (`*`).
public struct SandboxFault: Codable, Sendable {
    public enum Kind: String, Codable, Sendable {
        /// An error status with a Klarna error body (default 503 `TEMPORARILY_UNAVAILABLE`).
        case status
        /// 429 with `X-Ratelimit-*` headers (and `Retry-After` when `retry_after_seconds` is set).
        case rateLimit = "rate_limit"
        /// Wait `delay_ms` before answering (longer than the client's timeout: a timeout).
        case delay
        /// Close the connection without an answer (TCP reset).
        case reset
        /// A 2xx whose body is not valid JSON.
        case malformed
        /// Hold the request `hold_seconds` of sandbox time before Klarna acts on it, as a request held up on its way
        /// would be: the effect happens only after the hold (the client may have timed out meanwhile), and any Klarna
        /// call arriving after the hold sees it. `after_effect` does not apply.
        case holdRequest = "hold_request"
        /// Act on the request at once, then hold the answer `hold_seconds` of sandbox time. `after_effect` does not
        /// apply.
        case holdAnswer = "hold_answer"
    }

    public var route: String
    public var kind: Kind
    public var status: Int?
    public var errorCode: String?
    public var delayMs: Int?
    /// How long `hold_request` and `hold_answer` hold, in sandbox seconds (default 30).
    public var holdSeconds: Double?
    public var resetSeconds: Int?
    public var retryAfterSeconds: Int?
    /// Apply the fault after the real effect happened (the capture is made, the answer is lost).
    public var afterEffect: Bool?
    /// How many times it fires; `nil` for every matching request.
    public var count: Int?
    /// How many matching requests pass before it fires (default 0): a fault in the middle of a walk through pages.
    public var skip: Int?
    /// Chance that a matching request is hit (default 1).
    public var probability: Double?

    public init(
        route: String, kind: Kind, status: Int? = nil, errorCode: String? = nil, delayMs: Int? = nil, holdSeconds: Double? = nil,
        resetSeconds: Int? = nil, retryAfterSeconds: Int? = nil, afterEffect: Bool? = nil, count: Int? = 1, skip: Int? = nil,
        probability: Double? = nil
    ) {
        self.route = route
        self.kind = kind
        self.status = status
        self.errorCode = errorCode
        self.delayMs = delayMs
        self.holdSeconds = holdSeconds
        self.resetSeconds = resetSeconds
        self.retryAfterSeconds = retryAfterSeconds
        self.afterEffect = afterEffect
        self.count = count
        self.skip = skip
        self.probability = probability
    }
}

extension SandboxFault {
    private enum CodingKeys: String, CodingKey {
        case route, kind, status, errorCode, delayMs, holdSeconds, resetSeconds, retryAfterSeconds, afterEffect, count, skip, probability
    }

    /// As the control API documents it: `count` absent fires once, `null` fires for every matching request.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            route: try container.decode(String.self, forKey: .route), kind: try container.decode(Kind.self, forKey: .kind),
            status: try container.decodeIfPresent(Int.self, forKey: .status),
            errorCode: try container.decodeIfPresent(String.self, forKey: .errorCode),
            delayMs: try container.decodeIfPresent(Int.self, forKey: .delayMs),
            holdSeconds: try container.decodeIfPresent(Double.self, forKey: .holdSeconds),
            resetSeconds: try container.decodeIfPresent(Int.self, forKey: .resetSeconds),
            retryAfterSeconds: try container.decodeIfPresent(Int.self, forKey: .retryAfterSeconds),
            afterEffect: try container.decodeIfPresent(Bool.self, forKey: .afterEffect),
            count: container.contains(.count) ? try container.decodeIfPresent(Int.self, forKey: .count) : 1,
            skip: try container.decodeIfPresent(Int.self, forKey: .skip),
            probability: try container.decodeIfPresent(Double.self, forKey: .probability))
    }

    /// `count` is always written (`null` for every matching request), so a fault read back is the same fault.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(route, forKey: .route)
        try container.encode(kind, forKey: .kind)
        try container.encodeIfPresent(status, forKey: .status)
        try container.encodeIfPresent(errorCode, forKey: .errorCode)
        try container.encodeIfPresent(delayMs, forKey: .delayMs)
        try container.encodeIfPresent(holdSeconds, forKey: .holdSeconds)
        try container.encodeIfPresent(resetSeconds, forKey: .resetSeconds)
        try container.encodeIfPresent(retryAfterSeconds, forKey: .retryAfterSeconds)
        try container.encodeIfPresent(afterEffect, forKey: .afterEffect)
        try container.encode(count, forKey: .count)
        try container.encodeIfPresent(skip, forKey: .skip)
        try container.encodeIfPresent(probability, forKey: .probability)
    }
}

/// The create-orders one authorization token received. KP create-order has no idempotency: one that arrives while an
/// earlier one for the same token is still pending (held, being processed, or not answered yet) is the second
/// create-order meeting the first that a client must never cause, so tests fail when `overlapping` is not 0.
public struct SandboxCreateOrderCount: Codable, Sendable, Equatable {
    public var authorizationToken: String
    /// The KP session the token belongs to; `nil` for a token the sandbox never issued.
    public var kpSessionId: String?
    /// Every create-order that arrived for the token.
    public var received: Int
    /// Arrived and not answered yet.
    public var pending: Int
    /// Arrived while an earlier one was pending.
    public var overlapping: Int
}

/// One request the sandbox received, as tests see it in the request log.
public struct SandboxRequestRecord: Codable, Sendable {
    public var seq: Int
    public var at: Date
    public var method: String
    public var path: String
    public var route: String
    public var idempotencyKey: String?
    /// The status answered; `nil` when the connection was reset instead.
    public var status: Int?
    public var fault: String?
    /// Answered from the idempotency store without doing anything.
    public var replayed: Bool
    /// The merchant id whose credentials the request carried; `nil` when they were no merchant's (a 401).
    public var merchant: String?
    /// A charge's body (`ct.create_order`), to show that every attempt sent the same bytes; nil for other routes.
    public var body: String?
}

/// One merchant-side side effect the sandbox actually performed. Tests count these: "exactly one capture".
/// Captures and refunds made by hand in the Merchant Portal (``KlarnaSandbox/portalCapture(order:amount:)``) are kinds
/// of their own, so that `captured` and `refunded` count only what came through the API.
public struct SandboxEffect: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable {
        case orderPlaced = "order_placed"
        case captured
        case refunded
        case portalCaptured = "portal_captured"
        case portalRefunded = "portal_refunded"
        case authorizationCancelled = "authorization_cancelled"
        case customerTokenCreated = "customer_token_created"
        case authorizationExtended = "authorization_extended"
        case orderCancelled = "order_cancelled"
        case remainingReleased = "remaining_released"
        case hppDisabled = "hpp_disabled"
        /// An order placed with a customer token (a charge); `tokenId` names the token.
        case tokenCharged = "token_charged"
        case customerTokenCancelled = "customer_token_cancelled"
    }

    public var seq: Int
    public var at: Date
    public var kind: Kind
    /// The request that caused it; 0 for a Merchant Portal action, which no request made.
    public var requestSeq: Int
    public var orderId: String?
    public var kpSessionId: String?
    public var hppSessionId: String?
    public var amount: Int?
    public var captureId: String?
    public var refundId: String?
    public var tokenId: String?
    public var idempotencyKey: String?
}
