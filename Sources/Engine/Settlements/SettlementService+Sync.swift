import Foundation
import KlarnaAPI
import Logging
import Metrics
import ReconcilerCore
import ReconcilerStore

/// What one settlement sync did.
public struct SettlementSyncReport: Sendable, Equatable {
    /// Payouts Klarna listed in the sync's window, recorded or not.
    public var listed = 0
    /// Payouts this sync recorded.
    public var reconciled = 0
    /// Outcomes recorded with those payouts (their findings).
    public var findingOutcomes = 0
    /// Captures and refunds seen on order reads that the ledger lacked, recorded as drift.
    public var drift = 0
    /// Captures flagged as not settled in time.
    public var unsettledFlagged = 0

    public init() {}
}

extension SettlementService {
    /// Captures read from the store per look for overdue ones.
    static let unsettledBatch = 500

    /// One sync: the payouts listed since ``SettlementSync/windowStart(newestPayoutDate:now:lookback:)`` that are not
    /// recorded, oldest first, each reconciled and recorded in one transaction; then the captures overdue now.
    /// Throws at the first failure: what was recorded before it stays, and the next sync goes on from there.
    @discardableResult
    public func sync() async throws -> SettlementSyncReport {
        let settings = self.settings
        var report = SettlementSyncReport()
        let newest = try await store.settlementHealth(account: account).newestPayoutDate
        let start = SettlementSync.windowStart(newestPayoutDate: newest, now: clock.now, lookback: settings.firstSyncLookback)
        let listed = try await klarna {
            try await client.allPayouts(from: start, pageSize: pageSize, beforeEachPage: { try await admit() })
        }
        let payouts = listed.map { SettledPayout($0) }
        report.listed = payouts.count
        let recorded = try await store.recordedPayouts(among: payouts.map(\.paymentReference))
        for payout in SettlementSync.toReconcile(payouts, recorded: recorded) {
            try await reconcile(payout, into: &report)
        }
        report.unsettledFlagged = try await flagOverdueCaptures(settings)
        await showHealth()
        return report
    }

    /// Fetches the payout's transactions, matches them against the ledger, reads the orders whose captures or
    /// refunds the ledger lacks and records what they show (drift, once), matches again, and records the payout with
    /// its findings as outcomes.
    private func reconcile(_ payout: SettledPayout, into report: inout SettlementSyncReport) async throws {
        let transactions = try await klarna {
            try await client.allTransactions(
                paymentReference: payout.paymentReference, pageSize: pageSize, beforeEachPage: { try await admit() })
        }
        let lines = SettledLine.lines(of: transactions, paymentReference: payout.paymentReference)
        let orderIDs = SettlementMatcher.orderIDs(in: lines).sorted()
        let ledger = try await store.ledger(orderIDs: orderIDs, account: account)
        var reconciliation = reconcile(payout, lines: lines, orders: ledger)
        let drift = try await recordDrift(of: reconciliation.driftOrderIDs, ledger: ledger, paymentReference: payout.paymentReference)
        report.drift += drift.recorded
        if drift.found {
            // The captures and refunds just recorded are the ledger's now (observed): their lines match them.
            let observed = try await store.ledger(orderIDs: orderIDs, account: account)
            reconciliation = reconcile(payout, lines: lines, orders: observed)
        }
        for attempt in 1...Self.matchAttempts {
            let outcomes = reconciliation.outcomes
            do {
                guard try await store.record(reconciliation, outcomes: outcomes, at: clock.now) else {
                    logger.info("payout \(payout.paymentReference) was recorded meanwhile (another daemon): left as it is")
                    return
                }
                report.reconciled += 1
                report.findingOutcomes += outcomes.count
                announce(reconciliation)
                announce(outcomes)
                return
            } catch let stale as StaleSettlementMatch where attempt < Self.matchAttempts {
                // Another daemon recorded a payout settling one of these captures since the ledger was read.
                logger.info("\(stale)", metadata: ["payment_reference": .string(payout.paymentReference)])
                reconciliation = reconcile(payout, lines: lines, orders: try await store.ledger(orderIDs: orderIDs, account: account))
            }
        }
    }

    /// The payout matched against `orders`, as this account's.
    private func reconcile(_ payout: SettledPayout, lines: [SettledLine], orders: [String: LedgerOrder]) -> PayoutReconciliation {
        var reconciliation = SettlementMatcher.reconcile(payout: payout, lines: lines, orders: orders)
        reconciliation.account = account
        return reconciliation
    }

