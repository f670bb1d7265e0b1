import Foundation
import ReconcilerCore

/// `GET /ordermanagement/v1/orders/{id}` (MerchantOrderDto), the fields the daemon acts on.
///
/// The spec requires none of its fields, so each is optional; the comments say what a reader falls back to. What the
/// order rules decide with (status, fraud status, captured and remaining amounts) has no safe stand-in: a read
/// without it is judged by no rule and nothing is captured on it.
public struct Order: Codable, Hashable, Sendable {
    /// Absent: the order is the one asked for.
    public var orderID: String?
    /// Absent: whether the order is final is not known, so no rule judges the read.
    public var status: OrderStatus?
    /// Absent: not known to be accepted, so never captured on this read.
    public var fraudStatus: FraudStatus?
    /// Absent: the amount known before, else what was captured plus what remains (reported, never captured by).
    public var orderAmount: Int?
    public var originalOrderAmount: Int?
    /// Absent: the sum of the listed ``captures`` (the spec's definition of the total); see ``capturedTotal``.
    public var capturedAmount: Int?
    public var refundedAmount: Int?
    /// Absent: what is left to capture is not known, so nothing is captured on this read.
    public var remainingAuthorizedAmount: Int?
    /// Absent: the currency stays as known before.
    public var purchaseCurrency: String?
    /// "The order can only be captured until this time." Absent: the expiry stays as known before.
    public var expiresAt: Date?
    public var createdAt: Date?
    public var klarnaReference: String?
    /// Absent: an order named by an operator cannot be checked against the payment's reference.
    public var merchantReference1: String?
    /// Absent reads as none.
    public var captures: [Capture]
    /// Refunds on the order, by the daemon or by anyone else (the Merchant Portal); absent reads as none.
    public var refunds: [Refund]

    public init(
        orderID: String? = nil, status: OrderStatus? = nil, fraudStatus: FraudStatus? = nil, orderAmount: Int? = nil,
        originalOrderAmount: Int? = nil, capturedAmount: Int? = nil, refundedAmount: Int? = nil,
        remainingAuthorizedAmount: Int? = nil, purchaseCurrency: String? = nil, expiresAt: Date? = nil,
        createdAt: Date? = nil, klarnaReference: String? = nil, merchantReference1: String? = nil,
        captures: [Capture] = [], refunds: [Refund] = []
    ) {
        self.orderID = orderID
        self.status = status
        self.fraudStatus = fraudStatus
        self.orderAmount = orderAmount
        self.originalOrderAmount = originalOrderAmount
        self.capturedAmount = capturedAmount
        self.refundedAmount = refundedAmount
        self.remainingAuthorizedAmount = remainingAuthorizedAmount
        self.purchaseCurrency = purchaseCurrency
        self.expiresAt = expiresAt
        self.createdAt = createdAt
        self.klarnaReference = klarnaReference
        self.merchantReference1 = merchantReference1
        self.captures = captures
        self.refunds = refunds
    }

    /// What Klarna shows captured: `captured_amount`, else the sum of the captures it lists, each with its amount.
    /// `nil` when it shows neither (no captures listed cannot tell "none" from "not said").
    public var capturedTotal: Int? {
        if let capturedAmount { return capturedAmount }
        let amounts = captures.compactMap(\.capturedAmount)
        guard !amounts.isEmpty, amounts.count == captures.count else { return nil }
        return amounts.reduce(0, +)
    }

    enum CodingKeys: String, CodingKey {
        case orderID = "order_id", status, fraudStatus = "fraud_status", orderAmount = "order_amount"
        case originalOrderAmount = "original_order_amount", capturedAmount = "captured_amount"
        case refundedAmount = "refunded_amount", remainingAuthorizedAmount = "remaining_authorized_amount"
        case purchaseCurrency = "purchase_currency", expiresAt = "expires_at", createdAt = "created_at"
        case klarnaReference = "klarna_reference", merchantReference1 = "merchant_reference1", captures, refunds
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        orderID = try c.decodeIfPresent(String.self, forKey: .orderID)
        status = try c.decodeIfPresent(OrderStatus.self, forKey: .status)
        fraudStatus = try c.decodeIfPresent(FraudStatus.self, forKey: .fraudStatus)
        orderAmount = try c.decodeIfPresent(Int.self, forKey: .orderAmount)
        originalOrderAmount = try c.decodeIfPresent(Int.self, forKey: .originalOrderAmount)
        capturedAmount = try c.decodeIfPresent(Int.self, forKey: .capturedAmount)
        refundedAmount = try c.decodeIfPresent(Int.self, forKey: .refundedAmount)
        remainingAuthorizedAmount = try c.decodeIfPresent(Int.self, forKey: .remainingAuthorizedAmount)
        purchaseCurrency = try c.decodeIfPresent(String.self, forKey: .purchaseCurrency)
        expiresAt = try c.decodeIfPresent(Date.self, forKey: .expiresAt)
        createdAt = try c.decodeIfPresent(Date.self, forKey: .createdAt)
        klarnaReference = try c.decodeIfPresent(String.self, forKey: .klarnaReference)
        merchantReference1 = try c.decodeIfPresent(String.self, forKey: .merchantReference1)
        captures = try c.decodeIfPresent([Capture].self, forKey: .captures) ?? []
        refunds = try c.decodeIfPresent([Refund].self, forKey: .refunds) ?? []
    }
}

