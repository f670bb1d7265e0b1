import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore

/// What the settlement service records: findings and overdue captures as outcomes, the captures and refunds an order
/// read shows that the ledger lacks, and where a sync starts.
@Suite("Settlement outcomes, drift and the sync window")
struct SettlementOutcomesTests {
    let ref = "XISA93DJ"

    func line(
        _ ordinal: Int, _ kind: SettlementKind, _ amount: Int, order: String? = "o-1", capture: String? = nil, refund: String? = nil,
        currency: String = "EUR"
    ) -> SettledLine {
        SettledLine(
            paymentReference: ref, ordinal: ordinal, kind: kind, amount: amount, orderID: order, captureID: capture,
            refundID: refund, currency: currency)
    }

    func payout(settlement: Int, sale: Int = 0, returns: Int = 0, reversal: Int = 0, date: Date? = nil, reference: String? = nil) -> SettledPayout {
        SettledPayout(
            paymentReference: reference ?? ref, payoutDate: date ?? Fixtures.t0, currency: "EUR", settlementType: "NET",
            totals: SettledTotals(saleAmount: sale, returnAmount: returns, reversalAmount: reversal, settlementAmount: settlement))
    }

    func order(captures: [LedgerCapture] = [], refunds: [LedgerRefund] = []) -> LedgerOrder {
        LedgerOrder(orderID: "o-1", merchantReference: "1001", currency: "EUR", captures: captures, refunds: refunds)
    }

    func capture(_ id: String?, _ amount: Int) -> LedgerCapture {
        LedgerCapture(orderID: "o-1", captureID: id, amount: amount, currency: "EUR", capturedAt: Fixtures.t0, source: .daemon)
    }

    // MARK: - Findings as outcomes

    @Test(
        "Each finding kind becomes its outcome kind",
        arguments: [
            (.orphan, .settlementOrphan),
            (.amountMismatch, .settlementMismatch), (.ambiguousMatch, .settlementMismatch), (.duplicateSettlement, .settlementMismatch),
            (.unknownCapture, .settlementDrift), (.unknownRefund, .settlementDrift),
            (.reversal, .settlementReversal), (.totalsMismatch, .payoutMismatch),
        ] as [(SettlementFindingKind, OutcomeKind)])
    func kinds(finding: SettlementFindingKind, outcome: OutcomeKind) {
        #expect(finding.outcomeKind == outcome)
        #expect(outcome.isSettlement)
    }

