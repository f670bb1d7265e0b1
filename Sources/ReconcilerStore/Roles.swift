import Foundation
import ReconcilerCore

// The store seam, one protocol per role. Each client takes the narrowest one it needs; `SQLiteStore` and
// `PostgresStore` are peers that implement them all, and nothing above this module knows which one it talks to.

/// What the engine needs to run one step of one key: read its state, learn what operators asked of it, and commit
/// everything the step changed at once.
public protocol WorkStore: Sendable {
    func session(_ hppSessionID: String) async throws -> TrackedSession?
    func order(_ orderID: String) async throws -> TrackedOrder?
    func paymentRequest(_ id: String) async throws -> TrackedPaymentRequest?
    func intent(_ key: String) async throws -> Intent?
    /// Every intent of a session (by HPP session id) or order, oldest first.
    func intents(subject: String) async throws -> [Intent]
    func oldestCaptureRequest(orderID: String) async throws -> CaptureRequestItem?
    /// Whether `key` is held, and the operator requests waiting for it.
    func operatorControls(for key: WorkKey) async throws -> OperatorControls
    /// What a step of `key` reads before it acts: ``operatorControls(for:)``, the key's unit and, for an order (or
    /// nil), ``intents(subject:)`` of it, as each would answer, in one read where the store can (a shared store: one
    /// round trip instead of four).
    func stepInputs(for key: WorkKey) async throws -> StepInputs
    /// Everything one step changed, in one transaction. `fencedBy`: the key whose step this is; a store shared by
    /// several daemons commits only while this daemon still holds that key's lease, and throws ``LeaseLost``
    /// (writing nothing) once another daemon claimed it. A store of one daemon has nothing to check.
    func commit(_ change: Change, at: Date, fencedBy key: WorkKey?) async throws

    // Where Klarna may name an order it placed while the daemon lost the answer (``PlacedOrderSearch`` decides).
    /// The order ids of OM notifications received at or after `since` for orders this store does not track, newest
    /// first, at most `limit`.
    func untrackedNotifiedOrders(since: Date, limit: Int) async throws -> [String]
    /// Recorded settlement lines of `account`'s payouts whose `merchant_reference1` is `merchantReference`, newest
    /// payout first, at most `limit`: another account's SALE with the same reference is no order of this one.
    func settlementLines(merchantReference: String, account: AccountID, limit: Int) async throws -> [SettledLine]
}

extension WorkStore {
    /// An unfenced commit: tests and tools that write as nobody's step.
    public func commit(_ change: Change, at: Date) async throws { try await commit(change, at: at, fencedBy: nil) }
}

/// What the scheduler needs: the open work to plan at start, and the keys other processes asked to be looked at.
public protocol WorkQueue: Sendable {
    /// Every open session, order and payment request with what its plan is made from.
    func openWork() async throws -> [OpenWork]
    /// Keys other processes (CLI) asked to be looked at: takes and forgets every wakeup row; `last` is the highest id
    /// seen, never below `sequence`. `includingDelivered`: also the keys a delivery's ingest woke the engine for
    /// directly, which only a daemon starting after a crash needs (one read per hint, not two).
    func wakeups(after sequence: Int64, includingDelivered: Bool) async throws -> (keys: [WorkKey], last: Int64)
    /// Keys with operator requests not yet applied (read at start: a request may have come while the daemon was down).
    func keysWithPendingOperatorRequests() async throws -> [WorkKey]
}

/// What deliveries need: the socket, the spool and the `track` and `capture` commands.
public protocol IngestStore: Sendable {
    /// Records a delivery and its effect (events, wakeups, a new tracked session, a capture request) in one commit,
    /// unless its dedupe key was seen before.
    func ingest(_ record: IngestRecord, at: Date) async throws -> IngestResult
    /// Records deliveries found together (the spool's files), in order, each as ``ingest(_:at:)`` records it, in as
    /// few commits as the store can. One result per record recorded, in order: fewer than given when the store
    /// failed part way (those after are not recorded); a throw means none was.
    func ingest(_ records: [IngestRecord], at: Date) async throws -> [IngestResult]
    /// Keeps a refused delivery's reason (socket requests; spool files keep theirs in quarantine/).
    func recordRejection(source: String, status: Int, error: String, detail: String, at: Date) async throws
    /// Starts tracking `session` unless it is tracked already; records `event` with it.
    func track(_ session: TrackedSession, event: DomainEvent, at: Date) async throws -> TrackResult
    func requestCapture(orderID: String, amount: Int?, at: Date) async throws -> CaptureRequestResult
    /// The account of the session tracked as `hppSessionID`, else of any session of `kpSessionID`; `nil` when none is
    /// tracked. A callback for another account's payment is refused by it.
    func sessionAccount(hppSessionID: String?, kpSessionID: String?) async throws -> AccountID?
}

