import Foundation
import ReconcilerCore

// Dispute tracking's two roles: the daemon's dispute service (what Klarna showed, the warnings given, the operators'
// actions it sends) and the operators' reports and requests (`klarna-reconciler disputes`, `dispute …`, `show`).
// Every write is conditional on the revision the writer read, so two daemons reading the same change write its
// outcome once: the second finds the revision moved, reads again, and finds nothing new.

/// A dispute a webhook named, for the dispute service of the account the webhook was routed to.
public struct DisputeHint: Sendable, Equatable {
    public var disputeID: String
    public var account: AccountID

    public init(disputeID: String, account: AccountID) {
        self.disputeID = disputeID
        self.account = account
    }
}

/// One dispute as the service writes it: the dispute, Klarna's JSON of it, when to look at it next, and what its
/// change says.
public struct DisputeWrite: Sendable, Equatable {
    public var dispute: TrackedDispute
    /// The body Klarna answered, as it came (nil: keep the one stored).
    public var raw: String?
    /// When the service reads it next on its own (``DisputeRules/nextLook(_:leads:now:)``).
    public var nextLookAt: Date?
    /// The revision the writer read (nil: a dispute it did not know); a row with another is left alone.
    public var expectedRevision: Int?
    /// When the read began: a webhook's hint for the dispute recorded by then is answered by this read and forgotten;
    /// one recorded later waits for its own read.
    public var readStartedAt: Date
    public var outcomes: [Outcome]
    /// For the order's timeline (written only when the dispute is tied to a tracked order).
    public var events: [DomainEvent]

    public init(
        dispute: TrackedDispute, raw: String?, nextLookAt: Date?, expectedRevision: Int?, readStartedAt: Date, outcomes: [Outcome] = [],
        events: [DomainEvent] = []
    ) {
        self.dispute = dispute
        self.raw = raw
        self.nextLookAt = nextLookAt
        self.expectedRevision = expectedRevision
        self.readStartedAt = readStartedAt
        self.outcomes = outcomes
        self.events = events
    }
}

extension DisputeWrite {
    /// The revision the row has after the write.
    public var revision: Int { (expectedRevision ?? -1) + 1 }

    /// The dispute as the row keeps it: with the revision after the write.
    public var written: TrackedDispute {
        var written = dispute
        written.revision = revision
        return written
    }
}

/// An action as the service writes it after deciding or sending.
public struct DisputeActionWrite: Sendable, Equatable {
    public var action: DisputeAction
    /// The revision the writer read; a row with another is left alone (another daemon took the action).
    public var expectedRevision: Int
    public var outcome: Outcome?
    public var event: DomainEvent?

    public init(action: DisputeAction, expectedRevision: Int, outcome: Outcome? = nil, event: DomainEvent? = nil) {
        self.action = action
        self.expectedRevision = expectedRevision
        self.outcome = outcome
        self.event = event
    }
}

extension DisputeActionWrite {
    /// The action as the row keeps it: with the revision after the write, and a finished action without its file
    /// (never sent again, it leaves the store with this write).
    public var written: DisputeAction {
        var written = action.isFinished ? action.redacted : action
        written.revision = expectedRevision + 1
        return written
    }
}

/// What `/metrics` and `disputes` show in sum.
public struct DisputeHealth: Sendable, Equatable {
    /// Open disputes by state.
    public var openByState: [String: Int]
    /// Held by Klarna for open disputes, by currency.
    public var heldByCurrency: [String: Int]
    /// The nearest deadline of an open dispute.
    public var nextDeadline: Date?
    /// When the last complete list began: the next list starts a little before it (nil: never listed).
    public var listedThrough: Date?

    public init(openByState: [String: Int] = [:], heldByCurrency: [String: Int] = [:], nextDeadline: Date? = nil, listedThrough: Date? = nil) {
        self.openByState = openByState
        self.heldByCurrency = heldByCurrency
        self.nextDeadline = nextDeadline
        self.listedThrough = listedThrough
    }
}

/// What the dispute service needs.
public protocol DisputeStore: Sendable {
    func dispute(_ id: String) async throws -> TrackedDispute?
    /// Which of `orderIDs` the store tracks under `account` (a dispute of any other is an orphan).
    func trackedOrders(among orderIDs: [String], account: AccountID) async throws -> Set<String>
    /// Writes the dispute (under its ``TrackedDispute/account``) unless its row's revision is not `expectedRevision` (nil: unless a row exists), with its
    /// outcomes and events, and forgets a hint for it recorded by ``DisputeWrite/readStartedAt``; in one transaction.
    /// Returns whether it wrote.
    func record(_ write: DisputeWrite, at: Date) async throws -> Bool
    /// Disputes a webhook routed to `account` named that were not read since, oldest hint first.
    func disputeHints(account: AccountID, limit: Int) async throws -> [String]
    /// Forgets hints of disputes Klarna does not know (a read answered 404).
    func forgetDisputeHints(_ ids: [String]) async throws
    /// Open disputes of `account` whose next look is due at `now`, soonest first.
    func disputesToLook(account: AccountID, at now: Date, limit: Int) async throws -> [TrackedDispute]
    /// Actions on disputes of `account` not finished whose next look is due at `now`, oldest first.
    func dueDisputeActions(account: AccountID, at now: Date, limit: Int) async throws -> [DisputeAction]
    /// The soonest next look of an open dispute or an unfinished action of `account`.
    func nextDisputeLook(account: AccountID) async throws -> Date?
    /// Writes the action unless its row's revision moved, with its outcome and event; returns whether it wrote.
    func update(_ write: DisputeActionWrite, at: Date) async throws -> Bool
    /// `account`'s open disputes and its last complete list.
    func disputeHealth(account: AccountID) async throws -> DisputeHealth
    /// Notes that a list of every dispute of `account` updated since its start, begun at `through`, ended: the
    /// account's next list starts from there. Never moves back.
    func listed(through: Date, account: AccountID) async throws
    /// Whether an operator holds the order: a held payment's dispute gets no answer sent until it is released.
    func isHeld(order orderID: String) async throws -> Bool
}

extension DisputeStore where Self: OperatorStore {
    public func isHeld(order orderID: String) async throws -> Bool {
        try await holds([.order(orderID)])[.order(orderID)] != nil
    }
}

/// What the operators' commands read and ask.
public protocol DisputeReports: Sendable {
    /// Disputes, open ones only with `openOnly`, with a deadline before `dueBefore` if given, of `account` (every
    /// account's when nil); nearest deadline first, then newest.
    func disputes(openOnly: Bool, dueBefore: Date?, account: AccountID?) async throws -> [TrackedDispute]
    /// The disputes of these orders, oldest first.
    func disputes(orderIDs: [String]) async throws -> [TrackedDispute]
    /// Records an action for the daemon, with its dispute's order, unless an action on the same dispute is unfinished
    /// (that one is answered: two answers at once could contradict each other). Throws ``DisputeActionProblem`` for a
    /// dispute the store does not know.
    func request(_ action: DisputeAction, at: Date) async throws -> DisputeActionRequest
    func disputeAction(_ id: Int64) async throws -> DisputeAction?
    /// Every action on these disputes, oldest first, without their files.
    func disputeActions(disputeIDs: [String]) async throws -> [DisputeAction]
}

/// What recording an operator's dispute action did.
public enum DisputeActionRequest: Sendable, Equatable {
    case recorded(DisputeAction)
    /// An action on the same dispute is under way: this one.
    case existing(DisputeAction)
}
