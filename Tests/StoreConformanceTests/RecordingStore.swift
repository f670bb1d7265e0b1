import Foundation
import ReconcilerCore
import ReconcilerStore
import Synchronization

/// A store that passes every call to the store under test and notes which role function it was: what
/// ``RoleCoverage`` counts. Every conformance test reaches its store through one.
struct RecordingStore: ReconcilerStore {
    let base: any ReconcilerStore
    let backend: Backend

    private func noted(_ function: String) { RoleCoverage.called(function, on: backend) }

    // WorkStore
    func session(_ hppSessionID: String) async throws -> TrackedSession? { noted("WorkStore.session"); return try await base.session(hppSessionID) }
    func order(_ orderID: String) async throws -> TrackedOrder? { noted("WorkStore.order"); return try await base.order(orderID) }
    func paymentRequest(_ id: String) async throws -> TrackedPaymentRequest? {
        noted("WorkStore.paymentRequest"); return try await base.paymentRequest(id)
    }
    func intent(_ key: String) async throws -> Intent? { noted("WorkStore.intent"); return try await base.intent(key) }
    func intents(subject: String) async throws -> [Intent] { noted("WorkStore.intents"); return try await base.intents(subject: subject) }
    func oldestCaptureRequest(orderID: String) async throws -> CaptureRequestItem? {
        noted("WorkStore.oldestCaptureRequest")
        return try await base.oldestCaptureRequest(orderID: orderID)
    }
    func operatorControls(for key: WorkKey) async throws -> OperatorControls {
        noted("WorkStore.operatorControls"); return try await base.operatorControls(for: key)
    }
    func stepInputs(for key: WorkKey) async throws -> StepInputs {
        noted("WorkStore.stepInputs"); return try await base.stepInputs(for: key)
    }
    func commit(_ change: Change, at: Date, fencedBy key: WorkKey?) async throws {
        noted("WorkStore.commit"); try await base.commit(change, at: at, fencedBy: key)
    }
    func untrackedNotifiedOrders(since: Date, limit: Int) async throws -> [String] {
        noted("WorkStore.untrackedNotifiedOrders")
        return try await base.untrackedNotifiedOrders(since: since, limit: limit)
    }
    func settlementLines(merchantReference: String, account: AccountID, limit: Int) async throws -> [SettledLine] {
        noted("WorkStore.settlementLines")
        return try await base.settlementLines(merchantReference: merchantReference, account: account, limit: limit)
    }

    // WorkQueue
    func openWork() async throws -> [OpenWork] { noted("WorkQueue.openWork"); return try await base.openWork() }
    func wakeups(after sequence: Int64, includingDelivered: Bool) async throws -> (keys: [WorkKey], last: Int64) {
        noted("WorkQueue.wakeups")
        return try await base.wakeups(after: sequence, includingDelivered: includingDelivered)
    }
    func keysWithPendingOperatorRequests() async throws -> [WorkKey] {
        noted("WorkQueue.keysWithPendingOperatorRequests")
        return try await base.keysWithPendingOperatorRequests()
    }

    // IngestStore
    func ingest(_ record: IngestRecord, at: Date) async throws -> IngestResult {
        noted("IngestStore.ingest"); return try await base.ingest(record, at: at)
    }
    func ingest(_ records: [IngestRecord], at: Date) async throws -> [IngestResult] {
        noted("IngestStore.ingest(batch)")
        return try await base.ingest(records, at: at)
    }
    func recordRejection(source: String, status: Int, error: String, detail: String, at: Date) async throws {
        noted("IngestStore.recordRejection")
        try await base.recordRejection(source: source, status: status, error: error, detail: detail, at: at)
    }
    func track(_ session: TrackedSession, event: DomainEvent, at: Date) async throws -> TrackResult {
        noted("IngestStore.track")
        return try await base.track(session, event: event, at: at)
    }
    func requestCapture(orderID: String, amount: Int?, at: Date) async throws -> CaptureRequestResult {
        noted("IngestStore.requestCapture")
        return try await base.requestCapture(orderID: orderID, amount: amount, at: at)
    }
    func sessionAccount(hppSessionID: String?, kpSessionID: String?) async throws -> AccountID? {
        noted("IngestStore.sessionAccount")
        return try await base.sessionAccount(hppSessionID: hppSessionID, kpSessionID: kpSessionID)
    }

