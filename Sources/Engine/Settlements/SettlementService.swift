import Foundation
import KlarnaAPI
import Logging
import ReconcilerCore
import ReconcilerStore
import ServiceLifecycle
import Telemetry

/// Reconciles Klarna's payouts with the ledger (`settlements.enabled`): every `settlements.sync_interval_minutes` it
/// fetches the payouts not recorded yet, matches each against what the shop did and records it with its findings as
/// outcomes, then flags the captures no payout settled in time (``sync()``). One service runs per account with
/// settlements on: it lists that account's payouts with its credentials, matches them against that account's orders
/// only, and flags only that account's captures. Every Klarna call waits for the account's rate budget at
/// ``Urgency/background``, so settlements never delay payment work, and a 429 pauses every caller of the account
/// until Klarna's reset.
///
/// A failed sync (Klarna unavailable or limiting, a page that cannot be read, the store) is logged with
/// ``MessageID/settlementSyncFailed`` and tried again with backoff, never later than the interval. Each payout is
/// recorded whole or not at all and a recorded payout is skipped, so a failure or a restart in the middle of a sync
/// loses nothing and writes no outcome twice. Graceful shutdown cancels a sync under way for the same reason.
public struct SettlementService: Service {
    let store: any SettlementStore
    /// The Klarna account whose payouts these are; `client` and `rateLimiter` are its.
    public let account: AccountID
    let client: KlarnaClient
    let clock: any WallClock
    let rateLimiter: RateLimiter?
    let logger: Logger
    /// Rung after outcomes are recorded, so the outbox writes them at once.
    let outcomeBell: Doorbell?
    let random: any RandomSource
    /// Payouts and transactions asked for per page.
    let pageSize: Int
    private let liveSettings: Live<SettlementSettings>
    /// Rung by a reload: a changed interval counts from the last sync at once.
    private let reloaded = Doorbell()

    public init(
        store: any SettlementStore, client: KlarnaClient, clock: any WallClock, rateLimiter: RateLimiter?,
        settings: SettlementSettings, logger: Logger, outcomeBell: Doorbell? = nil,
        random: any RandomSource = SystemRandomSource(), pageSize: Int = KlarnaClient.settlementsMaxPageSize, account: AccountID = .default
    ) {
        self.store = store
        self.account = account
        self.client = client
        self.clock = clock
        self.rateLimiter = rateLimiter
        self.logger = logger.with(account: account)
        self.outcomeBell = outcomeBell
        self.random = random
        self.pageSize = pageSize
        liveSettings = Live(settings)
    }

    /// The tunables now; a reload replaces them (``update(settings:)``), a sync under way keeps the ones it started with.
    public var settings: SettlementSettings { liveSettings.value }

    /// Takes new tunables (configuration reload).
    public func update(settings: SettlementSettings) {
        liveSettings.replace(with: settings)
        reloaded.ring()
    }

    /// Syncs at once, then `syncInterval` after the end of each sync; after a failure, sooner
    /// (``SettlementSync/retryDelay(afterFailures:disposition:interval:random:)``).
    public func run() async throws {
        // The account on the Klarna client's lines too.
        await LogContext.with(account: account) { await runSyncs() }
    }

    private func runSyncs() async {
        await cancelWhenGracefulShutdown {
            var lastSync: Date?
            var retry: Duration?
            var failures = 0
            while !Task.isCancelled {
                if let lastSync {
                    let pause = min(retry ?? settings.syncInterval, settings.syncInterval)
                    let due = lastSync.addingTimeInterval(pause.timeInterval)
                    let now = clock.now
                    if !now.hasReached(due) {
                        await reloaded.wait(timeout: Duration(timeInterval: due.timeIntervalSince(now)), clock: clock)
                        continue
                    }
                }
                do {
                    try await sync()
                    failures = 0
                    retry = nil
                } catch {
                    if Task.isCancelled { return }
                    failures += 1
                    let delay = SettlementSync.retryDelay(
                        afterFailures: failures, disposition: Self.disposition(of: error), interval: settings.syncInterval,
                        random: random)
                    retry = delay
                    Telemetry.count(.settlementSyncFailures)
                    logger.error(
                        "settlement sync failed (\(failures) in a row): \(error); trying again in \(delay) (what was recorded stays recorded)",
                        metadata: [
                            MessageID.metadataKey: .string(MessageID.settlementSyncFailed.rawValue),
                            "attempt": .stringConvertible(failures),
                        ])
                }
                lastSync = clock.now
            }
        }
    }

    /// What a failure says about trying again: Klarna's own word for its errors; anything else (the store) may pass.
    static func disposition(of error: any Error) -> RetryDisposition {
        (error as? KlarnaAPIError)?.retryDisposition ?? .retry(notBefore: nil)
    }

    // MARK: Klarna calls

    /// One token of the shared rate budget, before one Klarna call.
    func admit() async throws {
        try await rateLimiter?.spend(.background)
    }

    /// A Klarna call, or a walk through pages (each admitted on its own); a 429 pauses every caller until the reset.
    func klarna<T>(_ call: () async throws -> T) async throws -> T { try await rateLimiter.heeding(call) }

    // MARK: Telling

    /// Outcomes this daemon recorded (``EventLog/announce(_:logger:bell:)``).
    func announce(_ outcomes: [Outcome]) { EventLog.announce(outcomes, logger: logger, bell: outcomeBell) }

    /// A payout this daemon recorded: one line with its counts, and the settlement metrics.
    func announce(_ reconciliation: PayoutReconciliation) {
        let payout = reconciliation.payout
        Telemetry.count(.payoutsReconciled)
        for line in reconciliation.lines {
            Telemetry.count(.settlementLines, ("result", SettlementLineResult(line.match).rawValue))
        }
        for finding in reconciliation.findings {
            Telemetry.count(.settlementFindings, ("kind", finding.kind.rawValue))
        }
        let date = payout.payoutDate.formatted(Date.ISO8601FormatStyle())
        logger.notice(
            "payout \(payout.paymentReference) of \(date) reconciled: \(reconciliation.lines.count) lines, \(reconciliation.matchedCount) matched, \(reconciliation.payoutLevelCount) for the payout, \(reconciliation.unmatchedCount) unmatched; \(reconciliation.findings.count) findings; net \(payout.totals.settlementAmount) \(payout.currency)",
            metadata: [
                MessageID.metadataKey: .string(MessageID.payoutReconciled.rawValue),
                "payment_reference": .string(payout.paymentReference),
                "lines": .stringConvertible(reconciliation.lines.count),
                "matched": .stringConvertible(reconciliation.matchedCount),
                "payout_level": .stringConvertible(reconciliation.payoutLevelCount),
                "unmatched": .stringConvertible(reconciliation.unmatchedCount),
                "findings": .stringConvertible(reconciliation.findings.count),
            ])
    }
}
