import Foundation
import ReconcilerCore

/// A unit of work the scheduler runs: one session or one order, never two workers at once for the same key.
public enum WorkKey: Hashable, Sendable, CustomStringConvertible {
    case session(String)
    case order(String)
    case paymentRequest(String)

    public var description: String {
        switch self {
        case .session(let id): "session:\(id)"
        case .order(let id): "order:\(id)"
        case .paymentRequest(let id): "payment_request:\(id)"
        }
    }

    public init?(_ text: String) {
        if text.hasPrefix("session:") { self = .session(String(text.dropFirst(8))) }
        else if text.hasPrefix("order:") { self = .order(String(text.dropFirst(6))) }
        else if text.hasPrefix("payment_request:") { self = .paymentRequest(String(text.dropFirst(16))) }
        else { return nil }
    }
}

/// A line of a session's or order's timeline, for `show` and journald.
public struct RecordedEvent: Sendable, Codable, Equatable {
    public var id: Int64
    public var at: Date
    public var hppSessionID: String?
    public var orderID: String?
    public var kind: String
    public var message: String
    /// Structured extras: attempt, intent key, HTTP status, Klarna correlation id, error code.
    public var detail: [String: String]
}

/// An event to record with the ids it belongs to.
public struct NewEvent: Sendable {
    public var hppSessionID: String?
    public var orderID: String?
    public var event: DomainEvent
    public var detail: [String: String]

    public init(hppSessionID: String?, orderID: String?, _ event: DomainEvent, detail: [String: String] = [:]) {
        self.hppSessionID = hppSessionID
        self.orderID = orderID
        self.event = event
        self.detail = detail
    }
}

public struct StoredOutcome: Sendable, Equatable, Codable {
    public var id: Int64
    public var at: Date
    public var outcome: Outcome
    public var outboxWritten: Bool
    public var notified: Bool
    public var notifyAttempts: Int
    public var notifyNextAt: Date?
}

/// Everything one step of work changes, committed atomically.
public struct Change: Sendable {
    public var sessions: [TrackedSession] = []
    /// Orders to write; a new order (hand-off) is inserted only if Klarna's id is not known yet.
    public var orders: [TrackedOrder] = []
    public var newOrders: [TrackedOrder] = []
    public var paymentRequests: [TrackedPaymentRequest] = []
    public var intents: [Intent] = []
    public var events: [NewEvent] = []
    public var outcomes: [Outcome] = []
    /// Capture requests served (`done`) or refused, with a note.
    public var finishedCaptureRequests: [(id: Int64, state: String, note: String)] = []
    /// `klarna_ok` / `klarna_error` for `status`.
    public var health: [(name: String, detail: String)] = []
    /// Holds placed (with who asked) and lifted.
    public var holds: [(key: WorkKey, by: String)] = []
    public var releases: [WorkKey] = []
    /// Operator requests applied (`done`) or refused, with a note.
    public var answeredRequests: [(id: Int64, state: OperatorRequest.State, note: String)] = []

    public init() {}

    public var isEmpty: Bool {
        sessions.isEmpty && orders.isEmpty && newOrders.isEmpty && paymentRequests.isEmpty && intents.isEmpty && events.isEmpty && outcomes.isEmpty
            && finishedCaptureRequests.isEmpty && health.isEmpty && holds.isEmpty && releases.isEmpty && answeredRequests.isEmpty
    }
}

/// An open unit of work as the store keeps it: enough to plan its next run without loading it.
public struct OpenWork: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case session(TrackedSession.Phase, PollProfile)
        case order(TrackedOrder.Phase)
        case paymentRequest
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
        }
    }
}

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
}

public struct LiveStatus: Sendable, Equatable {
    /// Side effects decided but not yet known to be done or refused (`intended`, `sent`, `ambiguous`).
    public var unfinishedIntents: Int
    public var lastKlarnaSuccess: Date?
    public var lastKlarnaError: Date?
    public var lastKlarnaErrorDetail: String?
}

public struct ReloadAnswer: Sendable, Equatable {
    public var ok: Bool
    public var message: String
}

public struct StoreListing: Sendable, Codable, Equatable {
    public var sessions: [TrackedSession]
    public var orders: [TrackedOrder]
    public var intents: [Intent]
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
        /// A Klarna Network webhook: read the payment request now, following it from here if it is new.
        case hintPaymentRequest(TrackedPaymentRequest)
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

