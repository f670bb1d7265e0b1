import Foundation
import ReconcilerCore
import ReconcilerStore
import Synchronization

/// The real store with faults a test cannot cause on demand: the commit recording a confirmed intent fails the
/// first `failConfirmedCommits` times (a full disk at the worst moment), every ingest fails while `failIngest`, and
/// every read of a session's account with `failAccountReads`; as an outcome queue (when the real store is one), its
/// marks of outbox files written fail the first `failOutboxMarks` times; as a lease store (when the real store is
/// one), its releases of finished work fail the first `failReleases` times, each attempt counted
/// (``releaseAttempts``). A commit that marks an intent sent lands but loses its answer while ``sentAnswersToLose``, one
/// that records Klarna's answer while ``finishedAnswersToLose``. After a read of an intent by key, or of a step's inputs, it runs ``afterIntentRead`` or
/// ``afterStepInputs``: another step that writes between this step's read and its commit, a race a test cannot time
/// otherwise. Only the roles of the engine, ingest, the outbox and the lease keeper: what it fakes is what those see.
/// A step's inputs are read as the role's default reads them, through its own reads, so each read is counted
/// (``reads``); with `stepInputsFromStore`, as the real store reads them (a shared store, its unit and intents with
/// them).
public final class FaultyStore: WorkStore, IngestStore, @unchecked Sendable {
    public let store: any WorkStore & IngestStore
    private let remaining = Mutex(0)
    private let ingestFails: Bool
    private let accountReadsFail: Bool
    private let outboxMarksLeft = Mutex(0)
    private let releasesFailingLeft = Mutex(0)
    /// Every release of finished work asked of it, failed or not, with its keys.
    public let releaseAttempts = Mutex<[[WorkKey]]>([])
    /// Reads of a session or an order by the engine.
    public let unitReads = Mutex(0)
    /// Every read of the engine's role, by name (`session`, `order`, `paymentRequest`, `intent`, `intents`,
    /// `operatorControls`), in order.
    public let reads = Mutex<[String]>([])
    /// How many more commits that mark an intent sent land but lose their answer (``AnswerLost``).
    public let sentAnswersToLose = Mutex(0)
    /// How many more commits that record Klarna's answer (a finished intent) land but lose their answer.
    public let finishedAnswersToLose = Mutex(0)
    /// Run after each read of an intent by key, with that key, before the read returns.
    public let afterIntentRead = Mutex<(@Sendable (String) async throws -> Void)?>(nil)
    /// Run after each read of a step's inputs, with its key, before the read returns.
    public let afterStepInputs = Mutex<(@Sendable (WorkKey) async throws -> Void)?>(nil)
    private let stepInputsFromStore: Bool

    public init(
        _ store: any WorkStore & IngestStore, failConfirmedCommits: Int = 0, failIngest: Bool = false, failAccountReads: Bool = false,
        failOutboxMarks: Int = 0, failReleases: Int = 0, stepInputsFromStore: Bool = false
    ) {
        self.store = store
        self.stepInputsFromStore = stepInputsFromStore
        ingestFails = failIngest
        accountReadsFail = failAccountReads
        remaining.withLock { $0 = failConfirmedCommits }
        outboxMarksLeft.withLock { $0 = failOutboxMarks }
        releasesFailingLeft.withLock { $0 = failReleases }
    }

    public struct DiskFull: Error {
        public init() {}
    }

    public func commit(_ change: Change, at: Date, fencedBy key: WorkKey?) async throws {
        if change.intents.contains(where: { $0.state == .confirmed }), Self.takeOne(remaining) { throw DiskFull() }
        try await store.commit(change, at: at, fencedBy: key)
        if change.intents.contains(where: { $0.state == .sent }), Self.takeOne(sentAnswersToLose) { throw AnswerLost() }
        if change.intents.contains(where: \.isFinished), Self.takeOne(finishedAnswersToLose) { throw AnswerLost() }
    }

    /// Whether `counter` had one left, taking it.
    static func takeOne(_ counter: borrowing Mutex<Int>) -> Bool {
        counter.withLock { left in
            defer { left = max(0, left - 1) }
            return left > 0
        }
    }

    /// The store committed, but its answer never reached the daemon (the connection dropped after the commit).
    public struct AnswerLost: Error {
        public init() {}
    }

    public func ingest(_ record: IngestRecord, at: Date) async throws -> IngestResult {
        if ingestFails { throw DiskFull() }
        return try await store.ingest(record, at: at)
    }

