import Foundation

/// A Klarna dispute state (Disputes API v4: INITIATED, REPRESENTMENT, PRE_ARBITRATION, ARBITRATION, CLOSED). Open:
/// a state this build does not know is kept and reported, never a crash.
public struct DisputeState: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let initiated = Self(rawValue: "INITIATED")
    public static let representment = Self(rawValue: "REPRESENTMENT")
    public static let preArbitration = Self(rawValue: "PRE_ARBITRATION")
    public static let arbitration = Self(rawValue: "ARBITRATION")
    public static let closed = Self(rawValue: "CLOSED")
    public static let knownValues: [Self] = [.initiated, .representment, .preArbitration, .arbitration, .closed]
}

/// A dispute as a read of Klarna shows it (v4), in the core's terms: every deadline as Klarna gives it, never computed.
public struct DisputeObservation: Sendable, Equatable {
    public var id: String
    public var orderID: String?
    public var captureID: String?
    public var state: DisputeState
    /// The state it left for this one, as Klarna says (`previous_state`).
    public var previousState: DisputeState?
    public var reason: String?
    public var amount: Int?
    public var currency: String?
    /// `configuration.options.hold_policy`: whether Klarna holds the disputed amount while the dispute is open.
    public var holdPolicy: String?
    /// `state_context.representment.expires_at` (or the webhook's `evidence_response_deadline_at`) while INITIATED.
    public var responseDueAt: Date?
    /// `state_context.arbitration_expires_at` while PRE_ARBITRATION.
    public var appealDueAt: Date?
    /// CLOSED: `WON` or `LOST` (compared case-insensitively), and Klarna's detailed code.
    public var outcome: String?
    public var outcomeDetailed: String?
    /// The attachments Klarna shows as the merchant's evidence (`partner_evidence`).
    public var evidenceAttachmentIDs: [String]
    /// Klarna's `updated_at`: a read older than the one applied changes nothing.
    public var updatedAt: Date?

    public init(
        id: String, orderID: String?, captureID: String? = nil, state: DisputeState, previousState: DisputeState? = nil, reason: String? = nil,
        amount: Int? = nil,
        currency: String? = nil, holdPolicy: String? = nil, responseDueAt: Date? = nil, appealDueAt: Date? = nil, outcome: String? = nil,
        outcomeDetailed: String? = nil, evidenceAttachmentIDs: [String] = [], updatedAt: Date? = nil
    ) {
        self.id = id
        self.orderID = orderID
        self.captureID = captureID
        self.state = state
        self.previousState = previousState
        self.reason = reason
        self.amount = amount
        self.currency = currency
        self.holdPolicy = holdPolicy
        self.responseDueAt = responseDueAt
        self.appealDueAt = appealDueAt
        self.outcome = outcome
        self.outcomeDetailed = outcomeDetailed
        self.evidenceAttachmentIDs = evidenceAttachmentIDs
        self.updatedAt = updatedAt
    }

    /// The deadline the merchant must act by in this state, if any.
    public var deadline: Date? {
        switch state {
        case .initiated: responseDueAt
        case .preArbitration: appealDueAt
        default: nil
        }
    }

    /// Klarna's outcome word, upper-cased (examples show both cases).
    public var closedAs: String? { state == .closed ? outcome?.uppercased() : nil }
}

/// A dispute the daemon follows: what Klarna said last, and which deadline warnings were given.
public struct TrackedDispute: Codable, Sendable, Equatable {
    public var id: String
    public var orderID: String?
    public var captureID: String?
    public var state: DisputeState
    public var reason: String?
    public var amount: Int?
    public var currency: String?
    public var holdPolicy: String?
    /// The deadline of the state it is in (``DisputeObservation/deadline``): the response or the appeal deadline.
    public var deadline: Date?
    public var outcome: String?
    public var outcomeDetailed: String?
    /// Klarna's `updated_at` of the read applied last.
    public var updatedAt: Date?
    /// When this daemon first saw it, and when it last read it.
    public var firstSeenAt: Date
    public var lastReadAt: Date
    /// The Disputes API version the reads came from.
    public var apiVersion: String
    /// Lead times (seconds) already warned about for ``deadline``; a moved deadline starts again.
    public var warnedLeads: [Int]
    public var warnedFor: Date?
    /// Tied to no order the daemon tracks (an orphan, like in settlements).
    public var orphan: Bool
    /// The store's count of writes to this dispute: a write expecting another count is refused (another daemon wrote
    /// it meanwhile), so each change's outcome is written once.
    public var revision: Int
    /// The Klarna account whose dispute this is: the one whose Disputes API showed it.
    public var account: AccountID {
        get { storedAccount ?? .default }
        set { storedAccount = newValue == .default ? nil : newValue }
    }
    /// Absent for the default account: disputes recorded before accounts read as its. Fileprivate: the memberwise
    /// initializer ``DisputeRules`` uses stays visible in this file.
    fileprivate var storedAccount: AccountID?

