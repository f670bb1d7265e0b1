import Foundation
import KlarnaAPI
import Logging
import ReconcilerCore
import ReconcilerStore
import Synchronization
import Telemetry

/// Does the work for one session or order: reads Klarna, applies the domain rules, and performs side effects as
/// intents, committing every step before the next call. It holds no state of its own; the ``Scheduler`` makes sure
/// one key is worked on by one task at a time.
///
/// The work is split by what it drives: `Reconciler+Session`, `Reconciler+Order`, `Reconciler+PaymentRequest` and
/// `Reconciler+Intents` (the side effects); this file holds the plumbing every step goes through.
public struct Reconciler: Sendable {
    public struct WorkResult: Sendable, Equatable {
        /// When this key wants to run again and how urgent that is; `nil` when it is finished.
        public var next: WorkPlan?
        /// Other keys that now have work (an order handed off by its session).
        public var wake: [WorkKey] = []
        /// How urgent their first run is: a payment in motion's, a renewal's for the order a charge placed.
        public var wakeUrgency: Urgency = .inMotion
        /// An HPP session ended: what it teaches the scheduler about how long sessions take.
        public var ending: SessionEnding?

        public init(next: WorkPlan?, wake: [WorkKey] = [], wakeUrgency: Urgency = .inMotion, ending: SessionEnding? = nil) {
            self.next = next
            self.wake = wake
            self.wakeUrgency = wakeUrgency
            self.ending = ending
        }
    }

    /// What one step says before its plan is made: when to come back, who else has work, what a session's end teaches.
    struct StepResult: Sendable {
        var next: Date?
        var wake: [WorkKey] = []
        var wakeUrgency: Urgency = .inMotion
        var ending: SessionEnding?
        /// At least this urgent, whatever the unit's own plan says (a refund of a closed order has none).
        var urgency: Urgency?
    }

    public let store: any WorkStore
    /// Every call for a unit goes to the unit's account with that account's credentials and budget.
    public let accounts: KlarnaAccounts
    public let clock: any WallClock
    public let random: any RandomSource
    private let liveSettings: Live<EngineSettings>
    /// The tunables now; a reload replaces them between steps (``update(settings:)``).
    public var settings: EngineSettings { liveSettings.value }
    public let logger: Logger
    /// Rung after a commit that recorded outcomes, so the outbox writes them at once.
    public let outcomeBell: Doorbell?
    /// With several daemons on one store: whether this daemon may still act on a key. `nil`: it always may.
    public let ownership: (any WorkOwnership)?
    /// The key `process` works on, for the fence of each commit and the lease check before each call.
    @TaskLocal static var workKey: WorkKey?
    /// The account of the unit `process` works on, set once the unit is read: every Klarna call of the step is its.
    @TaskLocal static var account: AccountID?
    /// The version of that key's unit its step committed last (``commit(_:now:)`` records it), to plan the next run
    /// from without reading it back: one exchange with the store per step fewer (a shared store pays a round trip
    /// for each). Only the lease holder writes a unit's row, so the version committed is the version stored.
    @TaskLocal static var committed: CommittedUnit?

    /// The last version of one unit a step committed.
    final class CommittedUnit: Sendable {
        enum Unit: Sendable {
            case session(TrackedSession)
            case order(TrackedOrder)
            case paymentRequest(TrackedPaymentRequest)
        }

        private let unit = Mutex<Unit?>(nil)
        var value: Unit? { unit.withLock { $0 } }

        /// Keeps `key`'s version among what `change` wrote, if any.
        func keep(_ key: WorkKey, from change: Change) {
            let found: Unit? =
                switch key {
                case .session(let id): change.sessions.last { $0.hppSessionID == id }.map(Unit.session)
                case .order(let id): change.orders.last { $0.orderID == id }.map(Unit.order)
                case .paymentRequest(let id): change.paymentRequests.last { $0.paymentRequestID == id }.map(Unit.paymentRequest)
                case .customerToken: nil
                }
            if let found { unit.withLock { $0 = found } }
        }
    }

