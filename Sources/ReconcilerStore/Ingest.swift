import Foundation
import ReconcilerCore

public enum TrackResult: Sendable, Equatable {
    case tracked(TrackedSession)
    /// Already tracked: nothing changed (a repeated track request is not an error).
    case existing(TrackedSession)
}

public enum CaptureRequestResult: Sendable, Equatable {
    case accepted(id: Int64)
    case unknownOrder
    /// The order does not take capture requests now (closed, or its policy is not `on_request`).
    case refused(String)
}

/// One understood inbound delivery (webhook, track or capture request) and what it asks of the store.
public struct IngestRecord: Sendable {
    public enum Action: Sendable {
        /// An HPP status callback: read the session now; start tracking it if it is new and the callback verified.
        case hintSession(hppSessionID: String, trackIfUnknown: TrackedSession?)
        /// A KP authorization callback: read every session of this KP session now.
        case hintSessionsOfPayment(kpSessionID: String)
        /// An OM notification: read the order now.
        case hintOrder(orderID: String)
        case track(TrackedSession)
        case capture(orderID: String, amount: Int?)
        /// A refund the shop asks for; `key`: its idempotency key (``RefundAsk/keyTarget``), under which it is recorded once.
        case refund(RefundAsk, key: String)
        /// A charge of a customer token the shop asks for; `key`: its idempotency key (``ChargeAsk/keyTarget``), under
        /// which it is recorded once; `capture`: the policy its order is followed by.
        case charge(ChargeAsk, key: String, capture: CapturePolicy)
        /// An operator asks to cancel a customer token (`PATCH …/status` `CANCELLED`), once; `key`: its intent's key.
        case cancelToken(token: String, key: String, account: AccountID)
        /// A Klarna Network webhook: read the payment request now, following it from here if it is new.
        case hintPaymentRequest(TrackedPaymentRequest)
        /// A dispute webhook: the dispute service reads the dispute (a hint kept until it has).
        case hintDispute(DisputeHint)
        /// Recorded and deduplicated; nothing to wake (a Klarna Network event without a payment request id).
        case recordOnly
    }

    /// Repeats with the same key are acknowledged and not processed again.
    public var dedupeKey: String?
    public var kind: String
    /// `socket`, `spool:<file name>`.
    public var source: String
    /// One line for the timeline.
    public var summary: String
    public var warning: String?
    public var action: Action
    /// The caller wakes the engine itself once this commits (the daemon's socket and spool); a command line, which
    /// cannot, leaves its wakeups for the daemon to find.
    public var callerWakes: Bool

    /// The account whose budget the work this delivery wakes spends, when the delivery names it (a new session or
    /// payment request): the scheduler weighs the woken key against that account's budget from its first run.
    public var account: AccountID? {
        switch action {
        case .hintSession(_, let session): session?.account
        case .track(let session): session.account
        case .hintPaymentRequest(let request): request.account
        case .charge(let ask, _, _): ask.account
        case .cancelToken(_, _, let account): account
        default: nil
        }
    }

    public init(
        dedupeKey: String?, kind: String, source: String, summary: String, warning: String? = nil, action: Action, callerWakes: Bool = true
    ) {
        self.dedupeKey = dedupeKey
        self.kind = kind
        self.source = source
        self.summary = summary
        self.warning = warning
        self.action = action
        self.callerWakes = callerWakes
    }
}

public enum IngestResult: Sendable, Equatable {
    /// Committed; these keys have work now.
    case accepted(wake: [WorkKey])
    /// Seen before (same dedupe key): acknowledged, not processed again.
    case repeated(firstSeen: Date)
    /// Understood but not acceptable (a capture for an unknown order); nothing was recorded.
    case refused(status: Int, error: String, detail: String)
}
