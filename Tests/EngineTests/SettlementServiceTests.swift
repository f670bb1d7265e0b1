import Foundation
import KlarnaAPI
import KlarnaSandbox
import Logging
import SQLiteBackend
import ServiceLifecycle
import Synchronization
import Testing
import TestSupport
@testable import Engine
@testable import ReconcilerCore
import ReconcilerStore

/// The settlement service against the sandbox over real sockets, with a real SQLite store whose ledger the engine
/// filled by capturing, on one manual clock: each sync driven directly. Every match and mismatch class ends as its
/// outcome exactly once, across pages, outages and a restart in the middle of a sync.
@Suite("Settlement service")
struct SettlementServiceTests {
    static let settings = SettlementSettings(
        enabled: true, syncInterval: .seconds(3_600), settleWithinDays: 7, firstSyncLookback: .seconds(30 * 86_400))

    @Test(
        "A payout that pays what the daemon captured is recorded without a finding, every call at background urgency; the next sync skips it, and its captures never become overdue"
    )
    func matchedPayout() async throws {
        try await EngineHarness.with { h in
            _ = try await h.paidOrders([20_000, 12_000])
            let reference = try #require(try h.sandbox.settle().first?.paymentReference)
            let served = ServedUrgencies()
            let limiter = RateLimiter(ratePerSecond: 1_000, burst: 1_000, clock: h.clock) { urgency, _ in served.add(urgency) }
            let service = h.settlementService(rateLimiter: limiter)
            let requests = h.sandbox.requests().count

            let first = try await service.sync()
            #expect(first.listed == 1 && first.reconciled == 1 && first.findingOutcomes == 0 && first.drift == 0)
            #expect(try await h.settlementOutcomes().isEmpty)
            #expect(served.urgencies.count == h.sandbox.requests().count - requests)
            #expect(served.urgencies.allSatisfy { $0 == .background })
            let reconciled = h.logs.all.filter { $0.contains("message_id=\(MessageID.payoutReconciled.rawValue)") }
            #expect(reconciled.count == 1)
            #expect(reconciled.first?.contains("payment_reference=\(reference)") == true)
            #expect(reconciled.first?.contains("lines=4 matched=4") == true)

            let again = try await service.sync()
            #expect(again.listed == 1 && again.reconciled == 0)
            h.clock.advance(by: .seconds(30 * 86_400))
            #expect(try await service.sync().unsettledFlagged == 0)
            #expect(try await h.settlementOutcomes().isEmpty)
            let health = try await h.store.settlementHealth(account: .default)
            #expect(health.payouts == 1 && health.unsettledFlagged == 0)
        }
    }

    @Test(
        "Switched on for a store with history: a capture older than the syncs' reach is never flagged (a payout no sync listed may have paid it); one captured since is, once, after settle_within_days"
    )
    func historyBeforeTheReach() async throws {
        try await EngineHarness.with { h in
            let old = try await h.paidOrders([15_000])
            h.clock.advance(by: .seconds(60 * 86_400))
            let recent = try await h.paidOrders([7_000])
            let service = h.settlementService()
            #expect(try await service.sync().unsettledFlagged == 0)
            h.clock.advance(by: .seconds(8 * 86_400))
            #expect(try await service.sync().unsettledFlagged == 1)
            #expect(try await service.sync().unsettledFlagged == 0)
            let outcomes = try await h.settlementOutcomes()
            #expect(outcomes.map(\.kind) == [.captureUnsettled])
            #expect(outcomes.first?.orderID == recent.first)
            #expect(outcomes.first?.orderID != old.first)
        }
    }

