import Foundation
import ReconcilerCore
import ReconcilerStore

/// Where operator commands come in, from the command line or the socket: finds the payment an id names, asks the
/// core which of its sessions and orders the request applies to (or why none), records one request per part for the
/// daemon, and waits for the daemon's answers. The daemon applies each in the part's next step; it may still refuse
/// one whose payment moved on meanwhile.
public struct OperatorDesk: Sendable {
    public enum Answer: Sendable {
        /// Refused before anything was recorded.
        case refused(RemediationRefusal)
        /// The daemon answered every request (each `done` or `refused`); `payment` is how it stands after, once the
        /// side effect a cancel or release-remaining started has ended (or the wait ran out).
        case answered([OperatorRequest], payment: PaymentView)
        /// Recorded, but not answered within the wait (is the daemon running?): it applies them when it gets to them.
        case queued([OperatorRequest])
    }

    let store: any OperatorStore & DisputeReports
    /// Wakes the engine for the keys at once (the daemon's socket); `nil` leaves a wakeup row the daemon polls.
    let wake: (@Sendable ([WorkKey]) async -> Void)?
    /// Wake the dispute services for an action at once (the daemon's socket); without them the service of the
    /// dispute's account finds the action at its next poll.
    let disputeBells: DisputeBells

    public init(
        store: any OperatorStore & DisputeReports, wake: (@Sendable ([WorkKey]) async -> Void)? = nil, disputeBells: DisputeBells = DisputeBells()
    ) {
        self.store = store
        self.wake = wake
        self.disputeBells = disputeBells
    }

    public func request(
        _ action: OperatorAction, id: String, orderID: String? = nil, by requester: String, now: Date, wait: Duration
    ) async throws -> Answer {
        let payment = try await store.payment(id)
        let targets: [RemediationTarget]
        switch Remediation.targets(action, payment: payment, orderID: orderID, now: now) {
        case .failure(let refusal): return .refused(refusal)
        case .success(let found): targets = found
        }
        let requests = targets.map { OperatorRequest(key: WorkKey($0), action: action, orderID: orderID, requestedBy: requester, requestedAt: now) }
        let ids = try await store.submit(requests, delivered: wake != nil, at: now)
        await wake?(requests.map(\.key))

        let deadline = ContinuousClock.now + wait
        var answered = try await store.operatorRequests(ids)
        while answered.contains(where: { $0.state == .pending }) {
            guard ContinuousClock.now < deadline else { return .queued(answered) }
            try await Task.sleep(for: .milliseconds(50))
            answered = try await store.operatorRequests(ids)
        }
        // A cancel or release-remaining is an intent: wait for Klarna's answer too, so the caller can say how it ended.
        var after = try await store.payment(id)
        let started = Set(
            answered.filter { $0.state == .done && ($0.action == .cancel || $0.action == .releaseRemaining) }.compactMap(\.key.remediationTarget))
        while !started.isEmpty, ContinuousClock.now < deadline,
            after.orders.contains(where: { started.contains(.order($0.orderID)) && $0.activeIntent != nil })
        {
            try await Task.sleep(for: .milliseconds(50))
            after = try await store.payment(id)
        }
        return .answered(answered, payment: after)
    }

    /// Who asked, for the timeline and the journal: "uid 1000 (alice) via the command line".
    public static func requester(uid: uid_t?, via: String) -> String {
        guard let uid else { return "someone via \(via)" }
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4_096)
        let name = getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0 && result != nil ? String(cString: entry.pw_name) : nil
        return "uid \(uid)\(name.map { " (\($0))" } ?? "") via \(via)"
    }
}

/// One payment's story as `show` prints it and the control socket answers it: tokens redacted.
public struct PaymentStory: Codable, Sendable {
    public var sessions: [TrackedSession]
    public var orders: [TrackedOrder]
    public var intents: [Intent]
    public var events: [RecordedEvent]
    public var outcomes: [StoredOutcome]
    /// Work key (`session:…`, `order:…`) → the hold in force.
    public var holds: [String: Hold]
    /// The orders' disputes, and the operators' actions on them (without files). Empty from a daemon older than these.
    public var disputes: [TrackedDispute]?
    public var disputeActions: [DisputeAction]?
}

extension OperatorDesk {
    /// `status`.
    public func status(now: Date) async throws -> StatusSummary { try await store.summary(now: now) }

    /// `list`, tokens redacted.
    public func listing(state: String?, account: AccountID? = nil, limit: Int) async throws -> StoreListing {
        var listing = try await store.list(phase: state, account: account, limit: max(1, limit))
        listing.sessions = listing.sessions.map(\.redacted)
        listing.intents = listing.intents.map(\.redacted)
        return listing
    }

    /// `show`: `nil` when nothing tracked matches `id`.
    public func story(_ id: String) async throws -> PaymentStory? {
        let found = try await store.timeline(for: id)
        guard !found.sessions.isEmpty || !found.orders.isEmpty else { return nil }
        let holds = try await store.holds(found.sessions.map { .session($0.hppSessionID) } + found.orders.map { .order($0.orderID) })
        let disputes = found.orders.isEmpty ? [] : try await store.disputes(orderIDs: found.orders.map(\.orderID))
        return PaymentStory(
            sessions: found.sessions.map(\.redacted), orders: found.orders, intents: found.intents.map(\.redacted), events: found.events,
            outcomes: found.outcomes.map { stored in
                var shown = stored
                shown.outcome = stored.outcome.redacted
                return shown
            },
            holds: Dictionary(uniqueKeysWithValues: holds.map { ($0.key.description, $0.value) }), disputes: disputes,
            disputeActions: disputes.isEmpty ? [] : try await store.disputeActions(disputeIDs: disputes.map(\.id)))
    }
}