    enum CodingKeys: String, CodingKey {
        case id, orderID, captureID, state, reason, amount, currency, holdPolicy, deadline, outcome, outcomeDetailed, updatedAt
        case firstSeenAt, lastReadAt, apiVersion, warnedLeads, warnedFor, orphan, revision
        case storedAccount = "account"
    }

    public var isOpen: Bool { state != .closed }

    /// Held by Klarna while open, by its hold policy (Klarna spells the value `ON_DISPUTE_INITIATED` or `ON_DISPUTE_OPEN`).
    public var heldAmount: Int {
        guard isOpen, let policy = holdPolicy?.uppercased(), policy.hasPrefix("ON_DISPUTE") else { return 0 }
        return amount ?? 0
    }
}

/// What one read or webhook changes about a dispute, and what it says.
public struct DisputeStep: Sendable, Equatable {
    public var dispute: TrackedDispute
    public var events: [DomainEvent]
    /// `nil`: nothing worth an outcome (a stale or unchanged read).
    public var change: DisputeChange?
}

/// What happened to a dispute, as an outcome names it.
public enum DisputeChange: Sendable, Equatable {
    case opened
    case stateChanged(from: DisputeState)
    case deadlineMoved(from: Date?)
    case won
    case lost
}

/// The rules for disputes: applying what Klarna shows, and warning before each deadline at the lead times, once.
public enum DisputeRules {
    /// Applies `read` (made at `now`) to `known` (nil: a dispute not seen before). A read older than the one applied
    /// (by Klarna's `updated_at`) changes nothing; a state Klarna left is never re-entered from a stale webhook.
    ///
    /// `announceClosed`: whether a dispute first seen closed is an outcome. Not in the first list after disputes are
    /// switched on: months of disputes closed long ago would each page someone.
    public static func apply(
        _ read: DisputeObservation, to known: TrackedDispute?, orderTracked: Bool, apiVersion: String = "v4", now: Date,
        announceClosed: Bool = true
    ) -> DisputeStep {
        if let known, let seen = known.updatedAt, let updated = read.updatedAt, updated < seen {
            return DisputeStep(
                dispute: known, events: [DomainEvent(.staleStatus, "dispute \(read.id): a read older than the one applied changes nothing")],
                change: nil)
        }
        var dispute =
            known
            ?? TrackedDispute(
                id: read.id, orderID: read.orderID, captureID: read.captureID, state: read.state, reason: read.reason, amount: read.amount,
                currency: read.currency, holdPolicy: read.holdPolicy, deadline: read.deadline, outcome: nil, outcomeDetailed: nil,
                updatedAt: read.updatedAt, firstSeenAt: now, lastReadAt: now, apiVersion: apiVersion, warnedLeads: [], warnedFor: nil,
                orphan: !orderTracked, revision: 0)
        let before = known
        dispute.state = read.state
        dispute.orderID = read.orderID ?? dispute.orderID
        dispute.captureID = read.captureID ?? dispute.captureID
        dispute.reason = read.reason ?? dispute.reason
        dispute.amount = read.amount ?? dispute.amount
        dispute.currency = read.currency ?? dispute.currency
        dispute.holdPolicy = read.holdPolicy ?? dispute.holdPolicy
        dispute.deadline = read.deadline
        dispute.outcome = read.closedAs ?? dispute.outcome
        dispute.outcomeDetailed = read.outcomeDetailed ?? dispute.outcomeDetailed
        dispute.updatedAt = read.updatedAt ?? dispute.updatedAt
        dispute.lastReadAt = now
        dispute.apiVersion = apiVersion
        // An order tracked since (or pruned since) changes what the dispute is tied to.
        dispute.orphan = !orderTracked
        if dispute.deadline != dispute.warnedFor {
            // A new or moved deadline: its warnings are given again, from its own lead times.
            dispute.warnedLeads = []
            dispute.warnedFor = dispute.deadline
        }
        let what = describe(dispute)
        guard let before else {
            let due = dispute.deadline.map { ", respond by \(TrackedSession.format($0))" } ?? ""
            if dispute.state == .closed {
                let won = dispute.outcome == "WON"
                return DisputeStep(
                    dispute: dispute,
                    events: [
                        DomainEvent(
                            won ? .disputeWon : .disputeLost,
                            "\(what) first seen closed \(won ? "won" : "lost") (\(dispute.outcomeDetailed ?? "no detail"))")
                    ],
                    change: announceClosed ? (won ? .won : .lost) : nil)
            }
            return DisputeStep(
                dispute: dispute, events: [DomainEvent(.disputeOpened, "\(what) opened in \(read.state.rawValue)\(due)")], change: .opened)
        }
        if read.state == .closed, before.state != .closed {
            let won = dispute.outcome == "WON"
            return DisputeStep(
                dispute: dispute,
                events: [
                    DomainEvent(
                        won ? .disputeWon : .disputeLost, "\(what) closed \(won ? "won" : "lost") (\(dispute.outcomeDetailed ?? "no detail"))")
                ],
                change: won ? .won : .lost)
        }
        if read.state != before.state {
            let due = dispute.deadline.map { "; act by \(TrackedSession.format($0))" } ?? ""
            return DisputeStep(
                dispute: dispute,
                events: [DomainEvent(.disputeChanged, "\(what) moved from \(before.state.rawValue) to \(read.state.rawValue)\(due)")],
                change: .stateChanged(from: before.state))
        }
        if dispute.deadline != before.deadline {
            return DisputeStep(
                dispute: dispute,
                events: [
                    DomainEvent(
                        .disputeChanged,
                        "\(what): Klarna moved the deadline from \(before.deadline.map(TrackedSession.format) ?? "none") to \(dispute.deadline.map(TrackedSession.format) ?? "none")"
                    )
                ],
                change: .deadlineMoved(from: before.deadline))
        }
        return DisputeStep(dispute: dispute, events: [], change: nil)
    }