    public init(
        store: any WorkStore, accounts: KlarnaAccounts, clock: any WallClock, random: any RandomSource = SystemRandomSource(),
        settings: EngineSettings, logger: Logger, outcomeBell: Doorbell? = nil, ownership: (any WorkOwnership)? = nil, disk: DiskGuard? = nil
    ) {
        self.ownership = ownership
        self.disk = disk
        self.store = StepReads(base: store)
        self.accounts = accounts
        self.clock = clock
        self.random = random
        liveSettings = Live(settings)
        self.logger = logger
        self.outcomeBell = outcomeBell
    }

    /// Takes new tunables (configuration reload); steps under way finish with the ones they started with. The longest
    /// call stays: it follows the request timeout of the transport this engine started with, which takes a restart.
    public func update(settings: EngineSettings) {
        var settings = settings
        settings.longestCall = self.settings.longestCall
        liveSettings.replace(with: settings)
    }

    /// Set once a stop begins (``stopSendingSideEffects()``).
    private let stopping = Live(false)
    /// Under disk pressure no side effect starts (``DiskGuard``); `nil`: the disk is not watched.
    public let disk: DiskGuard?

    /// A stop has begun: steps under way finish, but none sends a side effect it had not sent yet (it is left
    /// `intended` for the next start). With the calls already sent bounded by the request timeout, which the drain
    /// outlasts, a graceful stop never cancels a create-order in flight.
    public func stopSendingSideEffects() { stopping.replace(with: true) }

    /// Whether a step may send a side effect now; if not, it commits `change` (what it read: an authorization it
    /// found is kept) and comes back at once. While stopping, the next start sends it; under disk pressure, the work
    /// loop once space returns (it starts no step meanwhile).
    func deferredSideEffect(_ change: Change, _ what: String, now: Date) async throws -> StepResult? {
        if let pressure = disk?.pressure {
            logger.notice("\(what) not sent: \(pressure.summary); sent once space returns")
        } else if stopping.value {
            logger.info("stopping: \(what) not sent; the next start sends it")
        } else {
            return nil
        }
        try await commit(change, now: now)
        return StepResult(next: now)
    }

    /// Works on `key` once. `hinted`: someone said something changed (a webhook, a capture request), so Klarna is
    /// read now even if the next read was planned for later.
    public func process(_ key: WorkKey, hinted: Bool = false) async throws -> WorkResult {
        try await Self.$workKey.withValue(key) {
            if let wait = try await takeoverWait(key) { return WorkResult(next: WorkPlan(due: wait, urgency: .inMotion)) }
            let committed = CommittedUnit()
            return try await Self.$committed.withValue(committed) { try await step(key, hinted: hinted, committed: committed) }
        }
    }

    /// Work taken over from a daemon whose lease ran out is left alone while that daemon may still have a call in
    /// flight for a `sent` intent of it (``Takeover``).
    private func takeoverWait(_ key: WorkKey) async throws -> Date? {
        guard let ownership, let takeover = ownership.takeover(of: key) else { return nil }
        let intents: [Intent]
        switch key {
        // A token's intent is its own unit: a charge sent again meanwhile would meet the first at Klarna.
        case .customerToken(let intentKey): intents = try await store.intent(intentKey).map { [$0] } ?? []
        default:
            guard let subject = key.intentSubject else { return nil }
            intents = try await store.intents(subject: subject)
        }
        // Decided on the monotonic clock; the wall time only says when to look again.
        guard let until = takeover.resumeAt(intents: intents, longestCall: ownership.longestCall, now: ContinuousClock.now, wallNow: clock.now) else {
            return nil
        }
        logger.notice(
            "\(key) was taken over from \(takeover.from) with a side effect sent: resolving it at \(until.formatted(.iso8601)), when any call of that daemon is over",
            metadata: ["work_key": .string(key.description)])
        return until
    }

