import Foundation

extension Outcome {
    /// The outcome of a dispute's change (``DisputeRules/apply(_:to:orderTracked:apiVersion:now:)``).
    public init(_ dispute: TrackedDispute, change: DisputeChange) {
        let what = DisputeRules.describe(dispute)
        let orphan = dispute.orphan ? " (an order the daemon does not track)" : ""
        let kind: OutcomeKind
        let reason: String
        switch change {
        case .opened:
            kind = .disputeOpened
            reason =
                "\(what) on order \(dispute.orderID ?? "?")\(orphan) is \(dispute.state.rawValue)"
                + (dispute.deadline.map { "; respond by \(TrackedSession.format($0)) or it is lost" } ?? "")
        case .stateChanged(let from):
            kind = .disputeChanged
            reason =
                "\(what) moved from \(from.rawValue) to \(dispute.state.rawValue)"
                + (dispute.deadline.map { "; act by \(TrackedSession.format($0))" } ?? "")
        case .deadlineMoved(let from):
            kind = .disputeChanged
            reason =
                "Klarna moved the deadline of \(what) from \(from.map(TrackedSession.format) ?? "none") to \(dispute.deadline.map(TrackedSession.format) ?? "none")"
        case .won:
            kind = .disputeWon
            reason = "\(what) closed won (\(dispute.outcomeDetailed ?? "no detail"))"
        case .lost:
            kind = .disputeLost
            reason = "\(what) closed lost (\(dispute.outcomeDetailed ?? "no detail")): the amount goes back to the customer"
        }
        self.init(dispute: dispute, kind: kind, reason: reason)
    }

    /// A deadline warning, `lead` before the deadline.
    public init(_ dispute: TrackedDispute, warningAt lead: Duration, now: Date) {
        let left = (dispute.deadline ?? now).timeIntervalSince(now)
        let hours = Int((left / 3_600).rounded(.down))
        let action = dispute.state == .preArbitration ? "appeal or accept the loss" : "submit evidence or accept the loss"
        self.init(
            dispute: dispute, kind: .disputeDeadline,
            reason:
                "\(DisputeRules.describe(dispute)) on order \(dispute.orderID ?? "?") is \(dispute.state.rawValue) and its deadline \(dispute.deadline.map(TrackedSession.format) ?? "?") is \(hours) h away (warning at \(Int(lead.timeInterval / 3_600)) h): \(action), or it is lost"
        )
    }

    /// An operator's action that did not happen.
    public init(_ action: DisputeAction, failed reason: String, dispute: TrackedDispute?) {
        self.init(
            kind: .disputeActionFailed, reason: "\(action.kind.word) of dispute \(action.disputeID) (asked by \(action.requestedBy)): \(reason)",
            orderID: action.orderID ?? dispute?.orderID, amount: dispute?.amount, currency: dispute?.currency)
        disputeID = action.disputeID
        disputeState = dispute?.state.rawValue
        deadline = dispute?.deadline
    }

    private init(dispute: TrackedDispute, kind: OutcomeKind, reason: String) {
        self.init(
            kind: kind, reason: reason, orderID: dispute.orderID, amount: dispute.amount, currency: dispute.currency,
            captureID: dispute.captureID)
        disputeID = dispute.id
        disputeState = dispute.state.rawValue
        deadline = dispute.deadline
    }
}