/// One of an order's `captures[]`. Klarna's schema requires none of its fields, so each may be absent; a capture
/// without an amount tells nothing.
public struct Capture: Codable, Hashable, Sendable {
    public var captureID: String?
    public var capturedAmount: Int?
    public var capturedAt: Date?
    public var reference: String?

    public init(captureID: String?, capturedAmount: Int?, capturedAt: Date? = nil, reference: String? = nil) {
        self.captureID = captureID
        self.capturedAmount = capturedAmount
        self.capturedAt = capturedAt
        self.reference = reference
    }

    enum CodingKeys: String, CodingKey {
        case captureID = "capture_id", capturedAmount = "captured_amount", capturedAt = "captured_at", reference
    }
}

/// One of an order's `refunds[]`. Klarna's schema requires none of its fields, so each may be absent; a refund
/// without an amount tells nothing.
public struct Refund: Codable, Hashable, Sendable {
    public var refundID: String?
    public var refundedAmount: Int?
    public var refundedAt: Date?
    public var reference: String?

    public init(refundID: String?, refundedAmount: Int?, refundedAt: Date? = nil, reference: String? = nil) {
        self.refundID = refundID
        self.refundedAmount = refundedAmount
        self.refundedAt = refundedAt
        self.reference = reference
    }

    enum CodingKeys: String, CodingKey {
        case refundID = "refund_id", refundedAmount = "refunded_amount", refundedAt = "refunded_at", reference
    }
}

/// `POST /ordermanagement/v1/orders/{id}/captures` body.
public struct CaptureRequest: Codable, Hashable, Sendable {
    public var capturedAmount: Int
    public var description: String?
    public var reference: String?
    public var orderLines: [OrderLine]?

    public init(capturedAmount: Int, description: String? = nil, reference: String? = nil, orderLines: [OrderLine]? = nil) {
        self.capturedAmount = capturedAmount
        self.description = description
        self.reference = reference
        self.orderLines = orderLines
    }

    enum CodingKeys: String, CodingKey {
        case capturedAmount = "captured_amount", description, reference, orderLines = "order_lines"
    }
}

/// `POST /ordermanagement/v1/orders/{id}/refunds` body.
public struct RefundRequest: Codable, Hashable, Sendable {
    public var refundedAmount: Int
    /// Repeated in settlements as `merchant_refund_reference`.
    public var reference: String?
    /// Shown to the customer.
    public var description: String?

    public init(refundedAmount: Int, reference: String?, description: String?) {
        self.refundedAmount = refundedAmount
        self.reference = reference
        self.description = description
    }

    enum CodingKeys: String, CodingKey {
        case refundedAmount = "refunded_amount", reference, description
    }
}

/// A created capture: Klarna answers `201` with `Capture-Id` and `Location` headers and no body. The spec does not
/// mark either header required.
public struct CaptureCreated: Hashable, Sendable {
    /// `Capture-Id`, else the last segment of `Location`. Neither: `nil`, and the capture is known by its amount.
    public var captureID: String?
    public var location: String?

    public init(captureID: String?, location: String?) {
        self.captureID = captureID
        self.location = location
    }

    /// The capture Klarna's `201` names: the `Capture-Id` header, else the segment after `captures` in `Location`
    /// (`…/captures/{capture_id}`); an empty header counts as absent.
    public init(captureIDHeader: String?, location: String?) {
        let path = location.flatMap { URL(string: $0)?.pathComponents } ?? []
        let fromLocation = path.count >= 2 && path[path.count - 2] == "captures" ? path.last : nil
        self.init(captureID: captureIDHeader.flatMap { $0.isEmpty ? nil : $0 } ?? fromLocation, location: location)
    }
}
