import Foundation
import ReconcilerCore

/// An operator's request for one session or order, recorded before the daemon applies it in that key's next step.
public struct OperatorRequest: Sendable, Equatable {
    public enum State: String, Sendable, Codable {
        case pending, done, refused
    }

    public var id: Int64
    public var key: WorkKey
    public var action: OperatorAction
    /// `retry --order-id`.
    public var orderID: String?
    /// Who asked, for the timeline and the journal: "uid 1000 (alice) via the command line".
    public var requestedBy: String
    public var requestedAt: Date
    public var state: State
    /// What applying it did, or why it was refused.
    public var note: String?

    public init(
        id: Int64 = 0, key: WorkKey, action: OperatorAction, orderID: String? = nil, requestedBy: String, requestedAt: Date, state: State = .pending,
        note: String? = nil
    ) {
        self.id = id
        self.key = key
        self.action = action
        self.orderID = orderID
        self.requestedBy = requestedBy
        self.requestedAt = requestedAt
        self.state = state
        self.note = note
    }
}

/// What the engine needs to know about a key before it works on it.
public struct OperatorControls: Sendable, Equatable {
    public var held: Bool
    /// Oldest first.
    public var pending: [OperatorRequest]

    public init(held: Bool, pending: [OperatorRequest]) {
        self.held = held
        self.pending = pending
    }
}

/// A hold in force.
public struct Hold: Sendable, Equatable, Codable {
    public var since: Date
    public var by: String

    public init(since: Date, by: String) {
        self.since = since
        self.by = by
    }
}

/// One screen of numbers for `klarna-reconciler status`.
public struct StatusSummary: Sendable, Codable, Equatable {
    public var sessionsByPhase: [String: Int]
    public var ordersByPhase: [String: Int]
    public var intentsByState: [String: Int]
    public var outcomesByKind: [String: Int]
    public var oldestOpenSince: Date?
    public var oldestOpenID: String?
    public var nextDueAt: Date?
    public var nextDeadline: Date?
    public var nextDeadlineWhat: String?
    /// Items due now or earlier that no worker has taken yet.
    public var backlog: Int
    public var undeliveredOutcomes: Int
    public var lastKlarnaSuccess: Date?
    public var lastKlarnaError: Date?
    public var lastKlarnaErrorDetail: String?
    /// Deliveries refused in the last 24 hours, and the newest refusal.
    public var rejectionsLastDay: Int = 0
    public var lastRejection: String?
    /// Sessions and orders on hold (`klarna-reconciler hold`).
    public var held: Int = 0
    /// Sessions and orders by account and phase; `nil` from a daemon older than accounts.
    public var accounts: [String: AccountCounts]?

    /// One account's sessions and orders by phase.
    public struct AccountCounts: Sendable, Codable, Equatable {
        public var sessionsByPhase: [String: Int] = [:]
        public var ordersByPhase: [String: Int] = [:]

        public init() {}
    }

    /// Folds rows of ``SharedSQL/countsByAccount`` (`s` or `o`, account, phase, count) into ``accounts``.
    public mutating func addAccountCounts(_ rows: [(unit: String, account: String, phase: String, count: Int)]) {
        var accounts: [String: AccountCounts] = [:]
        for row in rows {
            if row.unit == "s" {
                accounts[row.account, default: AccountCounts()].sessionsByPhase[row.phase] = row.count
            } else {
                accounts[row.account, default: AccountCounts()].ordersByPhase[row.phase] = row.count
            }
        }
        self.accounts = accounts
    }

    public init(
        sessionsByPhase: [String: Int] = [:], ordersByPhase: [String: Int] = [:], intentsByState: [String: Int] = [:],
        outcomesByKind: [String: Int] = [:], backlog: Int = 0, undeliveredOutcomes: Int = 0
    ) {
        self.sessionsByPhase = sessionsByPhase
        self.ordersByPhase = ordersByPhase
        self.intentsByState = intentsByState
        self.outcomesByKind = outcomesByKind
        self.backlog = backlog
        self.undeliveredOutcomes = undeliveredOutcomes
    }
}

extension StoreListing {
    /// Only `account`'s sessions and orders (all of them for `nil`).
    public func of(_ account: AccountID?) -> StoreListing {
        guard let account else { return self }
        return StoreListing(sessions: sessions.filter { $0.account == account }, orders: orders.filter { $0.account == account }, intents: intents)
    }
}

public struct StoreListing: Sendable, Codable, Equatable {
    public var sessions: [TrackedSession]
    public var orders: [TrackedOrder]
    public var intents: [Intent]

    public init(sessions: [TrackedSession] = [], orders: [TrackedOrder] = [], intents: [Intent] = []) {
        self.sessions = sessions
        self.orders = orders
        self.intents = intents
    }
}

/// The sessions and orders an id names, with everything recorded about them, oldest first.
public struct PaymentTimeline: Sendable, Equatable {
    public var sessions: [TrackedSession]
    public var orders: [TrackedOrder]
    public var intents: [Intent]
    public var events: [RecordedEvent]
    public var outcomes: [StoredOutcome]

    public init(sessions: [TrackedSession], orders: [TrackedOrder], intents: [Intent], events: [RecordedEvent], outcomes: [StoredOutcome]) {
        self.sessions = sessions
        self.orders = orders
        self.intents = intents
        self.events = events
        self.outcomes = outcomes
    }
}
