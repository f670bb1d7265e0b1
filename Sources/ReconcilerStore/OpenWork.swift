import Foundation
import ReconcilerCore

/// An open unit of work as the store keeps it: enough to plan its next run without loading it.
public struct OpenWork: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case session(TrackedSession.Phase, PollProfile)
        case order(TrackedOrder.Phase)
        case paymentRequest
        /// A closed order with a refund under way (an open order's row is due by its refund's time too:
        /// ``merging(refunds:)``).
        case refund
        /// An intent on a customer token: a charge before its order is placed, a cancellation.
        case customerToken
    }

    public var key: WorkKey
    public var due: Date
    public var kind: Kind
    /// The session's token expiry (authorized) or `expires_at` (polling); the order's `expires_at`.
    public var deadline: Date?
    /// Its account (the row's `account` column).
    public var account: AccountID

    public init(key: WorkKey, due: Date, kind: Kind, deadline: Date? = nil, account: AccountID = .default) {
        self.key = key
        self.due = due
        self.kind = kind
        self.deadline = deadline
        self.account = account
    }

    /// Its plan at start-up, by the same rules the engine applies after each step.
    public func plan(now: Date, deadlines: Deadlines) -> WorkPlan {
        let at = max(now, due)
        return switch kind {
        case .session(let phase, let poll):
            WorkPlan(due: due, urgency: phase.urgency(now: at, deadline: deadline), poll: poll, account: account)
        case .order(let phase): WorkPlan(due: due, urgency: phase.urgency(now: at, expiresAt: deadline, deadlines: deadlines), account: account)
        case .paymentRequest: WorkPlan(due: due, urgency: .routine, account: account)
        case .refund: WorkPlan(due: due, urgency: .inMotion, account: account)
        case .customerToken: WorkPlan(due: due, urgency: .renewal, account: account)
        }
    }

    /// `units` (the stores' open sessions, orders and payment requests) with the orders that have a refund under way
    /// (`refunds`, one per order, kind ``Kind/refund``): an open order is due by the earlier of its own time and its
    /// refund's; a closed one is listed as its refund. One row per key.
    public static func merging(_ units: [OpenWork], refunds: [OpenWork]) -> [OpenWork] {
        let byKey = Dictionary(refunds.map { ($0.key, $0) }) { first, _ in first }
        var merged = units.map { unit -> OpenWork in
            guard let refund = byKey[unit.key], refund.due < unit.due else { return unit }
            var unit = unit
            unit.due = refund.due
            return unit
        }
        let listed = Set(units.map(\.key))
        merged += refunds.filter { !listed.contains($0.key) }
        return merged
    }
}