    // OutcomeQueue
    func undeliveredOutcomes(now: Date, limit: Int) async throws -> [StoredOutcome] {
        noted("OutcomeQueue.undeliveredOutcomes")
        return try await base.undeliveredOutcomes(now: now, limit: limit)
    }
    func markOutboxWritten(_ ids: [Int64], notified: Bool) async throws {
        noted("OutcomeQueue.markOutboxWritten"); try await base.markOutboxWritten(ids, notified: notified)
    }
    func markNotified(_ id: Int64) async throws { noted("OutcomeQueue.markNotified"); try await base.markNotified(id) }
    func notifyFailed(_ id: Int64, nextAt: Date?) async throws { noted("OutcomeQueue.notifyFailed"); try await base.notifyFailed(id, nextAt: nextAt) }

    // OperatorStore
    func summary(now: Date) async throws -> StatusSummary { noted("OperatorStore.summary"); return try await base.summary(now: now) }
    func list(phase: String?, account: AccountID?, limit: Int) async throws -> StoreListing {
        noted("OperatorStore.list"); return try await base.list(phase: phase, account: account, limit: limit)
    }
    func timeline(for id: String) async throws -> PaymentTimeline { noted("OperatorStore.timeline"); return try await base.timeline(for: id) }
    func submit(_ requests: [OperatorRequest], delivered: Bool, at: Date) async throws -> [Int64] {
        noted("OperatorStore.submit")
        return try await base.submit(requests, delivered: delivered, at: at)
    }
    func operatorRequests(_ ids: [Int64]) async throws -> [OperatorRequest] {
        noted("OperatorStore.operatorRequests"); return try await base.operatorRequests(ids)
    }
    func holds(_ keys: [WorkKey]) async throws -> [WorkKey: Hold] { noted("OperatorStore.holds"); return try await base.holds(keys) }
    func customerTokens(limit: Int) async throws -> [CustomerTokenView] {
        noted("OperatorStore.customerTokens")
        return try await base.customerTokens(limit: limit)
    }
    func customerToken(_ token: String) async throws -> CustomerTokenView? {
        noted("OperatorStore.customerToken")
        return try await base.customerToken(token)
    }

    // ReloadMailbox
    func requestReload(at: Date) async throws -> Int64 { noted("ReloadMailbox.requestReload"); return try await base.requestReload(at: at) }
    func newestReloadRequest() async throws -> Int64? { noted("ReloadMailbox.newestReloadRequest"); return try await base.newestReloadRequest() }
    func answerReloads(through id: Int64, ok: Bool, message: String, at: Date) async throws {
        noted("ReloadMailbox.answerReloads")
        try await base.answerReloads(through: id, ok: ok, message: message, at: at)
    }
    func reloadAnswer(_ id: Int64) async throws -> ReloadAnswer? { noted("ReloadMailbox.reloadAnswer"); return try await base.reloadAnswer(id) }

    // PruningStore
    func prune(_ cutoffs: PruneCutoffs, limit: Int, dryRun: Bool) async throws -> PruneCounts {
        noted("PruningStore.prune")
        return try await base.prune(cutoffs, limit: limit, dryRun: dryRun)
    }

    // StoreHealth
    func liveStatus() async throws -> LiveStatus { noted("StoreHealth.liveStatus"); return try await base.liveStatus() }
    func stateSnapshot() async throws -> StateSnapshot { noted("StoreHealth.stateSnapshot"); return try await base.stateSnapshot() }
    func probeWrites() async throws { noted("StoreHealth.probeWrites"); try await base.probeWrites() }