    @Test("Every finding kind has its outcome kind")
    func everyKind() {
        #expect(
            Set(SettlementFindingKind.allCases.map(\.outcomeKind)) == Set(OutcomeKind.allCases.filter { $0.isSettlement && $0 != .captureUnsettled }))
    }

    @Test("An amount mismatch carries the payout, the finding's word, the ids, Klarna's amount and the ledger's")
    func mismatchCarriesEverything() throws {
        let result = SettlementMatcher.reconcile(
            payout: payout(settlement: 12_100, sale: 12_100), lines: [line(1, .sale, 12_100, capture: "c-1")],
            orders: ["o-1": order(captures: [capture("c-1", 12_000)])])
        let outcome = try #require(result.outcomes.first)
        #expect(result.outcomes.count == 1)
        #expect(
            outcome
                == Outcome(
                    kind: .settlementMismatch, reason: result.findings[0].reason, orderID: "o-1", merchantReference: "1001",
                    amount: 12_100, currency: "EUR", captureID: "c-1", paymentReference: ref, finding: .amountMismatch,
                    expectedAmount: 12_000))
    }

    @Test("A refund's finding carries its refund id; a payout's totals finding the payout's currency")
    func refundAndTotals() {
        let result = SettlementMatcher.reconcile(
            payout: payout(settlement: -499, returns: 500), lines: [line(1, .return, 500, refund: "r-9")],
            orders: ["o-1": order()])
        #expect(result.outcomes.map(\.kind) == [.settlementDrift, .payoutMismatch])
        #expect(result.outcomes[0].refundID == "r-9")
        #expect(result.outcomes[0].finding == .unknownRefund)
        let totals = result.outcomes[1]
        #expect(totals.finding == .totalsMismatch)
        #expect(totals.currency == "EUR")
        #expect(totals.amount == -499)
        #expect(totals.expectedAmount == -500)
        #expect(totals.orderID == nil)
    }

    @Test("An overdue capture becomes capture_unsettled with its order, capture, amount and currency")
    func overdue() throws {
        let check = UnsettledCaptures.check(
            [capture("c-1", 5_000)], now: Fixtures.t0.addingTimeInterval(15 * 86_400), settleWithinDays: 14, flagged: [])
        let overdue = try #require(check.overdue.first)
        #expect(
            Outcome(overdue: overdue)
                == Outcome(
                    kind: .captureUnsettled, reason: overdue.reason, orderID: "o-1", amount: 5_000, currency: "EUR", captureID: "c-1"))
    }

    // MARK: - Drift seen on an order read

    func movement(_ id: String?, _ amount: Int, at: Date? = nil) -> OrderMovements.Movement {
        OrderMovements.Movement(id: id, amount: amount, at: at)
    }

    @Test("A capture and a refund on Klarna's order that the ledger lacks are observed entries, with Klarna's times; what the ledger has is not")
    func driftFromARead() {
        let made = Fixtures.t0.addingTimeInterval(3_600)
        let read = OrderMovements(
            orderID: "o-1", currency: "EUR", captures: [movement("c-1", 10_000), movement("c-2", 2_500, at: made)],
            refunds: [movement("r-1", 1_000, at: made)])
        let drift = LedgerDrift(read: read, ledger: order(captures: [capture("c-1", 10_000)]), readAt: Fixtures.t0.addingTimeInterval(7_200))
        #expect(
            drift.captures == [LedgerCapture(orderID: "o-1", captureID: "c-2", amount: 2_500, currency: "EUR", capturedAt: made, source: .observed)])
        #expect(drift.refunds == [LedgerRefund(orderID: "o-1", refundID: "r-1", amount: 1_000, at: made, source: .observed)])
        #expect(!drift.isEmpty)
    }

    @Test("Nothing is drift when the ledger has it all: by id, or an id-less entry of the amount standing for one movement")
    func noDrift() {
        let read = OrderMovements(
            orderID: "o-1", currency: nil, captures: [movement("c-1", 10_000), movement("c-2", 500)], refunds: [movement("r-1", 0)])
        let drift = LedgerDrift(read: read, ledger: order(captures: [capture("c-1", 10_000), capture(nil, 500)]), readAt: Fixtures.t0)
        #expect(drift.isEmpty)
        // One id-less entry stands for one movement only; a movement Klarna lists twice counts once; no time: the read's.
        let twice = OrderMovements(
            orderID: "o-1", currency: nil, captures: [movement("c-2", 500), movement("c-3", 500), movement("c-3", 500)], refunds: [])
        let more = LedgerDrift(read: twice, ledger: order(captures: [capture(nil, 500)]), readAt: Fixtures.t0)
        #expect(more.captures.map(\.captureID) == ["c-3"])
        #expect(more.captures.first?.capturedAt == Fixtures.t0)
        #expect(more.captures.first?.currency == "EUR")
    }

    @Test("A drift entry's outcome says what was done outside the daemon, on which order, for which payout")
    func driftOutcome() {
        let observed = LedgerCapture(orderID: "o-1", captureID: "c-2", amount: 2_500, currency: "EUR", capturedAt: Fixtures.t0, source: .observed)
        let outcome = Outcome(observed: observed, of: order(), paymentReference: ref)
        #expect(outcome.kind == .settlementDrift)
        #expect(outcome.finding == .unknownCapture)
        #expect(outcome.captureID == "c-2")
        #expect(outcome.merchantReference == "1001")
        #expect(outcome.paymentReference == ref)
        #expect(
            outcome.reason
                == "capture c-2 of 2500 EUR made 2027-01-15T08:00:00Z on order o-1 is not the daemon's: captured outside it (Merchant Portal?); recorded as observed"
        )
        let refund = LedgerRefund(orderID: "o-1", refundID: "r-1", amount: 700, at: Fixtures.t0, source: .observed)
        let refunded = Outcome(observed: refund, of: order(), currency: nil, paymentReference: nil)
        #expect(refunded.finding == .unknownRefund)
        #expect(refunded.refundID == "r-1")
        #expect(refunded.currency == "EUR")
        #expect(refunded.amount == 700)
    }

    @Test("The orders to read for drift: those of unknown captures and refunds, each once; not orphans, not matched lines")
    func driftOrders() {
        let lines = [
            line(1, .sale, 100, capture: "c-1"), line(2, .sale, 200, capture: "c-9"), line(3, .return, 50, refund: "r-9"),
            line(4, .sale, 300, order: "o-2", capture: "c-2"), line(5, .sale, 400, order: "o-3", capture: "c-3"),
        ]
        let other = LedgerOrder(orderID: "o-3", currency: "EUR")
        let result = SettlementMatcher.reconcile(
            payout: payout(settlement: 950, sale: 1_000, returns: 50), lines: lines,
            orders: ["o-1": order(captures: [capture("c-1", 100)]), "o-3": other])
        #expect(result.driftOrderIDs == ["o-1", "o-3"])
    }

    // MARK: - The sync window

    @Test("The first sync lists from now less the lookback; later ones from the newest payout less the overlap")
    func window() {
        let now = Fixtures.t0.addingTimeInterval(30 * 86_400)
        #expect(SettlementSync.windowStart(newestPayoutDate: nil, now: now, lookback: .seconds(30 * 86_400)) == Fixtures.t0)
        let newest = Fixtures.t0.addingTimeInterval(20 * 86_400)
        #expect(
            SettlementSync.windowStart(newestPayoutDate: newest, now: now, lookback: .seconds(86_400)) == Fixtures.t0.addingTimeInterval(13 * 86_400))
        // A payout dated after now (a clock behind Klarna's) does not move the window past now less the overlap.
        #expect(
            SettlementSync.windowStart(newestPayoutDate: now.addingTimeInterval(86_400), now: now, lookback: .seconds(1))
                == Fixtures.t0.addingTimeInterval(23 * 86_400))
    }

    @Test("Only payouts not recorded are reconciled, each once, oldest first")
    func toReconcile() {
        let a = payout(settlement: 1, date: Fixtures.t0, reference: "AAAA")
        let b = payout(settlement: 2, date: Fixtures.t0.addingTimeInterval(60), reference: "BBBB")
        let c = payout(settlement: 3, date: Fixtures.t0, reference: "CCCC")
        #expect(SettlementSync.toReconcile([b, c, a, b], recorded: ["CCCC"]) == [a, b])
    }

    @Test("A failed sync is retried with backoff, after Klarna's reset when it gave one, never later than the interval")
    func retry() {
        let random = SeededRandomSource(seed: 1)
        let interval = Duration.seconds(3_600)
        for failures in 1...20 {
            let delay = SettlementSync.retryDelay(afterFailures: failures, disposition: .retry(notBefore: nil), interval: interval, random: random)
            #expect(delay >= SettlementSync.retryMinimumDelay && delay <= interval)
        }
        let limited = SettlementSync.retryDelay(afterFailures: 1, disposition: .retry(notBefore: .seconds(120)), interval: interval, random: random)
        #expect(limited >= .seconds(120) && limited <= .seconds(150))
        #expect(
            SettlementSync.retryDelay(afterFailures: 1, disposition: .retry(notBefore: .seconds(7_200)), interval: interval, random: random)
                == interval)
        #expect(SettlementSync.retryDelay(afterFailures: 1, disposition: .doNotRetry, interval: interval, random: random) == interval)
    }
}
