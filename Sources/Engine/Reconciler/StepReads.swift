import Foundation
import ReconcilerCore
import ReconcilerStore
import Synchronization

/// The engine's store. What a step read at its start (``StepInputs``, one read) answers that step's reads of the key's
/// operator controls, its unit and an order's intents (those the store read with the rest) until the step commits;
/// every other read, and every read after the step's first commit, goes to the store. A shared store answers the
/// step's four or five reads in one round trip instead of one each.
///
/// Only the lease holder writes a key's unit and an order's intents, so what the step read at its start stays what
/// the store holds until the step itself commits, except what a delivery or an operator adds meanwhile (a wakeup, a
/// request, a refund asked for), which a step that read a moment later could have missed too and which wakes the key
/// again. A session's place-order or customer-token intent is the exception: the sessions of one KP session share it,
/// each driving it in steps of its own. It is answered from the inputs too, and the step's commits that write it name
/// the version read (``Change/intentRead``), so a step that read it before another's commit writes nothing.
struct StepReads: WorkStore {
    let base: any WorkStore

    /// One step's inputs, current until that step commits.
    final class Snapshot: Sendable {
        let key: WorkKey
        let inputs: StepInputs
        private let committed = Mutex(false)

        init(key: WorkKey, inputs: StepInputs) {
            self.key = key
            self.inputs = inputs
        }

        var isCurrent: Bool { !committed.withLock { $0 } }
        func commitBegins() { committed.withLock { $0 = true } }
    }

    /// The inputs of the step this task runs (``Reconciler/process(_:hinted:)``).
    @TaskLocal static var snapshot: Snapshot?

    /// The step's inputs while nothing of the step is committed.
    private var current: Snapshot? { Self.snapshot.flatMap { $0.isCurrent ? $0 : nil } }

    func session(_ hppSessionID: String) async throws -> TrackedSession? {
        if let current, current.inputs.unitRead, current.key == .session(hppSessionID) { return current.inputs.session }
        return try await base.session(hppSessionID)
    }

    func order(_ orderID: String) async throws -> TrackedOrder? {
        if let current, current.inputs.unitRead, current.key == .order(orderID) { return current.inputs.order }
        return try await base.order(orderID)
    }

    func paymentRequest(_ id: String) async throws -> TrackedPaymentRequest? {
        if let current, current.inputs.unitRead, current.key == .paymentRequest(id) { return current.inputs.paymentRequest }
        return try await base.paymentRequest(id)
    }

    /// From the inputs when it is one of the order's intents, or the place-order or customer-token intent of the
    /// session's KP session (found or not: the inputs hold all of them); any other intent, or none, from the store.
    func intent(_ key: String) async throws -> Intent? {
        if let current, current.key.orderID != nil, let found = current.inputs.intents?.first(where: { $0.key == key }) { return found }
        if let current, let intents = current.inputs.sessionIntents, let kp = current.inputs.session?.kpSessionID,
            SessionIntentKind.allCases.contains(where: { IdempotencyKey.make($0.intentKind, kp) == key })
        {
            return intents.first { $0.key == key }
        }
        return try await base.intent(key)
    }

    func intents(subject: String) async throws -> [Intent] {
        if let current, current.key.orderID == subject, let intents = current.inputs.intents { return intents }
        return try await base.intents(subject: subject)
    }

    func oldestCaptureRequest(orderID: String) async throws -> CaptureRequestItem? {
        try await base.oldestCaptureRequest(orderID: orderID)
    }

    func operatorControls(for key: WorkKey) async throws -> OperatorControls {
        if let current, current.key == key { return current.inputs.controls }
        return try await base.operatorControls(for: key)
    }

    func stepInputs(for key: WorkKey) async throws -> StepInputs { try await base.stepInputs(for: key) }

    func commit(_ change: Change, at: Date, fencedBy key: WorkKey?) async throws {
        // Before the commit: whether it lands, fails or is tried again, the inputs may no longer be what is stored.
        Self.snapshot?.commitBegins()
        try await base.commit(change, at: at, fencedBy: key)
    }

    func untrackedNotifiedOrders(since: Date, limit: Int) async throws -> [String] {
        try await base.untrackedNotifiedOrders(since: since, limit: limit)
    }

    func settlementLines(merchantReference: String, account: AccountID, limit: Int) async throws -> [SettledLine] {
        try await base.settlementLines(merchantReference: merchantReference, account: account, limit: limit)
    }
}