    // SettlementStore
    func recordedPayouts(among references: [String]) async throws -> Set<String> {
        noted("SettlementStore.recordedPayouts")
        return try await base.recordedPayouts(among: references)
    }
    func ledger(orderIDs: [String], account: AccountID) async throws -> [String: LedgerOrder] {
        noted("SettlementStore.ledger"); return try await base.ledger(orderIDs: orderIDs, account: account)
    }
    func record(_ reconciliation: PayoutReconciliation, outcomes: [Outcome], at: Date) async throws -> Bool {
        noted("SettlementStore.record")
        return try await base.record(reconciliation, outcomes: outcomes, at: at)
    }
    func recordDrift(_ entries: [DriftEntry], at: Date) async throws -> Int {
        noted("SettlementStore.recordDrift"); return try await base.recordDrift(entries, at: at)
    }
    func unsettledCaptures(account: AccountID, capturedFrom: Date, capturedBefore: Date, limit: Int) async throws -> [LedgerCapture] {
        noted("SettlementStore.unsettledCaptures")
        return try await base.unsettledCaptures(account: account, capturedFrom: capturedFrom, capturedBefore: capturedBefore, limit: limit)
    }
    func flagUnsettled(_ flags: [UnsettledFlag], at: Date) async throws -> Int {
        noted("SettlementStore.flagUnsettled"); return try await base.flagUnsettled(flags, at: at)
    }
    func settlementHealth(account: AccountID) async throws -> SettlementHealth {
        noted("SettlementStore.settlementHealth"); return try await base.settlementHealth(account: account)
    }
    func heldOrders(among orderIDs: [String]) async throws -> Set<String> {
        noted("SettlementStore.heldOrders"); return try await base.heldOrders(among: orderIDs)
    }

    // SettlementReports
    func payouts(since: Date?, paymentReference: String?, account: AccountID?) async throws -> [PayoutReconciliation] {
        noted("SettlementReports.payouts")
        return try await base.payouts(since: since, paymentReference: paymentReference, account: account)
    }
    func settlementLines(orderIDs: [String]) async throws -> [LineReconciliation] {
        noted("SettlementReports.settlementLines")
        return try await base.settlementLines(orderIDs: orderIDs)
    }

    // DisputeStore
    func dispute(_ id: String) async throws -> TrackedDispute? { noted("DisputeStore.dispute"); return try await base.dispute(id) }
    func trackedOrders(among orderIDs: [String], account: AccountID) async throws -> Set<String> {
        noted("DisputeStore.trackedOrders"); return try await base.trackedOrders(among: orderIDs, account: account)
    }
    func record(_ write: DisputeWrite, at: Date) async throws -> Bool { noted("DisputeStore.record"); return try await base.record(write, at: at) }
    func disputeHints(account: AccountID, limit: Int) async throws -> [String] {
        noted("DisputeStore.disputeHints"); return try await base.disputeHints(account: account, limit: limit)
    }
    func forgetDisputeHints(_ ids: [String]) async throws { noted("DisputeStore.forgetDisputeHints"); try await base.forgetDisputeHints(ids) }
    func disputesToLook(account: AccountID, at now: Date, limit: Int) async throws -> [TrackedDispute] {
        noted("DisputeStore.disputesToLook"); return try await base.disputesToLook(account: account, at: now, limit: limit)
    }
    func dueDisputeActions(account: AccountID, at now: Date, limit: Int) async throws -> [DisputeAction] {
        noted("DisputeStore.dueDisputeActions"); return try await base.dueDisputeActions(account: account, at: now, limit: limit)
    }
    func nextDisputeLook(account: AccountID) async throws -> Date? {
        noted("DisputeStore.nextDisputeLook"); return try await base.nextDisputeLook(account: account)
    }
    func update(_ write: DisputeActionWrite, at: Date) async throws -> Bool {
        noted("DisputeStore.update"); return try await base.update(write, at: at)
    }
    func disputeHealth(account: AccountID) async throws -> DisputeHealth {
        noted("DisputeStore.disputeHealth"); return try await base.disputeHealth(account: account)
    }
    func listed(through: Date, account: AccountID) async throws {
        noted("DisputeStore.listed"); try await base.listed(through: through, account: account)
    }
    func isHeld(order orderID: String) async throws -> Bool { noted("DisputeStore.isHeld"); return try await base.isHeld(order: orderID) }