    @Test(
        "Every class in one payout, each outcome once: an amount that differs, an orphan, a capture and a refund made in the Merchant Portal (drift, from one order read each, then matched), a reversal, totals off by one; a capture never paid becomes capture_unsettled after settle_within_days, once"
    )
    func everyClassOnce() async throws {
        try await EngineHarness.with { h in
            let captured = try await h.paidOrders([20_000, 12_000, 9_000, 6_000])
            let (fine, altered, neverPaid, portalRefunded) = (captured[0], captured[1], captured[2], captured[3])
            let portalCaptured = try #require(try await h.paidOrders([10_000], capture: .never).first)

            try h.sandbox.alterSettledAmount(captureID: try h.captureID(of: altered), by: 100)
            try h.sandbox.omitFromSettlement(captureID: try h.captureID(of: neverPaid))
            let orphan = try h.sandbox.inventTransaction(amount: 4_200, currency: "SEK")
            let portalCapture = try h.sandbox.portalCapture(order: portalCaptured, amount: 10_000)
            let portalRefund = try h.sandbox.portalRefund(order: portalRefunded, amount: 1_500)
            try h.sandbox.breakTotals(by: 1)
            let reference = try #require(try h.sandbox.settle(PayoutSpec(reversals: [fine: 2_000])).first?.paymentReference)

            let service = h.settlementService()
            let reads = h.sandbox.requests(route: "om.read_order").count
            let first = try await service.sync()
            #expect(first.reconciled == 1 && first.drift == 2 && first.findingOutcomes == 4)
            #expect(h.sandbox.requests(route: "om.read_order").count - reads == 2, "one read per order with drift")

            let outcomes = try await h.settlementOutcomes()
            #expect(outcomes.count == 6, "\(outcomes.map(\.reason))")
            #expect(Set(outcomes.map(\.paymentReference)) == [reference])
            func only(_ finding: SettlementFindingKind) throws -> Outcome {
                let found = outcomes.filter { $0.finding == finding }
                #expect(found.count == 1, "\(finding): \(found.map(\.reason))")
                return try #require(found.first)
            }
            let mismatch = try only(.amountMismatch)
            #expect(mismatch.kind == .settlementMismatch && mismatch.orderID == altered)
            #expect(mismatch.amount == 12_100 && mismatch.expectedAmount == 12_000)
            #expect(try only(.orphan).kind == .settlementOrphan)
            #expect(try only(.orphan).orderID == orphan)
            let capturedOutside = try only(.unknownCapture)
            #expect(capturedOutside.kind == .settlementDrift)
            #expect(capturedOutside.orderID == portalCaptured && capturedOutside.captureID == portalCapture && capturedOutside.amount == 10_000)
            let refundedOutside = try only(.unknownRefund)
            #expect(refundedOutside.kind == .settlementDrift)
            #expect(refundedOutside.orderID == portalRefunded && refundedOutside.refundID == portalRefund && refundedOutside.amount == 1_500)
            let reversal = try only(.reversal)
            #expect(reversal.kind == .settlementReversal && reversal.orderID == fine && reversal.amount == 2_000)
            #expect(try only(.totalsMismatch).kind == .payoutMismatch)
            // The drift was recorded before the payout, so the portal's SALE and RETURN matched what it observed: only
            // the orphan's SALE and FEE are left unmatched.
            let reconciled = try #require(h.logs.all.first { $0.contains("message_id=\(MessageID.payoutReconciled.rawValue)") })
            #expect(reconciled.contains("lines=12 matched=10") && reconciled.contains("unmatched=2"), "\(reconciled)")
            #expect(h.logs.all.filter { $0.contains("message_id=\(MessageID.settlementDrift.rawValue)") }.count == 2)
            #expect(h.logs.all.filter { $0.contains("message_id=\(MessageID.settlementOrphan.rawValue)") }.count == 1)

            let again = try await service.sync()
            #expect(again.reconciled == 0 && again.drift == 0 && again.unsettledFlagged == 0)
            #expect(h.sandbox.requests(route: "om.read_order").count - reads == 2)

            h.clock.advance(by: .seconds(8 * 86_400))
            #expect(try await service.sync().unsettledFlagged == 1)
            #expect(try await service.sync().unsettledFlagged == 0)
            let unsettled = try await h.settlementOutcomes().filter { $0.kind == .captureUnsettled }
            #expect(unsettled.count == 1)
            let neverPaidCapture = try h.captureID(of: neverPaid)
            #expect(unsettled.first?.orderID == neverPaid)
            #expect(unsettled.first?.captureID == neverPaidCapture)
            #expect(try await h.settlementOutcomes().count == 7)
            #expect(try await h.store.settlementHealth(account: .default).unsettledFlagged == 1)
        }
    }

