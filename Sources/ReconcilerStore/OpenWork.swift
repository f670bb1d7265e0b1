import Foundation
import ReconcilerCore

/// An open unit of work as the store keeps it: enough to plan its next run without loading it.
public struct OpenWork: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case session(TrackedSession.Phase, PollProfile)
        case order(TrackedOrder.Phase)
        case paymentRequest
        /// An order with a refund under way, whatever the order's phase: run as hinted, so that its step looks for
        /// refunds (stores list these after the order's own row).
        case refund
    }

    public var key: WorkKey
    public var due: Date
    public var kind: Kind
    /// The session's token expiry (authorized) or `expires_at` (polling); the order's `expires_at`.
    public var deadline: Date?

    public init(key: WorkKey, due: Date, kind: Kind, deadline: Date? = nil) {
        self.key = key
        self.due = due
        self.kind = kind
        self.deadline = deadline
    }

    /// Its plan at start-up, by the same rules the engine applies after each step.
    public func plan(now: Date, deadlines: Deadlines) -> WorkPlan {
        let at = max(now, due)
        return switch kind {
        case .session(let phase, let poll): WorkPlan(due: due, urgency: phase.urgency(now: at, deadline: deadline), poll: poll)
        case .order(let phase): WorkPlan(due: due, urgency: phase.urgency(now: at, expiresAt: deadline, deadlines: deadlines))
        case .paymentRequest: WorkPlan(due: due, urgency: .routine)
        case .refund: WorkPlan(due: due, urgency: .inMotion)
        }
    }

    /// Whether its first run must be told it was hinted (a refund: an order's step looks for refunds then).
    public var needsHint: Bool { kind == .refund }
}
