import Foundation

/// A refund the shop asks for (`klarna-reconciler refund`, `POST /v1/orders/{order_id}/refunds`). The shop's
/// reference makes the request idempotent: the same reference on the same order is one refund.
public struct RefundAsk: Sendable, Equatable {
    public var orderID: String
    /// Minor units, positive.
    public var amount: Int
    /// 1–255 characters; Klarna repeats it in settlements as `merchant_refund_reference`.
    public var reference: String
    /// Customer-visible, at most 255 characters.
    public var description: String?

    public init(orderID: String, amount: Int, reference: String, description: String? = nil) {
        self.orderID = orderID
        self.amount = amount
        self.reference = reference
        self.description = description
    }

    /// The target its idempotency key is derived from: one key per order and reference (the order id's length first,
    /// so that no order id and reference together spell another pair).
    public var keyTarget: String { "\(orderID.utf8.count):\(orderID):\(reference)" }

    /// Why `text` cannot be a reference or description (Klarna takes 1–255 characters), or nil.
    public static func textProblem(_ text: String) -> String? {
        guard (1...255).contains(text.count) else { return "must be 1–255 characters" }
        guard !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            return "must not contain control characters"
        }
        return nil
    }
}

/// What a read of the order shows about refunding it.
public struct RefundFacts: Sendable, Equatable {
    /// One of the order's `refunds[]`.
    public struct Seen: Sendable, Equatable {
        public var id: String?
        public var amount: Int
        public var reference: String?

        public init(id: String?, amount: Int, reference: String?) {
            self.id = id
            self.amount = amount
            self.reference = reference
        }
    }

    public var status: OrderStatus?
    public var capturedTotal: Int?
    /// Klarna's `refunded_amount`; absent, the sum of ``refunds``.
    public var refundedTotal: Int?
    public var refunds: [Seen]
    public var currency: String?

    public init(status: OrderStatus?, capturedTotal: Int?, refundedTotal: Int?, refunds: [Seen], currency: String? = nil) {
        self.status = status
        self.capturedTotal = capturedTotal
        self.refundedTotal = refundedTotal
        self.refunds = refunds
        self.currency = currency
    }
}

/// The rules for refunds: which requests are recorded, and what a read of the order allows before each attempt.
public enum RefundRules {
    /// What a refund request becomes.
    public enum Request: Sendable, Equatable {
        /// A new intent to record (and wake the order's key for).
        case record(Intent)
        /// The same reference with the same amount: the refund already asked for, answered like a repeat delivery.
        case repeated(Intent)
        /// Refused before anything is recorded: the HTTP status, a stable word and the reason.
        case refused(status: Int, error: String, reason: String)
    }

    /// Decides a request from what the store holds: `order` (nil: not tracked) and `existing`, the intent already
    /// recorded under the request's idempotency key `key`.
    public static func request(_ ask: RefundAsk, key: String, order: TrackedOrder?, existing: Intent?, now: Date) -> Request {
        if let existing {
            guard existing.amount == ask.amount, existing.subject == ask.orderID else {
                return .refused(
                    status: 409, error: "reference_conflict",
                    reason:
                        "reference \(ask.reference) on order \(ask.orderID) already names a refund of \(existing.amount ?? 0) (\(existing.state.rawValue)); a refund of \(ask.amount) needs a reference of its own"
                )
            }
            return .repeated(existing)
        }
        guard let order else {
            return .refused(status: 404, error: "unknown_order", reason: "order \(ask.orderID) is not tracked by this daemon")
        }
        if order.status == .cancelled {
            return .refused(status: 409, error: "not_refundable", reason: "order \(ask.orderID) is cancelled: nothing was captured to refund")
        }
        var intent = Intent(key: key, kind: .refund, subject: ask.orderID, amount: ask.amount, now: now)
        intent.reference = ask.reference
        intent.refundDescription = ask.description
        intent.nextAttemptAt = now
        return .record(intent)
    }