    @Test("Payouts and transactions read two at a time come whole: three payouts of 6, 4 and 8 lines in 2 + 9 pages, every line matched")
    func pagination() async throws {
        try await EngineHarness.with { h in
            for amounts in [[10_000, 11_000, 12_000], [13_000, 14_000], [15_000, 16_000, 17_000, 18_000]] {
                _ = try await h.paidOrders(amounts)
                _ = try h.sandbox.settle()
            }
            let service = h.settlementService(pageSize: 2)
            let payoutPages = h.sandbox.requests(route: "settlements.list_payouts").count
            let transactionPages = h.sandbox.requests(route: "settlements.list_transactions").count
            let report = try await service.sync()
            #expect(report.listed == 3 && report.reconciled == 3 && report.findingOutcomes == 0)
            #expect(h.sandbox.requests(route: "settlements.list_payouts").count - payoutPages == 2)
            #expect(h.sandbox.requests(route: "settlements.list_transactions").count - transactionPages == 9)
            let reconciled = h.logs.all.filter { $0.contains("message_id=\(MessageID.payoutReconciled.rawValue)") }
            #expect(reconciled.count == 3)
            for lines in [6, 4, 8] {
                #expect(reconciled.filter { $0.contains("lines=\(lines) matched=\(lines)") && $0.contains("unmatched=0") }.count == 1)
            }
            #expect(try await h.settlementOutcomes().isEmpty)
        }
    }

    @Test(
        "An outage of the Settlements API (503, a reset in the middle of a walk, a 429 whose reset every caller waits for) fails each sync with nothing recorded; the sync after records everything, each outcome once"
    )
    func outage() async throws {
        try await EngineHarness.with { h in
            _ = try await h.paidOrders([10_000, 11_000, 12_000])
            let orphan = try h.sandbox.inventTransaction(amount: 4_200, currency: "SEK")
            _ = try h.sandbox.settle()
            let limiter = RateLimiter(ratePerSecond: 100, burst: 100, clock: h.clock)
            let service = h.settlementService(rateLimiter: limiter, pageSize: 2)

            h.sandbox.addFault(SandboxFault(route: "settlements.list_payouts", kind: .status, status: 503, count: 1))
            let unavailable = try await #require(throws: KlarnaAPIError.self) { _ = try await service.sync() }
            #expect(unavailable.status == 503)
            #expect(SettlementService.disposition(of: unavailable) == .retry(notBefore: nil))

            // Every page after the first is reset (libcurl sends a read again by itself once): the walk fails whole.
            h.sandbox.addFault(SandboxFault(route: "settlements.list_transactions", kind: .reset, count: nil, skip: 1))
            let reset = try await #require(throws: KlarnaAPIError.self) { _ = try await service.sync() }
            #expect(reset.status == nil)
            h.sandbox.clearFaults()

            h.sandbox.addFault(SandboxFault(route: "settlements.list_transactions", kind: .rateLimit, resetSeconds: 2, count: 1))
            let limited = try await #require(throws: KlarnaAPIError.self) { _ = try await service.sync() }
            #expect(limited.status == 429)
            #expect(SettlementService.disposition(of: limited) == .retry(notBefore: .seconds(2)))
            #expect(try await h.store.settlementHealth(account: .default).payouts == 0)
            #expect(try await h.settlementOutcomes().isEmpty)

            // The 429 paused the budget until Klarna's reset: the next sync waits for it before any call.
            let listed = h.sandbox.requests(route: "settlements.list_payouts").count
            let retried = Task { try await service.sync() }
            try await waitUntil { limiter.waiting == 1 && h.clock.sleeperCount >= 1 }
            #expect(h.sandbox.requests(route: "settlements.list_payouts").count == listed)
            h.clock.advance(by: .seconds(3))
            let report = try await retried.value
            #expect(report.reconciled == 1 && report.findingOutcomes == 1)
            #expect(try await h.settlementOutcomes().map(\.orderID) == [orphan])
            #expect(try await service.sync().reconciled == 0)
            #expect(try await h.settlementOutcomes().count == 1)
        }
    }

