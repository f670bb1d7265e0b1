import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore
import ReconcilerStore

/// Where the engine looks for an order Klarna placed while the daemon lost the answer: notifications for orders the
/// store does not track, and settlement lines by merchant reference; the same on SQLite and PostgreSQL.
@Suite("Store conformance: clues to a placed order")
struct PlacedOrderCluesConformanceTests {
    func notification(_ orderID: String, _ eventType: String = "FRAUD_RISK_ACCEPTED") -> IngestRecord {
        IngestRecord(
            dedupeKey: "\(RetentionPolicy.omNotificationKeyPrefix)\(orderID):\(eventType)", kind: RetentionPolicy.omNotificationKind,
            source: "socket", summary: "OM notification \(eventType) for order \(orderID)", action: .hintOrder(orderID: orderID))
    }

    @Test(
        "Notifications for untracked orders received since a time, newest first, at most the limit; tracked orders' are left out",
        arguments: Backend.allCases)
    func notifiedOrders(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            var change = Change()
            change.newOrders = [Fixtures.order("o-known", policy: .immediate)]
            try await s.store.commit(change, at: Fixtures.t0)
            _ = try await s.store.ingest(notification("o-old"), at: Fixtures.t0.addingTimeInterval(-60))
            _ = try await s.store.ingest(notification("o-known"), at: Fixtures.t0.addingTimeInterval(1))
            _ = try await s.store.ingest(notification("o-1"), at: Fixtures.t0.addingTimeInterval(2))
            _ = try await s.store.ingest(notification("o:2", "FRAUD_RISK_STOPPED"), at: Fixtures.t0.addingTimeInterval(3))
            _ = try await s.store.ingest(notification("o-3"), at: Fixtures.t0.addingTimeInterval(4))
            try await s.store.recordRejection(
                source: "socket", status: 405, error: "method_not_allowed", detail: "not a notification", at: Fixtures.t0.addingTimeInterval(5))

            #expect(try await s.store.untrackedNotifiedOrders(since: Fixtures.t0, limit: 10) == ["o-3", "o:2", "o-1"])
            #expect(try await s.store.untrackedNotifiedOrders(since: Fixtures.t0, limit: 2) == ["o-3", "o:2"])
            #expect(
                try await s.store.untrackedNotifiedOrders(since: Fixtures.t0.addingTimeInterval(-120), limit: 10) == ["o-3", "o:2", "o-1", "o-old"])
            #expect(try await s.store.untrackedNotifiedOrders(since: Fixtures.t0.addingTimeInterval(10), limit: 10).isEmpty)
        }
    }

    func line(_ payout: String, _ ordinal: Int, order: String, reference: String?) -> SettledLine {
        SettledLine(
            paymentReference: payout, ordinal: ordinal, kind: .sale, amount: 1_000, orderID: order, currency: "EUR", merchantReference: reference)
    }
    func payout(_ reference: String, day: Int, _ lines: [SettledLine]) -> PayoutReconciliation {
        let totals = SettledTotals(saleAmount: lines.count * 1_000, settlementAmount: lines.count * 1_000)
        return PayoutReconciliation(
            payout: SettledPayout(
                paymentReference: reference, payoutDate: Fixtures.t0.addingTimeInterval(Double(day) * 86_400), currency: "EUR", settlementType: "NET",
                totals: totals),
            lines: lines.map { LineReconciliation(line: $0, signedAmount: $0.amount, match: .unmatched(.orderUnknown), note: "orphan") },
            findings: [], fromLines: PayoutFigures(lines: lines, totals: totals), totals: PayoutFigures(totals: totals))
    }

    @Test("Settlement lines by merchant reference, of one account's payouts, newest payout first, at most the limit", arguments: Backend.allCases)
    func linesByReference(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            let older = line("PAY-1", 1, order: "o-1", reference: "shop-7")
            let newer = line("PAY-2", 2, order: "o-2", reference: "shop-7")
            let first = payout(
                "PAY-1", day: 1, [older, line("PAY-1", 2, order: "o-3", reference: "shop-8"), line("PAY-1", 3, order: "o-4", reference: nil)])
            let recorded = [
                try await s.store.record(first, outcomes: [], at: Fixtures.t0),
                try await s.store.record(payout("PAY-2", day: 2, [newer]), outcomes: [], at: Fixtures.t0),
            ]
            #expect(recorded == [true, true])

            #expect(try await s.store.settlementLines(merchantReference: "shop-7", account: .default, limit: 10) == [newer, older])
            #expect(try await s.store.settlementLines(merchantReference: "shop-7", account: .default, limit: 1) == [newer])
            #expect(try await s.store.settlementLines(merchantReference: "shop-9", account: .default, limit: 10).isEmpty)
            // Another account's payout with the same reference is no clue to this account's orders, nor the reverse.
            let us = try #require(AccountID(rawValue: "us"))
            var usPayout = payout("PAY-3", day: 3, [line("PAY-3", 1, order: "o-9", reference: "shop-7")])
            usPayout.account = us
            #expect(try await s.store.record(usPayout, outcomes: [], at: Fixtures.t0))
            #expect(try await s.store.settlementLines(merchantReference: "shop-7", account: .default, limit: 10) == [newer, older])
            #expect(try await s.store.settlementLines(merchantReference: "shop-7", account: us, limit: 10).map(\.orderID) == ["o-9"])
        }
    }
}