    /// One step of `key`: what it reads first, in one read (``StepReads``), serves it until it commits.
    private func step(_ key: WorkKey, hinted: Bool, committed: CommittedUnit) async throws -> WorkResult {
        let inputs = try await store.stepInputs(for: key)
        return try await StepReads.$snapshot.withValue(StepReads.Snapshot(key: key, inputs: inputs)) {
            try await step(key, inputs, hinted: hinted, committed: committed)
        }
    }

    private func step(_ key: WorkKey, _ inputs: StepInputs, hinted: Bool, committed: CommittedUnit) async throws -> WorkResult {
        var hinted = hinted
        var operatorWake: [WorkKey] = []
        if key.remediationTarget != nil {
            // Operator requests first; a held key makes no Klarna call at all (a release or a webhook wakes it).
            let controls = inputs.controls
            var held = controls.held
            if !controls.pending.isEmpty {
                (held, operatorWake) = try await applyOperatorRequests(key, controls)
                hinted = true
            }
            if held { return WorkResult(next: nil, wake: operatorWake) }
        }
        var step =
            switch key {
            case .session(let id): try await processSession(id, hinted: hinted)
            case .order(let id): try await processOrder(id, hinted: hinted)
            case .paymentRequest(let id): try await LogContext.about(paymentRequest: id) { try await processPaymentRequest(id, hinted: hinted) }
            case .customerToken(let key): try await processTokenIntent(key)
            }
        step.wake += operatorWake
        guard let due = step.next else { return WorkResult(next: nil, wake: step.wake, wakeUrgency: step.wakeUrgency, ending: step.ending) }
        // How urgent the next run is follows from the state just committed, by the core's rules.
        let now = clock.now
        let plan: WorkPlan? =
            switch (key, committed.value) {
            case (.session, .session(let session)?): session.plan(now: now)
            case (.order, .order(let order)?): order.plan(now: now, deadlines: settings.deadlines)
            case (.paymentRequest, .paymentRequest(let request)?): request.plan()
            case (.session(let id), _): try await store.session(id)?.plan(now: now)
            case (.order(let id), _): try await store.order(id)?.plan(now: now, deadlines: settings.deadlines)
            case (.paymentRequest(let id), _): try await store.paymentRequest(id)?.plan()
            case (.customerToken(let key), _): try await store.intent(key).flatMap { ChargeRules.plan($0, due: due) }
            }
        let urgency = max(plan?.urgency ?? .routine, step.urgency ?? .routine)
        return WorkResult(
            next: WorkPlan(due: due, urgency: urgency, poll: plan?.poll, account: plan?.account), wake: step.wake, wakeUrgency: step.wakeUrgency,
            ending: step.ending)
    }

    // MARK: Plumbing

    func isDue(_ date: Date) -> Bool { clock.now.hasReached(date) }

    /// Runs `body` as work of `account`'s unit: its Klarna calls are that account's.
    func on<T: Sendable>(_ account: AccountID, _ body: () async throws -> T) async throws -> T {
        try await Self.$account.withValue(account) { try await LogContext.with(account: account, body) }
    }

    /// The account of the unit this step works on.
    func account() throws -> KlarnaAccount {
        let id = Self.account ?? .default
        guard let account = accounts[id] else { throw UnconfiguredAccount(account: id) }
        return account
    }

    /// Waits for the unit's account's rate budget (a side effect, before its sent mark).
    func spendBudget(_ urgency: Urgency) async throws { try await account().rateLimiter?.spend(urgency) }

