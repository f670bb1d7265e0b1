import Foundation
import KlarnaAPI
import Logging
import Metrics
import ReconcilerCore
import ReconcilerStore
import ServiceLifecycle
import Telemetry

/// Follows Klarna's disputes (`disputes.enabled`): lists the Disputes API for disputes updated since the last list
/// every `disputes.sync_interval_minutes`, reads each dispute a webhook named as soon as the hint is recorded, reads
/// each open dispute again at its warning times and just after its deadline, and sends the operators' actions
/// (``sync()``). What a read changes is decided by ``DisputeRules`` and recorded with its outcome in one transaction,
/// conditional on the revision read, so every change's outcome is written once, by one daemon. One service runs per
/// account with disputes on: it reads that account's disputes, hints and actions with its credentials, and ties a
/// dispute only to an order of that account.
///
/// Reads wait for the shared rate budget at ``Urgency/background`` (lists) or ``Urgency/hinted`` (a webhook's dispute,
/// a deadline's read); an operator's action and the read before it at ``Urgency/inMotion``. A failed sync is logged
/// with ``MessageID/disputeSyncFailed`` and tried again with backoff.
public struct DisputeService: Service {
    let store: any DisputeStore
    /// The Klarna account whose disputes these are; `client` and `rateLimiter` are its.
    public let account: AccountID
    let client: KlarnaClient
    let clock: any WallClock
    let rateLimiter: RateLimiter?
    let logger: Logger
    /// Rung after outcomes are recorded, so the outbox writes them at once.
    let outcomeBell: Doorbell?
    let random: any RandomSource
    private let liveSettings: Live<DisputeSettings>
    /// Rung by a dispute webhook's hint, an operator's action and a reload: the service looks at once.
    public let bell: Doorbell
    /// Disputes whose last read failed for them alone, left alone for a while.
    let backoff = DisputeBackoff()
    /// The currencies `/metrics` showed a held amount for.
    private let heldCurrencies = Live<Set<String>>([])

    public init(
        store: any DisputeStore, client: KlarnaClient, clock: any WallClock, rateLimiter: RateLimiter?, settings: DisputeSettings,
        logger: Logger, outcomeBell: Doorbell? = nil, bell: Doorbell = Doorbell(), random: any RandomSource = SystemRandomSource(),
        account: AccountID = .default
    ) {
        self.store = store
        self.account = account
        self.client = client
        self.clock = clock
        self.rateLimiter = rateLimiter
        self.logger = logger.with(account: account)
        self.outcomeBell = outcomeBell
        self.bell = bell
        self.random = random
        liveSettings = Live(settings)
    }

    public var settings: DisputeSettings { liveSettings.value }

    /// Takes new tunables (configuration reload).
    public func update(settings: DisputeSettings) {
        liveSettings.replace(with: settings)
        bell.ring()
    }

    /// Lists at once, then every `syncInterval`; between lists, looks at hints, due disputes and actions whenever one
    /// is there: at once when the bell rings, and at least every ``actionPoll`` (an action the command line recorded
    /// rings no bell). After a failure, sooner than the interval, with backoff.
    public func run() async throws {
        // The account on the Klarna client's lines too.
        await LogContext.with(account: account) { await runSyncs() }
    }

    private func runSyncs() async {
        await cancelWhenGracefulShutdown {
            var lastList: Date?
            var failures = 0
            while !Task.isCancelled {
                let interval = settings.syncInterval
                do {
                    let now = clock.now
                    let listDue = lastList.map { now.hasReached($0.addingTimeInterval(interval.timeInterval)) } ?? true
                    let lookDue = try await store.nextDisputeLook(account: account).map { now.hasReached($0) } ?? false
                    let hinted = try await !store.disputeHints(account: account, limit: 1).isEmpty
                    if listDue || lookDue || hinted {
                        try await sync(list: listDue)
                        if listDue { lastList = now }
                    }
                    failures = 0
                } catch {
                    if Task.isCancelled { return }
                    failures += 1
                    Telemetry.count(.disputeSyncFailures)
                    let delay = SettlementSync.retryDelay(
                        afterFailures: failures, disposition: SettlementService.disposition(of: error), interval: interval, random: random)
                    logger.error(
                        "dispute sync failed (\(failures) in a row): \(error); trying again in \(delay) (what was recorded stays recorded)",
                        metadata: [
                            MessageID.metadataKey: .string(MessageID.disputeSyncFailed.rawValue), "attempt": .stringConvertible(failures),
                        ])
                    await bell.wait(timeout: delay, clock: clock)
                    continue
                }
                let nextList = (lastList ?? clock.now).addingTimeInterval(interval.timeInterval)
                let nextLook = (try? await store.nextDisputeLook(account: account)) ?? nil
                // Never less than a tenth of a second: a look that stays due (its write lost to another daemon's) must
                // not spin the loop.
                let pause = min(max(0.1, min(nextList, nextLook ?? nextList).timeIntervalSince(clock.now)), Self.actionPoll.timeInterval)
                await bell.wait(timeout: Duration(timeInterval: pause), clock: clock)
            }
        }
    }

    /// How often the store is asked whether anything is due between the bell's rings.
    static let actionPoll: Duration = .seconds(2)

    // MARK: Klarna calls

    /// One token of the shared rate budget at `urgency`, then the call; a 429 pauses every caller until the reset.
    func klarna<T>(_ urgency: Urgency, _ call: () async throws -> T) async throws -> T {
        try await rateLimiter?.spend(urgency)
        return try await rateLimiter.heeding(call)
    }

    // MARK: Telling

    /// Outcomes this daemon recorded (``EventLog/announce(_:logger:bell:)``).
    func announce(_ outcomes: [Outcome]) { EventLog.announce(outcomes, logger: logger, bell: outcomeBell) }

    /// The dispute gauges of `/metrics`, from the store; a store that does not answer keeps the last values.
    func showHealth() async {
        guard let health = try? await store.disputeHealth(account: account) else { return }
        let account = ("account", account.rawValue)
        for state in DisputeState.knownValues where state != .closed {
            Gauge(label: MetricName.openDisputes.rawValue, dimensions: [account, ("state", state.rawValue)])
                .record(health.openByState[state.rawValue] ?? 0)
        }
        let others = health.openByState.filter { key, _ in !DisputeState.knownValues.contains(DisputeState(rawValue: key)) }.values.reduce(0, +)
        Gauge(label: MetricName.openDisputes.rawValue, dimensions: [account, ("state", "other")]).record(others)
        Gauge(label: MetricName.disputeDeadlineSeconds.rawValue, dimensions: [account])
            .record(health.nextDeadline.map { $0.timeIntervalSince(clock.now) } ?? 0)
        // A currency whose last held dispute closed goes back to 0 rather than keep its last value.
        let currencies = heldCurrencies.value.union(health.heldByCurrency.keys)
        heldCurrencies.replace(with: currencies)
        for currency in currencies {
            Gauge(label: MetricName.disputedAmountHeld.rawValue, dimensions: [account, ("currency", currency)])
                .record(health.heldByCurrency[currency] ?? 0)
        }
    }
}
