import Foundation
import ReconcilerCore

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

    public init(id: Int64, at: Date, hppSessionID: String?, orderID: String?, kind: String, message: String, detail: [String: String]) {
        self.id = id
        self.at = at
        self.hppSessionID = hppSessionID
        self.orderID = orderID
        self.kind = kind
        self.message = message
        self.detail = detail
    }
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

    public init(id: Int64, at: Date, outcome: Outcome, outboxWritten: Bool, notified: Bool, notifyAttempts: Int, notifyNextAt: Date?) {
        self.id = id
        self.at = at
        self.outcome = outcome
        self.outboxWritten = outboxWritten
        self.notified = notified
        self.notifyAttempts = notifyAttempts
        self.notifyNextAt = notifyNextAt
    }
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
    public var finishedCaptureRequests: [(id: Int64, state: CaptureRequestState, note: String)] = []
    /// `klarna_ok` / `klarna_error` for `status`.
    public var health: [(key: HealthKey, detail: String)] = []
    /// Holds placed (with who asked) and lifted.
    public var holds: [(key: WorkKey, by: String)] = []
    public var releases: [WorkKey] = []
    /// Operator requests applied (`done`) or refused, with a note.
    public var answeredRequests: [(id: Int64, state: OperatorRequest.State, note: String)] = []
    /// Captures the daemon confirmed, for the settlement ledger (kept once per ``CaptureKey``).
    public var ledgerCaptures: [LedgerCapture] = []
    /// Refunds the daemon made, likewise (kept once per ``RefundKey``).
    public var ledgerRefunds: [LedgerRefund] = []
    /// The version of a shared intent that the step read. A session's place-order or customer-token intent is shared by
    /// every session of its KP session, each driving it in steps of its own (and on any daemon). When this change
    /// writes that intent and the store no longer holds the version read, nothing of the change is written and the
    /// commit throws ``IntentMoved``: two steps that read one version cannot both mark it sent. The commit of
    /// Klarna's answer names the attempt it answers (``answering(_:)``): written while the intent is unfinished at that
    /// attempt, so a landed commit tried again writes nothing twice. Nil: intents are written over what is stored,
    /// unless the stored one counts more attempts: attempts never go back, so a commit delayed past another session's
    /// send does not undo it.
    public var intentRead: IntentVersion?

    public init() {}

    public var isEmpty: Bool {
        sessions.isEmpty && orders.isEmpty && newOrders.isEmpty && paymentRequests.isEmpty && intents.isEmpty && events.isEmpty && outcomes.isEmpty
            && finishedCaptureRequests.isEmpty && health.isEmpty && holds.isEmpty && releases.isEmpty && answeredRequests.isEmpty
            && ledgerCaptures.isEmpty && ledgerRefunds.isEmpty
    }
}

extension Change {
    /// The change that records Klarna's answer to `sent`, the intent a step just marked sent: it requires the intent
    /// still unfinished at that mark's attempt (``intentRead``). A commit of it that landed but lost its answer, tried
    /// again, writes nothing the second time (``IntentMoved``), so its events and outcomes are never written twice; the
    /// step then starts again from what the first one wrote. Another session of a shared intent that settles it
    /// meanwhile (`ambiguous`, the same attempt) does not keep the answer out.
    public static func answering(_ sent: Intent) -> Change {
        var change = Change()
        var version = IntentVersion(key: sent.key, read: sent)
        version.anyUnfinished = true
        change.intentRead = version
        return change
    }
}

/// What a step read of one intent (``Change/intentRead``): its state and attempts, or that none was stored. Every
/// send counts an attempt, so a version read again after another step's send always differs.
public struct IntentVersion: Sendable, Equatable {
    public var key: String
    /// Nil: no intent of this key was stored.
    public var state: Intent.State?
    public var attempts: Int
    /// Any unfinished state at these attempts counts as this version, not only ``state`` (``Change/answering(_:)``).
    public var anyUnfinished = false

    public init(key: String, read intent: Intent?) {
        self.key = key
        state = intent?.state
        attempts = intent?.attempts ?? 0
    }

    /// Whether the stored row (its `state` and `attempts` columns; nil: no row) is still this version.
    public func isStored(state stored: String?, attempts storedAttempts: Int?) -> Bool {
        if anyUnfinished, let stored = stored.flatMap(Intent.State.init(rawValue:)) {
            return Self.unfinished.contains(stored) && storedAttempts == attempts
        }
        return stored == state?.rawValue && (state == nil || storedAttempts == attempts)
    }

    /// The states an intent may still leave.
    public static let unfinished: Set<Intent.State> = [.intended, .sent, .ambiguous]

    /// Whether `change` writes this intent (only then does the version matter).
    public func isWritten(by change: Change) -> Bool { change.intents.contains { $0.key == key } }
}

/// The intent this change was read from (``Change/intentRead``) was written since it was read: by another session's
/// step, or by this change itself when a commit that landed lost its answer and was tried again. Nothing was written
/// by this attempt; the step starts again from what is stored now.
public struct IntentMoved: Error, CustomStringConvertible {
    public let key: String
    public init(key: String) { self.key = key }
    public var description: String {
        "intent \(key) was changed since this step read it (by another session of the same KP session, or by this step's own commit whose answer was lost): nothing more was committed; the step starts again from what is stored"
    }
}

/// The store's `health` rows: the last Klarna call that succeeded and the last that failed, for `status`.
public enum HealthKey: String, Sendable, CaseIterable {
    case klarnaOK = "klarna_ok"
    case klarnaError = "klarna_error"
}