    @Test(
        "A restart in the middle of a sync: the first payout is recorded, the second fails; a new service on the same store file records the second, each outcome once"
    )
    func restartMidSync() async throws {
        try await EngineHarness.with { h in
            _ = try await h.paidOrders([10_000])
            let firstOrphan = try h.sandbox.inventTransaction(amount: 4_200, currency: "SEK")
            _ = try h.sandbox.settle()
            _ = try await h.paidOrders([11_000])
            let secondOrphan = try h.sandbox.inventTransaction(amount: 5_300, currency: "SEK")
            _ = try h.sandbox.settle()

            // The first payout's transactions come; every read after them fails.
            h.sandbox.addFault(SandboxFault(route: "settlements.list_transactions", kind: .status, status: 503, count: nil, skip: 1))
            await #expect(throws: KlarnaAPIError.self) { _ = try await h.settlementService().sync() }
            #expect(try await h.settlementOutcomes().map(\.orderID) == [firstOrphan])
            h.sandbox.clearFaults()

            let reopened = try SQLiteStore(path: try #require(h.store as? SQLiteStore).path)
            let restarted = h.settlementService(store: reopened)
            let report = try await restarted.sync()
            #expect(report.listed == 2 && report.reconciled == 1 && report.findingOutcomes == 1)
            #expect(try await h.settlementOutcomes(in: reopened).map(\.orderID) == [firstOrphan, secondOrphan])
            #expect(try await restarted.sync().reconciled == 0)
            #expect(try await h.settlementOutcomes(in: reopened).count == 2)
            #expect(try await reopened.settlementHealth(account: .default).payouts == 2)
        }
    }

    @Test(
        "An order read during the sync: a 503 fails the sync with nothing recorded; an order Klarna will not show (403), and a held one (never read), leave their lines' findings, recorded once"
    )
    func orderReadsInTheSync() async throws {
        try await EngineHarness.with { h in
            let orders = try await h.paidOrders([10_000, 11_000], capture: .never)
            let (refused, held) = (orders[0], orders[1])
            let portalCapture = try h.sandbox.portalCapture(order: refused, amount: 10_000)
            _ = try h.sandbox.portalCapture(order: held, amount: 11_000)
            _ = try h.sandbox.settle()
            var hold = Change()
            hold.holds = [(.order(held), by: "alice")]
            try await h.store.commit(hold, at: h.clock.now)
            let service = h.settlementService()
            let reads = h.sandbox.requests(route: "om.read_order").count

            h.sandbox.addFault(SandboxFault(route: "om.read_order", kind: .status, status: 503, count: 1))
            let unavailable = try await #require(throws: KlarnaAPIError.self) { _ = try await service.sync() }
            #expect(unavailable.status == 503)
            #expect(try await h.store.settlementHealth(account: .default).payouts == 0)
            #expect(try await h.settlementOutcomes().isEmpty)

            h.sandbox.addFault(SandboxFault(route: "om.read_order", kind: .status, status: 403, count: nil))
            let report = try await service.sync()
            #expect(report.reconciled == 1 && report.drift == 0)
            // The 503 and the 403: the held order was never read.
            #expect(h.sandbox.requests(route: "om.read_order").count - reads == 2)
            let outcomes = try await h.settlementOutcomes()
            #expect(outcomes.map(\.finding) == [.unknownCapture, .unknownCapture])
            #expect(Set(outcomes.map(\.orderID)) == [refused, held])
            #expect(outcomes.first { $0.orderID == refused }?.captureID == portalCapture)
            #expect(h.logs.all.contains { $0.contains("order \(held) is held") })
            #expect(try await service.sync().reconciled == 0)
            #expect(try await h.settlementOutcomes().count == 2)
        }
    }

    @Test(
        "A payout matched while another daemon recorded one settling the same capture is matched again: the duplicate settlement is found, the payout recorded once"
    )
    func staleMatchIsMatchedAgain() async throws {
        try await EngineHarness.with { h in
            let order = try #require(try await h.paidOrders([10_000]).first)
            let paid = try #require(try h.sandbox.settle().first)
            let store = RecordsAnotherPayoutFirst(store: h.store)
            let service = h.settlementService(store: nil, settlementStore: store)
            store.before = {
                // Another daemon records a payout of its own that settles the same capture, after this one read the
                // ledger and before it records.
                let capture = try #require(try await h.store.ledger(orderIDs: [order], account: .default)[order]?.captures.first)
                let line = SettledLine(
                    paymentReference: "OTHER", ordinal: 1, kind: .sale, amount: 10_000, orderID: order, captureID: capture.captureID,
                    currency: paid.currencyCode)
                let other = SettlementMatcher.reconcile(
                    payout: SettledPayout(
                        paymentReference: "OTHER", payoutDate: paid.payoutDate, currency: paid.currencyCode, settlementType: "NET",
                        totals: SettledTotals(saleAmount: 10_000, settlementAmount: 10_000)),
                    lines: [line], orders: try await h.store.ledger(orderIDs: [order], account: .default))
                #expect(try await h.store.record(other, outcomes: [], at: h.clock.now))
            }
            let report = try await service.sync()
            #expect(report.reconciled == 1)
            #expect(store.records == 2, "refused once as stale, then recorded")
            let outcomes = try await h.settlementOutcomes()
            #expect(outcomes.map(\.finding) == [.duplicateSettlement])
            #expect(outcomes.first?.paymentReference == paid.paymentReference)
            let settled = try await h.store.ledger(orderIDs: [order], account: .default)[order]?.captures.first?.settledBy
            #expect(settled?.paymentReference == "OTHER")
        }
    }

    @Test("Run: a sync at start that fails is tried again after a backoff no longer than the interval; graceful shutdown stops the service at once")
    func runRetriesAndStops() async throws {
        try await EngineHarness.with { h in
            _ = try await h.paidOrders([10_000])
            _ = try h.sandbox.settle()
            h.sandbox.addFault(SandboxFault(route: "settlements.list_payouts", kind: .status, status: 503, count: 1))
            let service = h.settlementService()
            let group = ServiceGroup(configuration: .init(services: [.init(service: service)], logger: Logger(label: "test")))
            let running = Task { try await group.run() }

            let failed = "message_id=\(MessageID.settlementSyncFailed.rawValue)"
            try await waitUntil { h.logs.all.contains { $0.contains(failed) } && h.clock.sleeperCount >= 1 }
            #expect(try await h.store.settlementHealth(account: .default).payouts == 0)
            h.clock.advance(by: Self.settings.syncInterval)
            try await waitUntil { try await h.store.settlementHealth(account: .default).payouts == 1 && h.clock.sleeperCount >= 1 }

            await group.triggerGracefulShutdown()
            try await running.value
            #expect(h.logs.all.filter { $0.contains(failed) }.count == 1)
            #expect(h.sandbox.requests(route: "settlements.list_payouts").count == 2)
        }
    }
}

extension EngineHarness {
    static let completesSoon = [ScheduleStep(afterSeconds: 5, status: "IN_PROGRESS"), ScheduleStep(afterSeconds: 30, status: "COMPLETED")]