    // DisputeReports
    func disputes(openOnly: Bool, dueBefore: Date?, account: AccountID?) async throws -> [TrackedDispute] {
        noted("DisputeReports.disputes"); return try await base.disputes(openOnly: openOnly, dueBefore: dueBefore, account: account)
    }
    func disputes(orderIDs: [String]) async throws -> [TrackedDispute] {
        noted("DisputeReports.disputes(orderIDs)"); return try await base.disputes(orderIDs: orderIDs)
    }
    func request(_ action: DisputeAction, at: Date) async throws -> DisputeActionRequest {
        noted("DisputeReports.request"); return try await base.request(action, at: at)
    }
    func disputeAction(_ id: Int64) async throws -> DisputeAction? { noted("DisputeReports.disputeAction"); return try await base.disputeAction(id) }
    func disputeActions(disputeIDs: [String]) async throws -> [DisputeAction] {
        noted("DisputeReports.disputeActions"); return try await base.disputeActions(disputeIDs: disputeIDs)
    }
}

/// Which role functions the conformance suite called, counted against every function the roles declare; the run
/// prints the count when it ends (a filtered run counts what it ran).
enum RoleCoverage {
    /// Every function of the roles a store implements (``ReconcilerStore``), as `Role.function`; checked against
    /// the protocols' source by `RoleCoverageTests`. The batch `ingest` is `IngestStore.ingest(batch)`.
    static let declared: [String] = [
        "WorkStore.session", "WorkStore.order", "WorkStore.paymentRequest", "WorkStore.intent", "WorkStore.intents",
        "WorkStore.oldestCaptureRequest", "WorkStore.operatorControls", "WorkStore.stepInputs", "WorkStore.commit",
        "WorkStore.untrackedNotifiedOrders",
        "WorkStore.settlementLines",
        "WorkQueue.openWork", "WorkQueue.wakeups", "WorkQueue.keysWithPendingOperatorRequests",
        "IngestStore.ingest", "IngestStore.ingest(batch)", "IngestStore.recordRejection", "IngestStore.track", "IngestStore.requestCapture",
        "IngestStore.sessionAccount",
        "OutcomeQueue.undeliveredOutcomes", "OutcomeQueue.markOutboxWritten", "OutcomeQueue.markNotified", "OutcomeQueue.notifyFailed",
        "OperatorStore.summary", "OperatorStore.list", "OperatorStore.timeline", "OperatorStore.submit", "OperatorStore.operatorRequests",
        "OperatorStore.holds", "OperatorStore.customerTokens", "OperatorStore.customerToken",
        "ReloadMailbox.requestReload", "ReloadMailbox.newestReloadRequest", "ReloadMailbox.answerReloads", "ReloadMailbox.reloadAnswer",
        "PruningStore.prune",
        "StoreHealth.liveStatus", "StoreHealth.stateSnapshot", "StoreHealth.probeWrites",
        "SettlementStore.recordedPayouts", "SettlementStore.ledger", "SettlementStore.record", "SettlementStore.recordDrift",
        "SettlementStore.unsettledCaptures", "SettlementStore.flagUnsettled", "SettlementStore.settlementHealth", "SettlementStore.heldOrders",
        "SettlementReports.payouts", "SettlementReports.settlementLines",
        "DisputeStore.dispute", "DisputeStore.trackedOrders", "DisputeStore.record", "DisputeStore.disputeHints",
        "DisputeStore.forgetDisputeHints", "DisputeStore.disputesToLook", "DisputeStore.dueDisputeActions", "DisputeStore.nextDisputeLook",
        "DisputeStore.update", "DisputeStore.disputeHealth", "DisputeStore.listed", "DisputeStore.isHeld",
        "DisputeReports.disputes", "DisputeReports.disputes(orderIDs)", "DisputeReports.request", "DisputeReports.disputeAction",
        "DisputeReports.disputeActions",
    ]

    private static let calls = Mutex<[Backend: Set<String>]?>(nil)

    static func called(_ function: String, on backend: Backend) {
        let first = calls.withLock { calls in
            defer { calls = (calls ?? [:]).merging([backend: [function]]) { $0.union($1) } }
            return calls == nil
        }
        if first { atexit { RoleCoverage.report() } }
    }

    /// The line the run ends with.
    static func report() {
        let called = calls.withLock { $0 } ?? [:]
        let counts = Backend.allCases.map { backend in
            let missing = declared.filter { !(called[backend] ?? []).contains($0) }
            return "\(backend.rawValue) \(declared.count - missing.count) of \(declared.count)"
                + (missing.isEmpty ? "" : " (not called in this run: \(missing.joined(separator: ", ")))")
        }
        print("store conformance: role functions called, covered over declared: \(counts.joined(separator: "; "))")
    }
}