    public init(dedupeKey: String?, kind: String, source: String, summary: String, warning: String? = nil, action: Action) {
        self.dedupeKey = dedupeKey
        self.kind = kind
        self.source = source
        self.summary = summary
        self.warning = warning
        self.action = action
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

    public init(id: Int64 = 0, key: WorkKey, action: OperatorAction, orderID: String? = nil, requestedBy: String, requestedAt: Date, state: State = .pending, note: String? = nil) {
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
}

extension WorkKey {
    public init(_ target: RemediationTarget) {
        switch target {
        case .session(let id): self = .session(id)
        case .order(let id): self = .order(id)
        }
    }

    public var remediationTarget: RemediationTarget? {
        switch self {
        case .session(let id): .session(id)
        case .order(let id): .order(id)
        case .paymentRequest: nil
        }
    }
}

/// What the operator commands (the CLI and the socket's payment routes) need: find a payment, record requests for
/// the daemon, and read its answers.
public protocol OperatorStore: Sendable {
    func summary(now: Date) async throws -> StatusSummary
    func list(phase: String?, limit: Int) async throws -> StoreListing
    func timeline(for id: String) async throws -> (sessions: [TrackedSession], orders: [TrackedOrder], intents: [Intent], events: [RecordedEvent], outcomes: [StoredOutcome])
    /// The payment `id` names (HPP session, KP session, order id or merchant reference) with its intents and holds.
    func payment(_ id: String) async throws -> PaymentView
    /// Records requests, an event for each, and a wakeup; `delivered`: the caller wakes the engine itself (the
    /// daemon's socket), so the wakeup row only matters after a crash. Returns the requests' ids.
    func submit(_ requests: [OperatorRequest], delivered: Bool, at: Date) async throws -> [Int64]
    func operatorRequests(_ ids: [Int64]) async throws -> [OperatorRequest]
    func holds(_ keys: [WorkKey]) async throws -> [WorkKey: Hold]
}

/// The state numbers `/metrics` shows, from one read of the store.
public struct StateSnapshot: Sendable, Equatable {
    public var openSessionsByPhase: [String: Int] = [:]
    public var openOrdersByPhase: [String: Int] = [:]
    /// `intended`, `sent` and `ambiguous` only: finished intents are counted as they finish.
    public var unfinishedIntentsByState: [String: Int] = [:]
    public var outboxBacklog = 0
    public var notifyBacklog = 0
    public var held = 0
    public var oldestOpenSince: Date?
    public var nextDeadline: Date?

    public init() {}
}

/// What the daemon's metrics read from the store.
public protocol StateSnapshotSource: Sendable {
    func stateSnapshot() async throws -> StateSnapshot
}

/// Durable state. The SQLite implementation is the default; the protocol leaves room for PostgreSQL.
public protocol ReconcilerStore: Sendable {
    /// Starts tracking `session` unless it is tracked already; records `event` with it.
    func track(_ session: TrackedSession, event: DomainEvent, at: Date) async throws -> TrackResult
    func session(_ hppSessionID: String) async throws -> TrackedSession?
    func order(_ orderID: String) async throws -> TrackedOrder?
    func paymentRequest(_ id: String) async throws -> TrackedPaymentRequest?
    func intent(_ key: String) async throws -> Intent?
    func commit(_ change: Change, at: Date) async throws

    /// Every open session, order and payment request with what its plan is made from.
    func openWork() async throws -> [OpenWork]
    /// Keys other processes (CLI) asked to be looked at, after `sequence`; returns the newest sequence seen and
    /// forgets the rows up to it. `includingDelivered`: also the keys a delivery's ingest woke the engine for
    /// directly, which only a daemon starting after a crash needs (one read per hint, not two).
    func wakeups(after sequence: Int64, includingDelivered: Bool) async throws -> (keys: [WorkKey], last: Int64)

    func requestCapture(orderID: String, amount: Int?, at: Date) async throws -> CaptureRequestResult
    /// Records a delivery and its effect (events, wakeups, a new tracked session, a capture request) in one commit,
    /// unless its dedupe key was seen before.
    func ingest(_ record: IngestRecord, at: Date) async throws -> IngestResult
    /// Keeps a refused delivery's reason (socket requests; spool files keep theirs in quarantine/).
    func recordRejection(source: String, status: Int, error: String, detail: String, at: Date) async throws
    func oldestCaptureRequest(orderID: String) async throws -> CaptureRequestItem?

    /// Whether `key` is held, and the operator requests waiting for it.
    func operatorControls(for key: WorkKey) async throws -> OperatorControls
    /// Keys with operator requests not yet applied (read at start: a request may have come while the daemon was down).
    func keysWithPendingOperatorRequests() async throws -> [WorkKey]
    /// Every intent of a session (by HPP session id) or order, oldest first.
    func intents(subject: String) async throws -> [Intent]

    /// The session or order `id` names (an HPP session id, KP session id, order id or merchant reference) and its
    /// timeline.
    func timeline(for id: String) async throws -> (sessions: [TrackedSession], orders: [TrackedOrder], intents: [Intent], events: [RecordedEvent], outcomes: [StoredOutcome])
    func list(phase: String?, limit: Int) async throws -> StoreListing
    func summary(now: Date) async throws -> StatusSummary
    /// The few numbers `STATUS=` shows, cheap enough to ask every few seconds.
    func liveStatus() async throws -> LiveStatus

    /// Reload handshake: the `reload` command records a request and signals the daemon; the daemon answers every
    /// request up to the newest it saw when it started reloading; the command waits for its answer.
    func requestReload(at: Date) async throws -> Int64
    func newestReloadRequest() async throws -> Int64?
    func answerReloads(through id: Int64, ok: Bool, message: String, at: Date) async throws
    func reloadAnswer(_ id: Int64) async throws -> ReloadAnswer?

    /// Outcomes without their outbox file, or whose notification is due at `now`.
    func undeliveredOutcomes(now: Date, limit: Int) async throws -> [StoredOutcome]
    func markOutboxWritten(_ id: Int64) async throws
    func markNotified(_ id: Int64) async throws
    func notifyFailed(_ id: Int64, nextAt: Date?) async throws
}