    /// One payment per amount that the daemon tracks, places and, by `capture`, captures in full, run to its end
    /// (an hour of the clock): their order ids, in the order of `amounts`.
    func paidOrders(_ amounts: [Int], capture: CapturePolicy = .immediate) async throws -> [String] {
        var created: [CreatedSession] = []
        for amount in amounts {
            created.append(
                try await track(SessionSpec(orderAmount: amount, merchantReference: "shop-\(amount)", schedule: Self.completesSoon), capture: capture)
            )
        }
        try await run()
        var orderIDs: [String] = []
        for session in created { orderIDs.append(try await order(of: session).orderID) }
        return orderIDs
    }

    /// The capture the daemon made on `orderID`.
    func captureID(of orderID: String) throws -> String {
        try #require(effects(.captured, order: orderID).first?.captureId)
    }

    /// A settlement service on this harness's sandbox, clock and logs, over `store` (the harness's by default).
    func settlementService(
        store: (any ReconcilerStore)? = nil, settlementStore: (any SettlementStore)? = nil, rateLimiter: RateLimiter? = nil,
        pageSize: Int = KlarnaClient.settlementsMaxPageSize
    ) -> SettlementService {
        SettlementService(
            store: settlementStore ?? store ?? self.store, client: client, clock: clock, rateLimiter: rateLimiter,
            settings: SettlementServiceTests.settings, logger: logs.logger(), random: SeededRandomSource(seed: 5),
            pageSize: pageSize)
    }

