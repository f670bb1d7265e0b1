import Foundation

/// An outbound side effect, persisted before the call so it happens at most once, whatever crashes in between.
///
/// `intended → sent → confirmed | failed | ambiguous`. `sent` is written before the request leaves; a crash after it
/// leaves the intent `sent`, and the next run reads Klarna before anything else. `ambiguous` is a call that ended
/// without a clear answer (timeout, reset, 5xx on a write); it is resolved the same way.
public struct Intent: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable, CaseIterable {
        case placeOrder = "place_order"
        case capture
        case extendAuthorization = "extend_authorization"
        case customerToken = "customer_token"
        /// OM cancel of an order with nothing captured (`klarna-reconciler cancel`).
        case cancelOrder = "cancel_order"
        /// OM release of what a partial capture left authorized (`klarna-reconciler release-remaining`).
        case releaseRemaining = "release_remaining_authorization"
        /// OM refund of captured money, asked for by the shop (`klarna-reconciler refund`, the socket's refund route).
        case refund
        /// An order placed with a customer token, asked for by the shop (`klarna-reconciler charge`, the socket's
        /// charge route): a renewal. Klarna deduplicates it by `Klarna-Idempotency-Key` for 24 hours.
        case charge
        /// A customer token cancelled (`PATCH …/status` `CANCELLED`), asked for by an operator (`klarna-reconciler token
        /// cancel`): setting a status Klarna keeps, so sending it again changes nothing.
        case cancelToken = "cancel_customer_token"

        /// Klarna deduplicates these by `Klarna-Idempotency-Key` (OM writes); the others have no documented
        /// idempotency and must never be repeated after an unclear answer without reading first.
        public var klarnaDeduplicates: Bool { self != .placeOrder && self != .customerToken }
    }

    public enum State: String, Codable, Sendable, CaseIterable {
        case intended, sent, confirmed, failed, ambiguous
    }

    /// Also the `Klarna-Idempotency-Key`: a UUIDv5 of the operation and its target.
    public var key: String
    public var kind: Kind
    /// The session (place order, customer token) or order (capture, extend) this intent belongs to.
    public var subject: String
    public var amount: Int?
    /// For captures: the order's captured amount once this capture is done, to recognise it on a read.
    public var expectedCapturedTotal: Int?
    public var captureRequestID: Int64?
    public var state: State
    public var attempts: Int
    public var nextAttemptAt: Date?
    /// Create-order only: an earlier attempt whose fate is unclear may still be on its way to Klarna until then, so
    /// nothing is read or sent for this intent before it (``CreateOrderSettle``). `nil` when no wait was decided.
    public var settleUntil: Date?
    public var lastError: String?
    /// What Klarna created: order id, capture id, refund id or customer token id.
    public var result: String?
    /// Refunds: the shop's reference (which makes the request idempotent, and Klarna repeats in settlements as
    /// `merchant_refund_reference`) and the customer-visible description.
    public var reference: String?
    public var refundDescription: String?
    /// Charges: the currency and capture policy of the order it places, and the request, built once.
    public var charge: ChargeTerms?
    /// The Klarna account of an intent no unit names one for (a charge, a token's cancellation: the intent is its own
    /// unit); nil for the default account (``ownAccount``) and for every other intent.
    public var account: AccountID?

    /// The account of an intent that is its own unit.
    public var ownAccount: AccountID { account ?? .default }
    /// Reads before the next attempt that failed in a row (refunds read the order before every attempt), for the
    /// backoff; nil when the last read went through.
    public var readFailures: Int?
    public var createdAt: Date
    public var updatedAt: Date

    public init(
        key: String, kind: Kind, subject: String, amount: Int? = nil, expectedCapturedTotal: Int? = nil, captureRequestID: Int64? = nil, now: Date
    ) {
        self.key = key
        self.kind = kind
        self.subject = subject
        self.amount = amount
        self.expectedCapturedTotal = expectedCapturedTotal
        self.captureRequestID = captureRequestID
        self.state = .intended
        self.attempts = 0
        self.createdAt = now
        self.updatedAt = now
    }

    /// Needs a read of Klarna before anything else is tried.
    public var needsResolution: Bool { state == .sent || state == .ambiguous }
    public var isFinished: Bool { state == .confirmed || state == .failed }

    /// Written (and committed) right before the request leaves.
    public func sending(now: Date) -> Intent {
        var intent = self
        if intent.charge != nil, intent.charge?.firstSentAt == nil { intent.charge?.firstSentAt = now }
        intent.readFailures = nil
        intent.state = .sent
        intent.attempts += 1
        intent.updatedAt = now
        intent.nextAttemptAt = nil
        intent.settleUntil = nil
        return intent
    }

    /// The capture a capture intent whose answer was lost made, from a read of the order that shows it done: the
    /// newest capture of the intent's amount that no other confirmed capture intent of the order claims (`claimed`),
    /// so a partial capture or one made in the Merchant Portal is not taken for it; nil when none fits (the ledger
    /// then keys the capture by its amount).
    public func resolvedCaptureID(among captures: [OrderMovements.Movement], claimed: Set<String>) -> String? {
        guard kind == .capture, let amount else { return nil }
        return captures.last { capture in capture.amount == amount && capture.id.map { !claimed.contains($0) } ?? false }?.id
    }

    public func confirmed(result: String?, now: Date) -> Intent {
        var intent = self
        intent.state = .confirmed
        intent.result = result ?? intent.result
        intent.lastError = nil
        intent.nextAttemptAt = nil
        intent.updatedAt = now
        return intent
    }

    public func failed(_ error: String, now: Date) -> Intent {
        var intent = self
        intent.state = .failed
        intent.lastError = error
        intent.nextAttemptAt = nil
        intent.updatedAt = now
        return intent
    }

    /// The call may or may not have had its effect.
    public func ambiguous(_ error: String, now: Date) -> Intent {
        var intent = self
        intent.state = .ambiguous
        intent.lastError = error
        intent.updatedAt = now
        return intent
    }

    /// A create-order that may still be in transit: nothing is read or sent before `until` (``CreateOrderSettle``).
    public func settling(until: Date) -> Intent {
        var intent = self
        intent.settleUntil = until
        intent.nextAttemptAt = until
        return intent
    }

    /// The read before its next attempt failed once more (`failures` in a row): it waits until `at`, its state unchanged.
    public func readFailed(failures: Int, until at: Date, error: String, now: Date) -> Intent {
        var intent = waiting(until: at, error: error, now: now)
        intent.readFailures = failures
        return intent
    }

    /// Its next attempt (or, for one whose answer was lost, the read that resolves it) waits until `at`; its state
    /// stays. `error`: why, when a failure is the reason.
    public func waiting(until at: Date, error: String? = nil, now: Date) -> Intent {
        var intent = self
        if let error { intent.lastError = error }
        intent.nextAttemptAt = at
        intent.updatedAt = now
        return intent
    }

    /// Known not to have happened (or, for deduplicated kinds, safe to send again with the same key) after `delay`.
    public func retrying(_ error: String?, at: Date, now: Date) -> Intent {
        var intent = self
        intent.state = .intended
        if let error { intent.lastError = error }
        intent.nextAttemptAt = at
        intent.updatedAt = now
        return intent
    }
}