extension IngestStore {
    /// One commit per record, in order: for a store with nothing better (PostgreSQL pays a round trip per statement
    /// either way, and its concurrent transactions serve the socket).
    public func ingest(_ records: [IngestRecord], at: Date) async throws -> [IngestResult] {
        var results: [IngestResult] = []
        for record in records {
            do {
                results.append(try await ingest(record, at: at))
            } catch  where !results.isEmpty {
                // The ones before are committed: said so, so that their files are not taken again (a capture request
                // without a request id has no dedupe key, and would be recorded twice).
                return results
            }
        }
        return results
    }
}

/// What the outbox writer and the notifier need: outcomes not yet delivered, and marks once they are.
public protocol OutcomeQueue: Sendable {
    /// Outcomes without their outbox file, or whose notification is due at `now`.
    func undeliveredOutcomes(now: Date, limit: Int) async throws -> [StoredOutcome]
    /// Marks outcomes written to the outbox, in one exchange; `notified`: delivered too (nothing to notify).
    func markOutboxWritten(_ ids: [Int64], notified: Bool) async throws
    func markNotified(_ id: Int64) async throws
    /// `nextAt` nil: given up; counted as delivered so the queue moves on (the outbox file stays).
    func notifyFailed(_ id: Int64, nextAt: Date?) async throws
}

/// What the operator commands (the CLI and the socket's payment routes) need: find a payment, record requests for
/// the daemon, and read its answers.
public protocol OperatorStore: Sendable {
    func summary(now: Date) async throws -> StatusSummary
    /// `phase`: a phase, an outcome, an intent state or kind, or `held`.
    /// `account`: only that account's sessions and orders, and the intents of those.
    func list(phase: String?, account: AccountID?, limit: Int) async throws -> StoreListing
    /// The sessions and orders `id` names (an HPP session id, KP session id, order id or merchant reference) and
    /// their timeline.
    func timeline(for id: String) async throws -> PaymentTimeline
    /// Records requests, an event for each, and a wakeup; `delivered`: the caller wakes the engine itself (the
    /// daemon's socket), so the wakeup row only matters after a crash. Returns the requests' ids.
    func submit(_ requests: [OperatorRequest], delivered: Bool, at: Date) async throws -> [Int64]
    func operatorRequests(_ ids: [Int64]) async throws -> [OperatorRequest]
    func holds(_ keys: [WorkKey]) async throws -> [WorkKey: Hold]
    /// The customer tokens the daemon created or charged, newest first, at most `limit`.
    func customerTokens(limit: Int) async throws -> [CustomerTokenView]
    /// One token as the store knows it; nil when the daemon neither created nor charged it.
    func customerToken(_ token: String) async throws -> CustomerTokenView?
}

extension OperatorStore {
    /// The payment `id` names with its intents and holds.
    public func payment(_ id: String) async throws -> PaymentView {
        let found = try await timeline(for: id)
        let keys = found.sessions.map { WorkKey.session($0.hppSessionID) } + found.orders.map { WorkKey.order($0.orderID) }
        let held = try await holds(keys)
        return PaymentView(
            sessions: found.sessions, orders: found.orders, intents: found.intents, held: Set(held.keys.compactMap(\.remediationTarget)))
    }
}

/// Reload handshake: the `reload` command records a request and signals the daemon; the daemon answers every
/// request up to the newest it saw when it started reloading; the command waits for its answer.
public protocol ReloadMailbox: Sendable {
    func requestReload(at: Date) async throws -> Int64
    func newestReloadRequest() async throws -> Int64?
    func answerReloads(through id: Int64, ok: Bool, message: String, at: Date) async throws
    func reloadAnswer(_ id: Int64) async throws -> ReloadAnswer?
}

/// What retention needs: one batch of pruning at a time, so no single transaction grows large.
///
/// Settlement records (the ledger, payouts and their lines) are never pruned: they are the books every later payout
/// is matched against, and a payout may settle a capture of a payment pruned before it (``SettlementStore/ledger(orderIDs:)``
/// answers such an order from its ledger rows). A pruned payment leaves its ledger rows as they were.
public protocol PruningStore: Sendable {
    /// Removes up to `limit` rows of each kind older than `cutoffs` (a payment counts as one, with everything of
    /// it), or with `dryRun` counts all of them without removing anything.
    func prune(_ cutoffs: PruneCutoffs, limit: Int, dryRun: Bool) async throws -> PruneCounts
}

/// What the daemon's supervision reads: the few numbers `STATUS=` shows, the state numbers `/metrics` shows, and
/// whether commits still go through.
public protocol StoreHealth: Sendable {
    /// Cheap enough to ask every few seconds.
    func liveStatus() async throws -> LiveStatus
    /// From one read of the store.
    func stateSnapshot() async throws -> StateSnapshot
    /// Passes through the write path (an empty transaction): answers only while commits go through (the watchdog
    /// and `/v1/ready`: reads alone would answer while writes hang).
    func probeWrites() async throws
}

/// Every role at once: what the daemon opens and hands out, one narrow protocol to each client.
public typealias ReconcilerStore = WorkStore & WorkQueue & IngestStore & OutcomeQueue & OperatorStore & ReloadMailbox
    & PruningStore & StoreHealth & SettlementStore & SettlementReports & DisputeStore & DisputeReports