    /// Every settlement outcome recorded in `store` (the harness's by default), oldest first.
    func settlementOutcomes(in store: (any ReconcilerStore)? = nil) async throws -> [Outcome] {
        try await (store ?? self.store).undeliveredOutcomes(now: clock.now, limit: 10_000).map(\.outcome).filter(\.kind.isSettlement)
    }
}

/// The urgencies a rate limiter served, in order.
final class ServedUrgencies: Sendable {
    private let served = Mutex<[Urgency]>([])
    var urgencies: [Urgency] { served.withLock { $0 } }
    func add(_ urgency: Urgency) { served.withLock { $0.append(urgency) } }
}

/// The harness's store, with `before` run once just before the first `record` (another daemon's write in between
/// this one's ledger read and its record), counting the records asked for.
final class RecordsAnotherPayoutFirst: SettlementStore, @unchecked Sendable {
    let store: any SettlementStore
    private let state = Mutex<(before: (@Sendable () async throws -> Void)?, records: Int)>((nil, 0))
    var before: (@Sendable () async throws -> Void)? {
        get { state.withLock { $0.before } }
        set { state.withLock { $0.before = newValue } }
    }
    var records: Int { state.withLock { $0.records } }

    init(store: any SettlementStore) { self.store = store }

    func record(_ reconciliation: PayoutReconciliation, outcomes: [Outcome], at: Date) async throws -> Bool {
        let first = state.withLock { state in
            defer { state.before = nil; state.records += 1 }
            return state.before
        }
        try await first?()
        return try await store.record(reconciliation, outcomes: outcomes, at: at)
    }

    func recordedPayouts(among references: [String]) async throws -> Set<String> { try await store.recordedPayouts(among: references) }
    func ledger(orderIDs: [String], account: AccountID) async throws -> [String: LedgerOrder] {
        try await store.ledger(orderIDs: orderIDs, account: account)
    }
    func recordDrift(_ entries: [DriftEntry], at: Date) async throws -> Int { try await store.recordDrift(entries, at: at) }
    func unsettledCaptures(account: AccountID, capturedFrom: Date, capturedBefore: Date, limit: Int) async throws -> [LedgerCapture] {
        try await store.unsettledCaptures(account: account, capturedFrom: capturedFrom, capturedBefore: capturedBefore, limit: limit)
    }
    func flagUnsettled(_ flags: [UnsettledFlag], at: Date) async throws -> Int { try await store.flagUnsettled(flags, at: at) }
    func settlementHealth(account: AccountID) async throws -> SettlementHealth { try await store.settlementHealth(account: account) }
    func heldOrders(among orderIDs: [String]) async throws -> Set<String> { try await store.heldOrders(among: orderIDs) }
}
