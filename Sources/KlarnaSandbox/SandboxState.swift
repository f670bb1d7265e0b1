import Foundation
import HTTPServer
import ReconcilerCore

/// Klarna's side of the world, as the sandbox keeps it. Mutated only under ``KlarnaSandbox``'s lock.
struct SandboxState {
    struct PaymentSession {
        let id: String
        /// The merchant id it belongs to, as does everything made from it.
        let merchant: String
        var complete = false
        let purchaseCountry: String
        let purchaseCurrency: String
        let locale: String
        let orderAmount: Int
        let orderTaxAmount: Int
        let orderLines: [SandboxOrderLine]
        let merchantReference: String?
        let intent: String
        let createdAt: Date
        var expiresAt: Date
        var authorizationToken: String?
        var tokenExpiresAt: Date?
        var tokenCancelled = false
        var orderID: String?
        var hppSessionIDs: [String] = []
        let fraudStatus: String
        let fraudDecision: (after: TimeInterval, status: String)?
    }

    struct HostedSession {
        let id: String
        let merchant: String
        let kpSessionID: String
        let mode: String
        var status = "WAITING"
        var updatedAt: Date
        var expiresAt: Date
        /// Pending transitions, absolute times, in order.
        var schedule: [(at: Date, status: String)]
        var orderID: String?
        var klarnaReference: String?
    }

    struct Capture {
        let id: String
        let amount: Int
        let at: Date
        /// The capture body's `reference`, which Klarna repeats in settlements as `merchant_capture_reference`.
        var reference: String?
    }

    struct Refund {
        let id: String
        let amount: Int
        let at: Date
        /// The refund body's `reference`, which Klarna repeats in settlements as `merchant_refund_reference`.
        let reference: String?
    }

    struct Order {
        let id: String
        let merchant: String
        let kpSessionID: String
        let klarnaReference: String
        let currency: String
        let merchantReference: String?
        let orderAmount: Int
        var capturedAmount = 0
        var status = "AUTHORIZED"
        var fraudStatus: String
        var fraudDecisionAt: Date?
        var fraudDecision: String?
        let createdAt: Date
        var expiresAt: Date
        var captures: [Capture] = []
        var refunds: [Refund] = []
        /// The rest of a partial capture was released.
        var released = false

        var refundedAmount: Int { refunds.reduce(0) { $0 + $1.amount } }

        var remainingAuthorizedAmount: Int {
            status == "CANCELLED" || status == "EXPIRED" || released ? 0 : orderAmount - capturedAmount
        }
    }

    struct CustomerToken {
        let id: String
        let merchant: String
        /// The KP session it was created from (a control-made token has one of its own, never read).
        let kpSessionID: String
        let currency: String
        /// As Klarna spells it: `ACTIVE`, `CANCELLED`, `SUSPENDED`, or anything a test sets.
        var status = "ACTIVE"
        /// How its charges are declined, in order; an empty list places the order.
        var declines: [SandboxChargeDecline] = []
        /// The fraud status its next orders get.
        var fraudStatus = "ACCEPTED"
    }

    struct PaymentRequest {
        let id: String
        let merchant: String
        var state: String
        var stateReason: String?
        let createdAt: Date
        var updatedAt: Date
        var expiresAt: Date
        var sessionToken: String?
    }

    /// An idempotency key as one merchant used it.
    struct IdempotencyKey: Hashable {
        let merchant: String
        let key: String
    }

    struct StoredReply {
        let at: Date
        let response: SandboxResponse
    }

    /// A request a `hold_request` fault holds: Klarna acts on it once `releaseAt` has come (`outcome` then set).
    struct HeldRequest {
        let route: KlarnaRoute
        let request: ServerRequest
        let merchant: String
        let idempotencyKey: String?
        let releaseAt: Date
        var outcome: (SandboxResponse, replayed: Bool)?
    }