    /// "dispute ID (REASON, 4000 EUR)".
    static func describe(_ dispute: TrackedDispute) -> String {
        "dispute \(dispute.id) (\(dispute.reason ?? "no reason given"), \(dispute.amount.map(String.init) ?? "?") \(dispute.currency ?? ""))"
    }

    /// The warnings due at `now` for `dispute`'s deadline at `leads` (e.g. 72 h and 24 h): each lead once per deadline,
    /// and only the nearest one when several are due at once (a dispute first seen 10 hours before its deadline warns
    /// once, not twice). Returns the dispute with them recorded, and the warning's lead, if one is due.
    public static func warning(_ dispute: TrackedDispute, leads: [Duration], now: Date) -> (TrackedDispute, lead: Duration?) {
        guard dispute.isOpen, let deadline = dispute.deadline, now < deadline else { return (dispute, nil) }
        let left = deadline.timeIntervalSince(now)
        let due = leads.filter { left <= $0.timeInterval && !dispute.warnedLeads.contains(Int($0.timeInterval)) }
        guard let nearest = due.min() else { return (dispute, nil) }
        var warned = dispute
        // Every lead at or above the one warned about is spent: a longer lead's warning would come after a shorter one.
        warned.warnedLeads = Array(Set(warned.warnedLeads + leads.filter { $0 >= nearest }.map { Int($0.timeInterval) })).sorted()
        return (warned, nearest)
    }

    /// When ``warning(_:leads:now:)`` has the next warning for `dispute`, or nil.
    public static func nextWarning(_ dispute: TrackedDispute, leads: [Duration]) -> Date? {
        guard dispute.isOpen, let deadline = dispute.deadline else { return nil }
        return leads.filter { !dispute.warnedLeads.contains(Int($0.timeInterval)) }.map { deadline.addingTimeInterval(-$0.timeInterval) }.min()
    }

    /// How long after a deadline the dispute is read once more, to record what Klarna made of it (a missed response
    /// is a loss) without waiting for the next list.
    public static let afterDeadline: TimeInterval = 60

    /// When the daemon next reads `dispute` on its own: at its next warning while the deadline is ahead, and once just
    /// after the deadline; nil when neither is ahead (the list finds every later change).
    public static func nextLook(_ dispute: TrackedDispute, leads: [Duration], now: Date) -> Date? {
        guard dispute.isOpen, let deadline = dispute.deadline else { return nil }
        var looks: [Date] = []
        if now < deadline, let warning = nextWarning(dispute, leads: leads) { looks.append(warning) }
        let after = deadline.addingTimeInterval(afterDeadline)
        if now < after { looks.append(after) }
        return looks.min()
    }
}