    /// One Klarna call with the unit's account's client, under that account's rate budget, served by `urgency`; a
    /// 429's hint pauses that account. Records health for `status`. `budgetSpent`: the caller waited for the budget
    /// already (a side effect, before its sent mark).
    func klarna<T: Sendable>(
        _ change: inout Change, _ urgency: Urgency, budgetSpent: Bool = false, _ call: (KlarnaClient) async throws -> T
    ) async throws -> Result<T, KlarnaAPIError> {
        let account = try account()
        let rateLimiter = account.rateLimiter
        if !budgetSpent { try await spendBudget(urgency) }
        // Checked after the wait for the budget, right before the request leaves: a call starts only while this
        // daemon's lease on the key is known to last, so it ends before the lease plus the longest call.
        if let ownership, let key = Self.workKey, !ownership.mayCall(for: key) { throw LeaseUnconfirmed(key: key) }
        do {
            let value = try await call(account.client)
            change.health.append((.klarnaOK, ""))
            return .success(value)
        } catch let error as KlarnaAPIError {
            rateLimiter?.heed(error)
            if error.answer.isKlarnaFault { change.health.append((.klarnaError, Self.short(error))) }
            return .failure(error)
        }
    }

    func readDelay(failures: Int, _ error: KlarnaAPIError) -> Duration {
        var hint: Duration?
        if case .retry(let notBefore) = error.retryDisposition { hint = notBefore }
        let attempt = min(failures, settings.readRetry.maxAttempts - 1)
        switch settings.readRetry.decide(afterAttempt: max(1, attempt), elapsed: .zero, disposition: .retry(notBefore: hint), random: random) {
        case .retry(let delay): return max(delay, .milliseconds(100))
        case .giveUp: return settings.readRetry.maxDelay
        }
    }

    func record(_ step: SessionStep, into change: inout Change, detail: [String: String] = [:]) {
        change.sessions.append(step.session)
        for event in step.events {
            change.events.append(NewEvent(hppSessionID: step.session.hppSessionID, orderID: step.session.orderID, event, detail: detail))
        }
        if let outcome = step.outcome { change.outcomes.append(outcome) }
    }

    /// `asNew`: the order is one Klarna just created (inserted, never overwriting an order already known).
    func record(_ step: OrderStep, into change: inout Change, detail: [String: String] = [:], asNew: Bool = false) {
        if asNew { change.newOrders.append(step.order) } else { change.orders.append(step.order) }
        for event in step.events {
            change.events.append(NewEvent(hppSessionID: step.order.hppSessionID, orderID: step.order.orderID, event, detail: detail))
        }
        change.outcomes += step.outcomes
        change.ledgerCaptures += step.ledgerCaptures
    }

    /// Commits `change`; a failed commit (full disk, I/O error, a store locked too long) is retried with backoff in
    /// real time, because after a Klarna call its result exists only in memory until it is recorded. A change that
    /// holds Klarna's answer to a side effect (an intent it finishes) is retried until the store takes it, however
    /// long that takes (or until it finds the intent moved: its own earlier attempt landed, or another session's step
    /// finished it, ``IntentMoved``), and its ids go to the journal at the first failure (``MessageID/answerUnrecorded``), so that a
    /// process that dies meanwhile leaves them for `retry --order-id`.
    func commit(_ change: Change, now: Date) async throws {
        let answers = change.intents.filter(\.isFinished)
        let retry = settings.commitRetry
        let started = ContinuousClock.now
        var delay = retry.initialDelay
        var complained: ContinuousClock.Instant?
        while true {
            do {
                try await store.commit(change, at: now, fencedBy: Self.workKey)
                break
            } catch let lost as LeaseLost {
                throw lost
            } catch let moved as IntentMoved {
                // The same change can never go through: the step starts again from what is stored.
                // An answer another session's step kept out: its ids go to the journal as an unrecorded answer's do.
                if complained == nil { logUnrecorded(answers, moved) }
                if complained != nil, !answers.isEmpty {
                    logger.notice(
                        "Klarna's answer held since \(Int((ContinuousClock.now - started).timeInterval)) s ago: intent \(moved.key) moved meanwhile (an earlier attempt of this commit landed and lost its answer, or another session's step finished the intent); the step starts again from what is stored"
                    )
                }
                throw moved
            } catch {
                if complained == nil { logUnrecorded(answers, error) }
                guard !answers.isEmpty || ContinuousClock.now - started < retry.patience else { throw error }
                if complained.map({ ContinuousClock.now - $0 >= retry.complaintInterval }) ?? true {
                    complained = .now
                    let until = answers.isEmpty ? ", for \(retry.patience) at most" : " until it is recorded: it holds Klarna's answer"
                    logger.error("cannot record a step in the store (\(error)); trying again within \(retry.maxDelay)\(until)")
                }
                try await Task.sleep(for: delay)
                delay = min(delay * 2, retry.maxDelay)
            }
        }
        if complained != nil, !answers.isEmpty {
            logger.notice(
                "recorded Klarna's answer held since \(Int((ContinuousClock.now - started).timeInterval)) s ago: \(answers.map(\.key).joined(separator: ", "))"
            )
        }
        if let key = Self.workKey { Self.committed?.keep(key, from: change) }
        EventLog.log(change, logger: logger)
        for outcome in change.outcomes {
            Telemetry.count(.outcomes, ("kind", outcome.kind.rawValue))
            if let result = outcome.kind.chargeResult { Telemetry.count(.charges, ("outcome", result)) }
        }
        for intent in change.intents where intent.isFinished {
            Telemetry.count(.intentsFinished, ("kind", intent.kind.rawValue), ("state", intent.state.rawValue))
        }
        if !change.outcomes.isEmpty { outcomeBell?.ring() }
    }