    var paymentSessions: [String: PaymentSession] = [:]
    var hostedSessions: [String: HostedSession] = [:]
    var tokens: [String: String] = [:]  // authorization token → KP session id
    var orders: [String: Order] = [:]
    /// Customer tokens by id (created by a tokenize session or by the control API), and how their charges answer.
    var customerTokens: [String: CustomerToken] = [:]
    var paymentRequests: [String: PaymentRequest] = [:]
    /// Disputes by id, and their ids oldest first (SandboxDisputes.swift).
    var disputes: [String: Dispute] = [:]
    var disputeOrder: [String] = []
    var nextDisputeNumber = 0
    /// Webhooks Klarna would have delivered, oldest first, unsigned (the sandbox signs them when they are fetched).
    var webhooks: [Webhook] = []
    var nextWebhookSeq = 0
    var idempotency: [IdempotencyKey: StoredReply] = [:]
    var faults: [(id: Int, fault: SandboxFault)] = []
    /// Held requests by their request seq, until their answer is given.
    var heldRequests: [Int: HeldRequest] = [:]
    /// Create-orders by authorization token: how many arrived, are pending, and met an earlier pending one.
    var createOrders: [String: SandboxCreateOrderCount] = [:]
    /// Klarna's per-merchant limit by merchant id, for the merchants a test set one for: a second's worth of calls
    /// saved up at most.
    var rateLimits: [String: RateBudget] = [:]
    /// How answers to the daemon's calls are shaped (SandboxResponseShape.swift).
    var responseShape = SandboxResponseShape.normal
    var nextFaultID = 1
    var requests: [SandboxRequestRecord] = []
    private(set) var effects: [SandboxEffect] = []
    /// How many effects of each kind `effects` holds, kept as they are recorded: a bench polls it while it measures.
    private(set) var effectCounts: [SandboxEffect.Kind: Int] = [:]

    mutating func record(_ effect: SandboxEffect) {
        effects.append(effect)
        effectCounts[effect.kind, default: 0] += 1
    }
    var settlements = SettlementLedger()

    // MARK: Create-orders in flight

    /// A create-order for `token` arrived: counted, and counted as overlapping when an earlier one is still pending.
    mutating func createOrderArrived(token: String) {
        var count =
            createOrders[token]
            ?? SandboxCreateOrderCount(
                authorizationToken: token, kpSessionId: tokens[token], received: 0, pending: 0, overlapping: 0)
        count.received += 1
        if count.pending > 0 { count.overlapping += 1 }
        count.pending += 1
        createOrders[token] = count
    }

    /// A create-order for `token` was answered (or its connection reset).
    mutating func createOrderAnswered(token: String) {
        // Gone when the sandbox was reset meanwhile.
        guard var count = createOrders[token], count.pending > 0 else { return }
        count.pending -= 1
        createOrders[token] = count
    }

    // MARK: Time moves lazily: each entity catches up when it is next looked at.

    mutating func catchUp(hpp id: String, now: Date) {
        guard var session = hostedSessions[id] else { return }
        while let next = session.schedule.first, next.at <= now {
            session.schedule.removeFirst()
            hostedSessions[id] = session
            transition(hpp: id, to: next.status, at: next.at)
            session = hostedSessions[id]!
        }
    }

    mutating func catchUp(order id: String, now: Date) {
        guard var order = orders[id] else { return }
        if let at = order.fraudDecisionAt, let decision = order.fraudDecision, at <= now {
            order.fraudStatus = decision
            order.fraudDecisionAt = nil
            if decision == "REJECTED" { order.status = "CANCELLED" }
        }
        if order.expiresAt <= now, order.status == "AUTHORIZED" || order.status == "PART_CAPTURED" {
            order.status = order.capturedAmount > 0 ? "CLOSED" : "EXPIRED"
        }
        orders[id] = order
    }