    public func session(_ id: String) async throws -> TrackedSession? {
        unitReads.withLock { $0 += 1 }
        reads.withLock { $0.append("session") }
        return try await store.session(id)
    }
    public func order(_ id: String) async throws -> TrackedOrder? {
        unitReads.withLock { $0 += 1 }
        reads.withLock { $0.append("order") }
        return try await store.order(id)
    }
    public func paymentRequest(_ id: String) async throws -> TrackedPaymentRequest? {
        reads.withLock { $0.append("paymentRequest") }
        return try await store.paymentRequest(id)
    }
    public func intent(_ key: String) async throws -> Intent? {
        reads.withLock { $0.append("intent") }
        let intent = try await store.intent(key)
        if let hook = afterIntentRead.withLock({ $0 }) { try await hook(key) }
        return intent
    }
    public func intents(subject: String) async throws -> [Intent] {
        reads.withLock { $0.append("intents") }
        return try await store.intents(subject: subject)
    }
    public func oldestCaptureRequest(orderID: String) async throws -> CaptureRequestItem? { try await store.oldestCaptureRequest(orderID: orderID) }
    public func stepInputs(for key: WorkKey) async throws -> StepInputs {
        let inputs = stepInputsFromStore ? try await store.stepInputs(for: key) : StepInputs(controls: try await operatorControls(for: key))
        if let hook = afterStepInputs.withLock({ $0 }) { try await hook(key) }
        return inputs
    }
    public func operatorControls(for key: WorkKey) async throws -> OperatorControls {
        reads.withLock { $0.append("operatorControls") }
        return try await store.operatorControls(for: key)
    }
    public func untrackedNotifiedOrders(since: Date, limit: Int) async throws -> [String] {
        try await store.untrackedNotifiedOrders(since: since, limit: limit)
    }
    public func settlementLines(merchantReference: String, account: AccountID, limit: Int) async throws -> [SettledLine] {
        try await store.settlementLines(merchantReference: merchantReference, account: account, limit: limit)
    }
    public func track(_ session: TrackedSession, event: DomainEvent, at: Date) async throws -> TrackResult {
        try await store.track(session, event: event, at: at)
    }
    public func requestCapture(orderID: String, amount: Int?, at: Date) async throws -> CaptureRequestResult {
        try await store.requestCapture(orderID: orderID, amount: amount, at: at)
    }
    public func sessionAccount(hppSessionID: String?, kpSessionID: String?) async throws -> AccountID? {
        if accountReadsFail { throw DiskFull() }
        return try await store.sessionAccount(hppSessionID: hppSessionID, kpSessionID: kpSessionID)
    }
    public func recordRejection(source: String, status: Int, error: String, detail: String, at: Date) async throws {
        try await store.recordRejection(source: source, status: status, error: error, detail: detail, at: at)
    }
}

extension FaultyStore: OutcomeQueue {
    private var queue: any OutcomeQueue {
        guard let queue = store as? any OutcomeQueue else { preconditionFailure("a FaultyStore used as an outcome queue wraps one") }
        return queue
    }

    public func undeliveredOutcomes(now: Date, limit: Int) async throws -> [StoredOutcome] {
        try await queue.undeliveredOutcomes(now: now, limit: limit)
    }
    public func markOutboxWritten(_ ids: [Int64], notified: Bool) async throws {
        if Self.takeOne(outboxMarksLeft) { throw DiskFull() }
        try await queue.markOutboxWritten(ids, notified: notified)
    }
    public func markNotified(_ id: Int64) async throws { try await queue.markNotified(id) }
    public func notifyFailed(_ id: Int64, nextAt: Date?) async throws { try await queue.notifyFailed(id, nextAt: nextAt) }
}

extension FaultyStore: LeaseStore {
    private var leases: any LeaseStore {
        guard let leases = store as? any LeaseStore else { preconditionFailure("a FaultyStore used as a lease store wraps one") }
        return leases
    }

    /// The server refusing a release: what a deadlock with an ingest's wakeups looks like to the daemon.
    public struct ReleaseRefused: Error {
        public init() {}
    }

    public var daemon: DaemonIdentity { leases.daemon }
    public func register(at: Date) async throws { try await leases.register(at: at) }
    public func renewLeases(ttl: Duration) async throws -> LeaseRenewal { try await leases.renewLeases(ttl: ttl) }
    public func claimWork(ttl: Duration, limit: Int, liveDaemons: Int, patience: Duration) async throws -> [Claim] {
        try await leases.claimWork(ttl: ttl, limit: limit, liveDaemons: liveDaemons, patience: patience)
    }
    public func openWork(of keys: [WorkKey]) async throws -> [OpenWork] { try await leases.openWork(of: keys) }
    public func takeWakeups() async throws -> [WorkKey] { try await leases.takeWakeups() }
    public func releaseLeases(_ keys: [WorkKey]) async throws -> Set<WorkKey> {
        releaseAttempts.withLock { $0.append(keys) }
        if Self.takeOne(releasesFailingLeft) { throw ReleaseRefused() }
        return try await leases.releaseLeases(keys)
    }
    public func deregister(at: Date) async throws { try await leases.deregister(at: at) }
    public func listenForWork(_ heard: @escaping @Sendable () -> Void) async { await leases.listenForWork(heard) }
}