    /// How often a payout is matched before a stale match (``StaleSettlementMatch``) fails the sync.
    static let matchAttempts = 3

    /// Reads each order once and records every capture and refund on it that the ledger lacks, each in its own
    /// transaction with its outcome. `found`: something was lacking (the ledger has it now); `recorded`: how many
    /// entries this daemon recorded (another one may have been first).
    private func recordDrift(
        of orderIDs: [String], ledger: [String: LedgerOrder], paymentReference: String
    ) async throws -> (found: Bool, recorded: Int) {
        var found = false
        var recorded = 0
        let held = try await store.heldOrders(among: orderIDs)
        for orderID in orderIDs {
            if held.contains(orderID) {
                logger.info(
                    "order \(orderID) is held: its settlement line's finding stands without a read of the order",
                    metadata: ["order_id": .string(orderID)])
                continue
            }
            guard let known = ledger[orderID], let read = try await readOrder(orderID) else { continue }
            let drift = LedgerDrift(read: read, ledger: known, readAt: clock.now)
            let entries: [DriftEntry] =
                drift.captures.map {
                    DriftEntry(.capture($0), outcome: Outcome(observed: $0, of: known, paymentReference: paymentReference))
                }
                + drift.refunds.map {
                    DriftEntry(.refund($0), outcome: Outcome(observed: $0, of: known, currency: read.currency, paymentReference: paymentReference))
                }
            found = found || !entries.isEmpty
            for entry in entries {
                guard try await store.recordDrift([entry], at: clock.now) > 0 else { continue }
                recorded += 1
                announce([entry.outcome])
            }
        }
        return (found, recorded)
    }

    /// The order as Klarna's Order Management shows it; nil when Klarna answers that it does not know the order (404)
    /// or will not show it (403): the settlement line's own finding then stands, and one such order does not hold up
    /// every later payout. Every other failure (5xx, 429, a timeout, a 401, a shutdown) fails the sync, which is tried
    /// again: a payout recorded without its drift would never be matched again.
    private func readOrder(_ orderID: String) async throws -> OrderMovements? {
        try await admit()
        do {
            let order = try await klarna { try await client.readOrder(id: orderID) }
            return OrderMovements(order, orderID: orderID)
        } catch let error as KlarnaAPIError where error.answer.hidesTheOrder {
            logger.warning(
                "order \(orderID) of a settlement line could not be read (\(Reconciler.short(error))): the line's finding stands",
                metadata: ["order_id": .string(orderID)])
            return nil
        }
    }

    /// Flags the captures no payout settled within `settle_within_days` of their capture, each once with its outcome,
    /// in batches; returns how many this daemon flagged. `settings`: the ones the sync started with.
    private func flagOverdueCaptures(_ settings: SettlementSettings) async throws -> Int {
        let now = clock.now
        let days = settings.settleWithinDays
        let health = try await store.settlementHealth(account: account)
        let window = UnsettledCaptures.window(
            now: now, settleWithinDays: days, oldestPayoutDate: health.oldestPayoutDate,
            lookback: settings.firstSyncLookback.timeInterval)
        var flagged = 0
        while true {
            let captures = try await store.unsettledCaptures(
                account: account, capturedFrom: window.from, capturedBefore: window.before, limit: Self.unsettledBatch)
            var flaggedNow = 0
            for overdue in UnsettledCaptures.check(captures, now: now, settleWithinDays: days, flagged: []).overdue {
                let outcome = Outcome(overdue: overdue)
                guard try await store.flagUnsettled([UnsettledFlag(key: overdue.key, outcome: outcome)], at: now) > 0 else { continue }
                flaggedNow += 1
                announce([outcome])
            }
            flagged += flaggedNow
            // A full batch may have more behind it; one that flagged nothing would only come back the same.
            guard captures.count == Self.unsettledBatch, flaggedNow > 0 else { return flagged }
        }
    }

    /// The settlement gauges of `/metrics`, from the store; a store that does not answer keeps the last values.
    private func showHealth() async {
        guard let health = try? await store.settlementHealth(account: account) else { return }
        let dimensions = [("account", account.rawValue)]
        Gauge(label: MetricName.unsettledCaptures.rawValue, dimensions: dimensions).record(health.unsettledFlagged)
        Gauge(label: MetricName.newestPayout.rawValue, dimensions: dimensions).record(health.newestPayoutDate?.timeIntervalSince1970 ?? 0)
    }
}