    /// Moves an HPP session to `status`; reaching `COMPLETED` authorizes the KP session or places the order.
    mutating func transition(hpp id: String, to status: String, at: Date) {
        guard var session = hostedSessions[id], session.status != status else { return }
        // Klarna's definitive states do not change again.
        guard !["COMPLETED", "CANCELLED", "DISABLED"].contains(session.status) else { return }
        session.status = status
        session.updatedAt = at
        if status == "COMPLETED", var payment = paymentSessions[session.kpSessionID] {
            switch session.mode {
            case "PLACE_ORDER", "CAPTURE_ORDER":
                let order = placeOrder(for: &payment, at: at, capture: session.mode == "CAPTURE_ORDER")
                session.orderID = order.id
                session.klarnaReference = order.klarnaReference
            default:
                let token = UUID().uuidString.lowercased()
                payment.authorizationToken = token
                payment.tokenExpiresAt = at.addingTimeInterval(60 * 60)
                tokens[token] = payment.id
            }
            paymentSessions[payment.id] = payment
        }
        hostedSessions[id] = session
    }

    mutating func placeOrder(for payment: inout PaymentSession, at: Date, capture: Bool) -> Order {
        var order = Order(
            id: UUID().uuidString.lowercased(), merchant: payment.merchant, kpSessionID: payment.id, klarnaReference: Self.klarnaReference(),
            currency: payment.purchaseCurrency, merchantReference: payment.merchantReference,
            orderAmount: payment.orderAmount, fraudStatus: payment.fraudStatus,
            fraudDecisionAt: payment.fraudDecision.map { at.addingTimeInterval($0.after) },
            fraudDecision: payment.fraudDecision?.status, createdAt: at,
            expiresAt: at.addingTimeInterval(28 * 86_400))
        if capture {
            order.captures.append(Capture(id: UUID().uuidString.lowercased(), amount: order.orderAmount, at: at))
            order.capturedAmount = order.orderAmount
            order.status = "CAPTURED"
        }
        payment.complete = true
        payment.orderID = order.id
        orders[order.id] = order
        return order
    }

    // MARK: Order changes, the same whether the API or the Merchant Portal makes them

    /// Captures `amount` of the order's remaining authorization.
    mutating func capture(order id: String, amount: Int, reference: String?, at: Date) throws(Rejection) -> Capture {
        guard var order = orders[id] else { throw Rejection(404, "NO_SUCH_ORDER", "The order does not exist") }
        guard amount > 0 else { throw Rejection(400, "BAD_VALUE", "captured_amount must be positive") }
        guard order.fraudStatus == "ACCEPTED", order.status == "AUTHORIZED" || order.status == "PART_CAPTURED",
            amount <= order.remainingAuthorizedAmount
        else { throw Rejection(403, "CAPTURE_NOT_ALLOWED", "Capture not allowed.") }
        let capture = Capture(id: UUID().uuidString.lowercased(), amount: amount, at: at, reference: reference)
        order.captures.append(capture)
        order.capturedAmount += amount
        order.status = order.capturedAmount == order.orderAmount ? "CAPTURED" : "PART_CAPTURED"
        orders[id] = order
        return capture
    }

    /// Refunds `amount` of what was captured and not refunded yet (Klarna refunds captured money only).
    mutating func refund(order id: String, amount: Int, reference: String?, at: Date) throws(Rejection) -> Refund {
        guard var order = orders[id] else { throw Rejection(404, "NO_SUCH_ORDER", "The order does not exist") }
        guard amount > 0 else { throw Rejection(400, "BAD_VALUE", "refunded_amount must be positive") }
        guard amount <= order.capturedAmount - order.refundedAmount else {
            throw Rejection(403, "REFUND_NOT_ALLOWED", "Refund not allowed.")
        }
        let refund = Refund(id: UUID().uuidString.lowercased(), amount: amount, at: at, reference: reference)
        order.refunds.append(refund)
        orders[id] = order
        return refund
    }

    static func klarnaReference() -> String {
        let alphabet = Array("ABCDEFGHJKLMNPQRSTUVWXYZ23456789")
        return String((0..<8).map { _ in alphabet.randomElement()! })
    }
}