    /// What a read of the order, made before each attempt, allows.
    public enum BeforeSending: Sendable, Equatable {
        case send
        /// The order lists this refund (by its reference) after an attempt whose answer was lost: it was made.
        case done(refundID: String?)
        /// Klarna would refuse it, or it was made outside the daemon, or Klarna answered no attempt clearly and its
        /// order lists none: nothing is sent, the refund fails with this reason.
        case refuse(String)
        /// Out of attempts, and the last one may still be on its way to Klarna: read again at this time before calling
        /// it not made.
        case readAgain(at: Date)
    }

    /// `maxAttempts`: after that many attempts without a clear answer, a read that lists no refund with the reference
    /// ends it as not made instead of sending again, once no attempt can still arrive: `longestCall` after the last was
    /// marked sent (its `updatedAt`, whether its answer was lost or the daemon died waiting for it).
    public static func beforeSending(_ intent: Intent, maxAttempts: Int, longestCall: Duration, now: Date, facts: RefundFacts) -> BeforeSending {
        let order = intent.subject
        let amount = intent.amount ?? 0
        if let reference = intent.reference, let seen = facts.refunds.last(where: { $0.reference == reference }) {
            // Only an attempt of this intent can have made it; before the first, someone else used the reference.
            guard intent.attempts > 0 else {
                return .refuse(
                    "Klarna's order \(order) already lists a refund with reference \(reference) (\(seen.id ?? "no id"), \(seen.amount)) that this daemon did not make: not refunded again"
                )
            }
            return .done(refundID: seen.id)
        }
        if intent.needsResolution, intent.attempts >= maxAttempts {
            let settled = intent.updatedAt.addingTimeInterval(longestCall.timeInterval)
            guard now.hasReached(settled) else { return .readAgain(at: settled) }
            return .refuse(
                "Klarna answered none of \(intent.attempts) attempts clearly (last: \(intent.lastError ?? "no answer")), and order \(order) lists no refund with reference \(intent.reference ?? "—"): not made; ask again with a new reference"
            )
        }
        if facts.status == .cancelled { return .refuse("order \(order) is cancelled at Klarna: nothing was captured to refund") }
        let captured = facts.capturedTotal ?? 0
        guard captured > 0 else { return .refuse("order \(order) has nothing captured at Klarna: nothing to refund") }
        let refunded = facts.refundedTotal ?? facts.refunds.reduce(0) { $0 + $1.amount }
        guard amount <= captured - refunded else {
            return .refuse(
                "a refund of \(amount) is more than order \(order) has left to refund: captured \(captured) minus refunded \(refunded) is \(captured - refunded)"
            )
        }
        return .send
    }

    /// A refund still to be made or resolved: the open work it makes (whatever its order's phase), what `hold` stops.
    public static func isUnderWay(_ intent: Intent) -> Bool { intent.kind == .refund && !intent.isFinished }

    /// The outcome of a refund Klarna made, with its ledger entry (so that the payout's RETURN line matches it).
    public static func refunded(
        _ intent: Intent, refundID: String?, order: TrackedOrder?, currency: String?, now: Date
    ) -> (
        Outcome, LedgerRefund
    ) {
        let amount = intent.amount ?? 0
        var outcome = outcome(
            .refunded, "refunded \(amount) on order \(intent.subject) (refund \(refundID ?? "id not given"), reference \(intent.reference ?? "—"))",
            intent, order: order, currency: currency)
        outcome.refundID = refundID
        return (outcome, LedgerRefund(orderID: intent.subject, refundID: refundID, amount: amount, at: now, source: .daemon))
    }

    /// The outcome of a refund that did not happen.
    public static func failed(_ intent: Intent, reason: String, order: TrackedOrder?, currency: String?) -> Outcome {
        outcome(.refundFailed, reason, intent, order: order, currency: currency)
    }

    private static func outcome(_ kind: OutcomeKind, _ reason: String, _ intent: Intent, order: TrackedOrder?, currency: String?) -> Outcome {
        var outcome = Outcome(
            kind: kind, reason: reason, hppSessionID: order?.hppSessionID, kpSessionID: order?.kpSessionID, orderID: intent.subject,
            merchantReference: order?.merchantReference, amount: intent.amount, currency: currency ?? order?.currency,
            klarnaReference: order?.klarnaReference)
        outcome.refundReference = intent.reference
        return outcome
    }
}
