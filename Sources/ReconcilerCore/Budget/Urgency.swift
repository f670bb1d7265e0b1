import Foundation

/// How much it costs to be late with a Klarna call, which decides who gets the rate budget first. One budget per
/// merchant account is spent in this order; within a level, first come first served.
public enum Urgency: Int, Sendable, Comparable, CaseIterable {
    /// Work no payment waits for (the settlement sync's reads): served only with the tokens nobody else waits for,
    /// and never given the fairness turn (``RateBudget``), so it never delays payment work.
    case background
    /// A scheduled read of a session nobody said anything about: chosen by how likely it is to find a change.
    case routine
    /// A charge of a customer token (a renewal): a side effect with no authorization running out, so a live payment
    /// goes before it (its create-order and capture, and the read its webhook asks for, the first step towards them);
    /// it goes before every scheduled read.
    case renewal
    /// A read someone asked for: a webhook, a capture request, an operator; also the read that confirms an expiry.
    case hinted
    /// A side effect, a read that moves a payment already in motion (the KP read before create-order, the OM read
    /// before a capture) or a read that resolves an intent whose answer was lost.
    case inMotion
    /// The same, with a deadline close: an authorization token or an order's authorization about to expire.
    case deadline

    public static func < (lhs: Urgency, rhs: Urgency) -> Bool { lhs.rawValue < rhs.rawValue }

    /// Its name as a metric label.
    public var label: String {
        switch self {
        case .background: "background"
        case .routine: "routine"
        case .hinted: "hinted"
        case .renewal: "renewal"
        case .inMotion: "in_motion"
        case .deadline: "deadline"
        }
    }

    /// A side effect or its read counts as near its deadline this long before the deadline (an authorization
    /// token lives 60 minutes; a quarter of that left is the last safe stretch).
    public static let tokenDeadlineMargin: Duration = .seconds(15 * 60)

    /// The level of work that moves a payment, raised to ``deadline`` once `deadline` is within `margin`.
    public static func inMotion(now: Date, deadline: Date?, margin: Duration) -> Urgency {
        guard let deadline else { return .inMotion }
        return now.addingTimeInterval(margin.timeInterval) >= deadline ? .deadline : .inMotion
    }
}

/// When a unit of work wants to run next and how urgent its first Klarna call will be. Routine polls carry what
/// their value is computed from.
public struct WorkPlan: Sendable, Equatable {
    public var due: Date
    public var urgency: Urgency
    /// Set for routine reads of an HPP session: the scheduler ranks these by ``PollValuation``.
    public var poll: PollProfile?
    /// The unit's account, whose rate budget its routine reads wait for; `nil` when the planner did not know it.
    public var account: AccountID?

    public init(due: Date, urgency: Urgency, poll: PollProfile? = nil, account: AccountID? = nil) {
        self.due = due
        self.urgency = urgency
        self.poll = urgency == .routine ? poll : nil
        self.account = account
    }
}