    /// Klarna's answers the store could not record yet, one journal line each with what Klarna created: the record
    /// until the commit lands (a customer token by its tail only, as everywhere).
    private func logUnrecorded(_ answers: [Intent], _ error: any Error) {
        for intent in answers {
            let shown = intent.redacted
            logger.critical(
                "Klarna's answer to \(intent.kind.rawValue) \(intent.key) for \(shown.subject) is not recorded yet (\(error)): \(intent.state.rawValue)\(shown.result.map { ", result \($0)" } ?? "")\(shown.lastError.map { ", \($0)" } ?? ""); kept and committed as soon as the store takes it",
                metadata: [
                    MessageID.metadataKey: .string(MessageID.answerUnrecorded.rawValue), "intent": .string(intent.key),
                    "intent_kind": .string(intent.kind.rawValue), "subject": .string(shown.subject),
                    "result": .string(shown.result ?? ""),
                ])
        }
    }

    /// This daemon's lease on the key is not known to last (the store has not answered a renewal in time): no call
    /// starts; the key is tried again later, by this daemon if the lease is still its own, else by its new holder.
    struct LeaseUnconfirmed: Error, CustomStringConvertible {
        let key: WorkKey
        var description: String { "the lease on \(key) is not confirmed (the store has not answered a renewal in time): no Klarna call starts" }
    }

    /// The error as the core's intent rules see it.
    static func callFailure(_ error: KlarnaAPIError) -> CallFailure {
        CallFailure(outcomeUnknown: error.outcomeUnknown, disposition: error.retryDisposition, summary: short(error))
    }

    /// The error in one line without the local request id (that is in `detail`).
    static func short(_ error: KlarnaAPIError) -> String {
        var parts: [String] = []
        switch error.failure {
        case .http(let status): parts.append("HTTP \(status)")
        case .transport(let transport): parts.append(transport.description)
        case .undecodableResponse(let status, let detail): parts.append("unreadable HTTP \(status) answer: \(detail)")
        }
        if let code = error.errorCode { parts.append(code) }
        if let message = error.errorMessages.first { parts.append(message) }
        return parts.joined(separator: " ")
    }

    static func detail(_ error: KlarnaAPIError) -> [String: String] {
        var detail = ["request_id": error.requestID, "klarna_operation": error.operation.name]
        if let status = error.status { detail["http_status"] = "\(status)" }
        if let code = error.errorCode { detail["error_code"] = code }
        if let correlation = error.klarnaCorrelationID { detail["klarna_correlation_id"] = correlation }
        return detail
    }
}
