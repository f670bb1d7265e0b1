import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore
import ReconcilerStore

/// What every store promises of settlements, checked on SQLite and on PostgreSQL, test for test: the ledger from the
/// steps' commits and from drift, payouts recorded once with their lines and outcomes, settlements and flags written
/// only where none is, and the reports. The store only writes and filters what it is given: the payouts here are
/// matched by hand, not by the matcher.
@Suite("Store conformance: settlements")
struct SettlementConformanceTests {
    func order(_ id: String, currency: String? = "EUR", reference: String? = nil, session: String? = nil) -> TrackedOrder {
        Fixtures.order(id, session: session, reference: reference, policy: .immediate, currency: currency)
    }

    func capture(_ order: String, _ id: String?, _ amount: Int, at seconds: TimeInterval = 0, source: LedgerSource = .daemon) -> LedgerCapture {
        LedgerCapture(
            orderID: order, captureID: id, amount: amount, currency: "EUR", capturedAt: Fixtures.t0.addingTimeInterval(seconds), source: source)
    }

    func day(_ count: Int) -> Date { Fixtures.t0.addingTimeInterval(TimeInterval(count) * 86_400) }

    /// Orders placed and captures confirmed, as the engine's steps commit them.
    func place(_ store: any ReconcilerStore, _ orders: [TrackedOrder], captures: [LedgerCapture] = []) async throws {
        var change = Change()
        change.newOrders = orders
        change.ledgerCaptures = captures
        try await store.commit(change, at: Fixtures.t0)
    }

    func sale(_ reference: String, _ ordinal: Int, order: String?, capture: String?, amount: Int) -> SettledLine {
        SettledLine(paymentReference: reference, ordinal: ordinal, kind: .sale, amount: amount, orderID: order, captureID: capture, currency: "EUR")
    }

    /// A payout of `lines` paid on `day`, each line with the match given.
    func payout(
        _ reference: String, day payoutDay: Int, _ lines: [(SettledLine, LineMatch)], findings: [SettlementFinding] = []
    ) -> PayoutReconciliation {
        let totals = SettledTotals(saleAmount: lines.reduce(0) { $0 + $1.0.amount }, settlementAmount: lines.reduce(0) { $0 + $1.0.amount })
        let settled = SettledPayout(paymentReference: reference, payoutDate: day(payoutDay), currency: "EUR", settlementType: "NET", totals: totals)
        return PayoutReconciliation(
            payout: settled,
            lines: lines.map { LineReconciliation(line: $0.0, signedAmount: $0.0.signedAmount, match: $0.1, note: "matched by hand") },
            findings: findings, fromLines: PayoutFigures(lines: lines.map { $0.0 }, totals: totals), totals: PayoutFigures(totals: totals))
    }

    func settles(_ capture: LedgerCapture) -> LineMatch { .capture(capture.key, byAmount: false) }

    func finding(_ text: String, order: String? = nil) -> Outcome {
        Outcome(kind: .settlementMismatch, reason: text, orderID: order)
    }

    func undelivered(_ store: any ReconcilerStore) async throws -> [Outcome] {
        try await store.undeliveredOutcomes(now: day(100), limit: 1_000).map(\.outcome)
    }

    @Test("The ledger keeps each capture a step confirmed once, and answers the orders the store knows", arguments: Backend.allCases)
    func ledgerFromCommits(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            let first = capture("o-1", "cap-1", 1_000)
            let idless = capture("o-1", nil, 500, at: 10.25)
            try await place(s.store, [order("o-1", reference: "shop-1"), order("o-2", currency: "SEK")], captures: [first])
            // A commit retried after a lost answer carries the same capture again.
            var again = Change()
            again.ledgerCaptures = [first, idless, idless]
            try await s.store.commit(again, at: Fixtures.t0)
            let ledger = try await s.store.ledger(orderIDs: ["o-1", "o-2", "o-unknown", "o-1"], account: .default)
            #expect(
                ledger == [
                    "o-1": LedgerOrder(orderID: "o-1", merchantReference: "shop-1", currency: "EUR", captures: [first, idless]),
                    "o-2": LedgerOrder(orderID: "o-2", currency: "SEK"),
                ])
            #expect(try await s.store.ledger(orderIDs: [], account: .default).isEmpty)
        }
    }

    @Test(
        "A payout is recorded once: its lines, settledBy on what it settled, its outcomes; a second record writes nothing; a payout matched before another settled its capture is refused whole as stale",
        arguments: Backend.allCases)
    func recordOnce(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            let cap1 = capture("o-1", "cap-1", 1_000), cap2 = capture("o-2", "cap-2", 2_000, at: 1)
            try await place(s.store, [order("o-1"), order("o-2")], captures: [cap1, cap2])
            let refund = LedgerRefund(orderID: "o-1", refundID: "ref-1", amount: 300, at: Fixtures.t0.addingTimeInterval(2), source: .observed)
            #expect(
                try await s.store.recordDrift([DriftEntry(.refund(refund), outcome: finding("refund outside", order: "o-1"))], at: Fixtures.t0) == 1)
            let returned = SettledLine(
                paymentReference: "PAY-1", ordinal: 1, kind: .return, amount: 300, orderID: "o-1", refundID: "ref-1", currency: "EUR")
            let orphan = sale("PAY-1", 2, order: "o-9", capture: nil, amount: 900)
            let first = payout(
                "PAY-1", day: 3,
                [
                    (sale("PAY-1", 0, order: "o-1", capture: "cap-1", amount: 1_000), settles(cap1)),
                    (returned, .refund(refund.key, byAmount: false)),
                    (orphan, .unmatched(.orderUnknown)),
                ],
                findings: [SettlementFinding(kind: .orphan, paymentReference: "PAY-1", lineOrdinals: [2], orderID: "o-9", reason: "o-9 is unknown")])
            let outcomes = [Outcome(kind: .settlementOrphan, reason: "o-9 is unknown", orderID: "o-9", paymentReference: "PAY-1", finding: .orphan)]
            let before = try await undelivered(s.store)

            #expect(try await s.store.record(first, outcomes: outcomes, at: day(3)))
            #expect(try await s.store.record(first, outcomes: outcomes, at: day(4)) == false)
            #expect(try await undelivered(s.store) == before + outcomes)
            #expect(try await s.store.payouts(since: nil, paymentReference: nil, account: nil) == [first])
            #expect(try await s.store.settlementLines(orderIDs: ["o-9"]).map(\.line) == [orphan])
            let ledger = try await s.store.ledger(orderIDs: ["o-1", "o-2"], account: .default)
            #expect(ledger["o-1"]?.captures.map(\.settledBy) == [SettledLineKey(paymentReference: "PAY-1", ordinal: 0)])
            #expect(ledger["o-1"]?.refunds.map(\.settledBy) == [SettledLineKey(paymentReference: "PAY-1", ordinal: 1)])
            #expect(ledger["o-2"]?.captures.map(\.settledBy) == [nil])

            // A later payout matched while cap-1 was unsettled (another daemon's ledger read, before PAY-1 was
            // recorded) is stale: refused whole, nothing of it written, so it is matched again.
            var stale = payout(
                "PAY-2", day: 5,
                [
                    (sale("PAY-2", 0, order: "o-2", capture: "cap-2", amount: 2_000), settles(cap2)),
                    (sale("PAY-2", 1, order: "o-1", capture: "cap-1", amount: 1_000), settles(cap1)),
                ])
            await #expect(throws: StaleSettlementMatch.self) { try await s.store.record(stale, outcomes: outcomes, at: day(5)) }
            #expect(try await s.store.recordedPayouts(among: ["PAY-2"]).isEmpty)
            #expect(try await undelivered(s.store) == before + outcomes)
            #expect(try await s.store.ledger(orderIDs: ["o-2"], account: .default)["o-2"]?.captures.map(\.settledBy) == [nil])

            // Matched again, it knows cap-1 was settled by PAY-1 (a duplicate): it leaves that settlement as it was.
            stale.lines[1].settledElsewhere = SettledLineKey(paymentReference: "PAY-1", ordinal: 0)
            #expect(try await s.store.record(stale, outcomes: [], at: day(5)))
            let after = try await s.store.ledger(orderIDs: ["o-1", "o-2"], account: .default)
            #expect(after["o-1"]?.captures.map(\.settledBy) == [SettledLineKey(paymentReference: "PAY-1", ordinal: 0)])
            #expect(after["o-2"]?.captures.map(\.settledBy) == [SettledLineKey(paymentReference: "PAY-2", ordinal: 0)])
        }
    }

    @Test(
        "A settlement write whose outcome cannot be written is undone whole: no payout, no settlement, no drift entry, no flag",
        arguments: Backend.allCases)
    func undoneWhole(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            let own = capture("o-1", "cap-1", 1_000)
            try await place(s.store, [order("o-1")], captures: [own])
            try await s.dropTable("outcomes")
            let paid = payout("PAY-1", day: 3, [(sale("PAY-1", 1, order: "o-1", capture: "cap-1", amount: 1_000), settles(own))])
            await #expect(throws: (any Error).self) { try await s.store.record(paid, outcomes: [finding("a finding")], at: day(3)) }
            let outside = capture("o-1", "cap-x", 300, at: 5, source: .observed)
            await #expect(throws: (any Error).self) {
                try await s.store.recordDrift([DriftEntry(.capture(outside), outcome: finding("outside"))], at: day(3))
            }
            await #expect(throws: (any Error).self) {
                try await s.store.flagUnsettled([UnsettledFlag(key: own.key, outcome: finding("unsettled"))], at: day(30))
            }
            #expect(try await s.store.recordedPayouts(among: ["PAY-1"]).isEmpty)
            let ledger = try await s.store.ledger(orderIDs: ["o-1"], account: .default)
            #expect(ledger["o-1"]?.captures == [own])
            #expect(try await s.store.unsettledCaptures(account: .default, capturedFrom: .distantPast, capturedBefore: day(30), limit: 10) == [own])
        }
    }

    @Test("Drift is recorded once, with its outcome only when the entry is new", arguments: Backend.allCases)
    func driftOnce(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            let own = capture("o-1", "cap-1", 1_000)
            try await place(s.store, [order("o-1")], captures: [own])
            let outside = capture("o-1", "cap-x", 300, at: 5, source: .observed)
            let refund = LedgerRefund(orderID: "o-1", refundID: nil, amount: 100, at: Fixtures.t0.addingTimeInterval(6), source: .observed)
            let entries = [
                DriftEntry(.capture(outside), outcome: finding("cap-x outside", order: "o-1")),
                DriftEntry(.refund(refund), outcome: finding("refund outside", order: "o-1")),
                // The daemon's own capture, seen on the read: the ledger has it.
                DriftEntry(.capture(capture("o-1", "cap-1", 1_000, source: .observed)), outcome: finding("not drift", order: "o-1")),
            ]
            #expect(try await s.store.recordDrift(entries, at: Fixtures.t0) == 2)
            #expect(try await s.store.recordDrift(entries, at: Fixtures.t0) == 0)
            #expect(try await undelivered(s.store).map(\.reason) == ["cap-x outside", "refund outside"])
            #expect(
                try await s.store.ledger(orderIDs: ["o-1"], account: .default)["o-1"]
                    == LedgerOrder(orderID: "o-1", currency: "EUR", captures: [own, outside], refunds: [refund]))
            #expect(try await s.store.recordDrift([], at: Fixtures.t0) == 0)
        }
    }

    @Test(
        "A capture is flagged unsettled once, never once settled; a flagged capture a payout settles later stops counting",
        arguments: Backend.allCases)
    func flagOnce(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            let late = capture("o-1", "cap-1", 1_000), settled = capture("o-1", "cap-2", 2_000, at: 1)
            try await place(s.store, [order("o-1")], captures: [late, settled])
            #expect(
                try await s.store.record(
                    payout("PAY-1", day: 2, [(sale("PAY-1", 0, order: "o-1", capture: "cap-2", amount: 2_000), settles(settled))]), outcomes: [],
                    at: day(2)))
            let flags = [
                UnsettledFlag(key: late.key, outcome: finding("cap-1 unsettled")),
                UnsettledFlag(key: settled.key, outcome: finding("cap-2 unsettled")),
            ]
            #expect(try await s.store.flagUnsettled(flags, at: day(10)) == 1)
            #expect(try await s.store.flagUnsettled(flags, at: day(11)) == 0)
            #expect(try await undelivered(s.store).map(\.reason) == ["cap-1 unsettled"])
            #expect(try await s.store.unsettledCaptures(account: .default, capturedFrom: .distantPast, capturedBefore: day(20), limit: 10).isEmpty)
            #expect(
                try await s.store.settlementHealth(account: .default)
                    == SettlementHealth(unsettledFlagged: 1, payouts: 1, newestPayoutDate: day(2), oldestPayoutDate: day(2)))

            #expect(
                try await s.store.record(
                    payout("PAY-2", day: 12, [(sale("PAY-2", 0, order: "o-1", capture: "cap-1", amount: 1_000), settles(late))]), outcomes: [],
                    at: day(12)))
            #expect(
                try await s.store.settlementHealth(account: .default)
                    == SettlementHealth(unsettledFlagged: 0, payouts: 2, newestPayoutDate: day(12), oldestPayoutDate: day(2)))
            #expect(
                try await s.store.ledger(orderIDs: ["o-1"], account: .default)["o-1"]?.captures.map(\.settledBy) == [
                    SettledLineKey(paymentReference: "PAY-2", ordinal: 0), SettledLineKey(paymentReference: "PAY-1", ordinal: 0),
                ])
        }
    }

    @Test(
        "Unsettled captures: captured from the lower bound up to and including the cutoff, oldest first, at most the limit",
        arguments: Backend.allCases)
    func unsettledCaptures(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            let c = capture("o-3", "cap-c", 300, at: 30), a = capture("o-1", "cap-a", 100, at: 10), b = capture("o-2", "cap-b", 200, at: 20)
            let idless = capture("o-1", nil, 400, at: 40)
            try await place(s.store, [order("o-1"), order("o-2"), order("o-3")], captures: [c, a, b, idless])
            #expect(try await s.store.settlementHealth(account: .default) == SettlementHealth(unsettledFlagged: 0, payouts: 0, newestPayoutDate: nil))
            #expect(
                try await s.store.unsettledCaptures(
                    account: .default, capturedFrom: .distantPast, capturedBefore: Fixtures.t0.addingTimeInterval(100), limit: 10) == [
                        a, b, c, idless,
                    ])
            #expect(
                try await s.store.unsettledCaptures(
                    account: .default, capturedFrom: .distantPast, capturedBefore: Fixtures.t0.addingTimeInterval(100), limit: 2) == [
                        a, b,
                    ])
            #expect(
                try await s.store.unsettledCaptures(
                    account: .default, capturedFrom: .distantPast, capturedBefore: Fixtures.t0.addingTimeInterval(20), limit: 10) == [
                        a, b,
                    ])
            #expect(
                try await s.store.unsettledCaptures(
                    account: .default, capturedFrom: .distantPast, capturedBefore: Fixtures.t0.addingTimeInterval(5), limit: 10
                ).isEmpty)
            #expect(
                try await s.store.unsettledCaptures(
                    account: .default, capturedFrom: Fixtures.t0.addingTimeInterval(20), capturedBefore: Fixtures.t0.addingTimeInterval(30), limit: 10
                ) == [b, c])
            #expect(try await s.store.flagUnsettled([UnsettledFlag(key: idless.key, outcome: finding("unsettled"))], at: day(9)) == 1)
            #expect(
                try await s.store.unsettledCaptures(
                    account: .default, capturedFrom: .distantPast, capturedBefore: Fixtures.t0.addingTimeInterval(100), limit: 10) == [
                        a, b, c,
                    ])
        }
    }

    @Test(
        "Accounts: each account's payouts, ledger, unsettled captures and health are its own; a pruned order's captures are every account's",
        arguments: Backend.allCases)
    func byAccount(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            let us = try #require(AccountID(rawValue: "us"))
            var usOrder = order("o-us", currency: "USD")
            usOrder.account = us
            let eu = capture("o-eu", "cap-eu", 1_000), usCapture = capture("o-us", "cap-us", 2_000, at: 1)
            // An order retention pruned since: its ledger rows stay, its order row is gone.
            let pruned = capture("o-gone", "cap-gone", 300, at: 2)
            try await place(s.store, [order("o-eu"), usOrder], captures: [eu, usCapture, pruned])
            var usPayout = payout("PAY-US", day: 4, [(sale("PAY-US", 0, order: "o-us", capture: "cap-us", amount: 2_000), settles(usCapture))])
            usPayout.account = us
            let euPayout = payout("PAY-EU", day: 2, [(sale("PAY-EU", 0, order: "o-eu", capture: "cap-eu", amount: 1_000), settles(eu))])
            #expect(try await s.store.record(usPayout, outcomes: [], at: day(4)))
            #expect(try await s.store.record(euPayout, outcomes: [], at: day(4)))

            #expect(try await s.store.payouts(since: nil, paymentReference: nil, account: us) == [usPayout])
            #expect(try await s.store.payouts(since: nil, paymentReference: nil, account: .default) == [euPayout])
            #expect(try await s.store.payouts(since: nil, paymentReference: nil, account: nil).map(\.account) == [.default, us])
            #expect(
                try await s.store.settlementHealth(account: us)
                    == SettlementHealth(unsettledFlagged: 0, payouts: 1, newestPayoutDate: day(4), oldestPayoutDate: day(4)))
            #expect(try await s.store.settlementHealth(account: .default).newestPayoutDate == day(2))
            #expect(
                try await s.store.settlementHealth(account: AccountID(rawValue: "oc")!)
                    == SettlementHealth(unsettledFlagged: 0, payouts: 0, newestPayoutDate: nil))
            // Another account's order is an orphan's line here, never matched against its captures.
            #expect(try await s.store.ledger(orderIDs: ["o-eu", "o-us", "o-gone"], account: us).keys.sorted() == ["o-gone", "o-us"])
            #expect(try await s.store.ledger(orderIDs: ["o-eu", "o-us", "o-gone"], account: .default).keys.sorted() == ["o-eu", "o-gone"])

            let unsettled = try await s.store.unsettledCaptures(account: us, capturedFrom: .distantPast, capturedBefore: day(30), limit: 10)
            #expect(unsettled == [pruned], "the US capture is settled; the EU one is not the US account's")
            #expect(
                try await s.store.unsettledCaptures(account: .default, capturedFrom: .distantPast, capturedBefore: day(30), limit: 10) == [pruned])
            #expect(try await s.store.flagUnsettled([UnsettledFlag(key: pruned.key, outcome: finding("gone unsettled"))], at: day(30)) == 1)
            #expect(try await s.store.settlementHealth(account: us).unsettledFlagged == 1)
        }
    }

    @Test("Reports: payouts since a date or by reference, oldest first; an order's lines by payout date then ordinal", arguments: Backend.allCases)
    func reports(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            try await place(s.store, [order("o-1"), order("o-2")])
            let fee = SettledLine(paymentReference: "PAY-3", ordinal: 0, kind: .fee, amount: 25, orderID: "o-1", currency: "EUR")
            let holdback = SettledLine(paymentReference: "PAY-3", ordinal: 2, kind: .holdback, amount: 50, currency: "EUR")
            let third = payout(
                "PAY-3", day: 5,
                [
                    (fee, .order("o-1", capture: nil)), (sale("PAY-3", 1, order: "o-1", capture: nil, amount: 700), .unmatched(.captureUnknown)),
                    (holdback, .payoutLevel),
                ])
            let first = payout(
                "PAY-1", day: 1,
                [
                    (sale("PAY-1", 0, order: "o-2", capture: nil, amount: 100), .unmatched(.captureUnknown)),
                    (sale("PAY-1", 1, order: "o-1", capture: nil, amount: 200), .unmatched(.captureUnknown)),
                ])
            let second = payout("PAY-2", day: 3, [(sale("PAY-2", 0, order: "o-2", capture: nil, amount: 300), .unmatched(.captureUnknown))])
            // Recorded out of date order.
            for reconciliation in [third, first, second] { #expect(try await s.store.record(reconciliation, outcomes: [], at: day(6))) }

            #expect(try await s.store.payouts(since: nil, paymentReference: nil, account: nil) == [first, second, third])
            #expect(try await s.store.payouts(since: day(3), paymentReference: nil, account: nil) == [second, third])
            #expect(try await s.store.payouts(since: nil, paymentReference: "PAY-2", account: nil) == [second])
            #expect(try await s.store.payouts(since: day(4), paymentReference: "PAY-2", account: nil).isEmpty)
            #expect(try await s.store.payouts(since: nil, paymentReference: "PAY-9", account: nil).isEmpty)
            #expect(try await s.store.settlementHealth(account: .default).newestPayoutDate == day(5))
            #expect(try await s.store.recordedPayouts(among: ["PAY-1", "PAY-3", "PAY-9"]) == ["PAY-1", "PAY-3"])
            #expect(try await s.store.recordedPayouts(among: []).isEmpty)

            func keys(_ orderIDs: [String]) async throws -> [String] {
                try await s.store.settlementLines(orderIDs: orderIDs).map(\.line.key.description)
            }
            #expect(try await keys(["o-1"]) == ["PAY-1#1", "PAY-3#0", "PAY-3#1"])
            #expect(try await keys(["o-2", "o-1"]) == ["PAY-1#0", "PAY-1#1", "PAY-2#0", "PAY-3#0", "PAY-3#1"])
            #expect(try await keys(["o-unknown"]).isEmpty)
            #expect(try await s.store.settlementLines(orderIDs: ["o-1"]).first == first.lines[1])
        }
    }

    @Test("A payout of hundreds of lines keeps every line, in order, with the one it was given", arguments: Backend.allCases)
    func largePayout(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            try await place(s.store, [order("o-1")])
            // 300 lines go in statements of 256, 32, 8 and 4 lines.
            let lines = (0..<300).map {
                (sale("PAY-L", $0, order: $0 == 7 ? nil : "o-1", capture: nil, amount: 100 + $0), LineMatch.unmatched(.captureUnknown))
            }
            let large = payout("PAY-L", day: 2, lines)
            #expect(try await s.store.record(large, outcomes: [], at: day(3)))
            #expect(try await s.store.payouts(since: nil, paymentReference: "PAY-L", account: nil) == [large])
            let kept = try await s.store.settlementLines(orderIDs: ["o-1"])
            #expect(kept.map(\.line.ordinal) == (0..<300).filter { $0 != 7 }, "the line without an order id is kept with none")
            #expect(kept.last == large.lines[299])
        }
    }

    @Test("Several handles record the same payout at once: exactly one records it, with one set of outcomes", arguments: Backend.allCases)
    func concurrentRecords(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            let cap1 = capture("o-1", "cap-1", 1_000), cap2 = capture("o-2", "cap-2", 2_000)
            try await place(s.store, [order("o-1"), order("o-2")], captures: [cap1, cap2])
            let other = try await s.openAnother()
            let reconciliation = payout(
                "PAY-1", day: 3,
                [
                    (sale("PAY-1", 0, order: "o-1", capture: "cap-1", amount: 1_000), settles(cap1)),
                    (sale("PAY-1", 1, order: "o-2", capture: "cap-2", amount: 2_000), settles(cap2)),
                ])
            let outcomes = [finding("first", order: "o-1"), finding("second", order: "o-2")]
            let at = day(3)
            let results = try await withThrowingTaskGroup(of: Bool.self) { group in
                for attempt in 0..<8 {
                    let store = attempt.isMultiple(of: 2) ? s.store : other
                    group.addTask { try await store.record(reconciliation, outcomes: outcomes, at: at) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(results.filter { $0 }.count == 1)
            #expect(try await undelivered(s.store) == outcomes)
            #expect(try await s.store.settlementLines(orderIDs: ["o-1", "o-2"]) == reconciliation.lines)
            #expect(try await s.store.settlementHealth(account: .default).payouts == 1)
        }
    }

    @Test("The settlement migration backfills the ledger from the captures confirmed before it", arguments: Backend.allCases)
    func migrationBackfill(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            try await place(s.store, [order("o-1", reference: "shop-1"), order("o-2", currency: "SEK")])
            // Committed as the engine commits a confirmed capture, before the ledger existed (no ledgerCaptures).
            func confirm(_ intent: Intent, at: Date) async throws {
                var change = Change()
                change.intents = [intent]
                try await s.store.commit(change, at: at)
            }
            let started = Intent(key: "capture-o-1", kind: .capture, subject: "o-1", amount: 1_000, now: Fixtures.t0).sending(now: Fixtures.t0)
            try await confirm(started.confirmed(result: "cap-1", now: Fixtures.t0.addingTimeInterval(5)), at: Fixtures.t0.addingTimeInterval(5))
            let idless = Intent(key: "capture-o-2", kind: .capture, subject: "o-2", amount: 2_000, now: Fixtures.t0).sending(now: Fixtures.t0)
            try await confirm(idless.confirmed(result: nil, now: Fixtures.t0.addingTimeInterval(7.5)), at: Fixtures.t0.addingTimeInterval(7.5))
            try await confirm(
                Intent(key: "capture-o-1-b", kind: .capture, subject: "o-1", amount: 500, now: Fixtures.t0).failed("refused", now: Fixtures.t0),
                at: Fixtures.t0)
            try await confirm(
                Intent(key: "place-hpp", kind: .placeOrder, subject: "hpp", now: Fixtures.t0).confirmed(result: "o-1", now: Fixtures.t0),
                at: Fixtures.t0)

            // The settlement migration undone: it runs again when the next handle opens the store.
            try await s.rewindSettlementMigration("DROP TABLE settlement_lines; DROP TABLE payouts; DROP TABLE ledger")
            let migrated = try await s.openAnother()
            let capture1 = LedgerCapture(
                orderID: "o-1", captureID: "cap-1", amount: 1_000, currency: "EUR", capturedAt: Fixtures.t0.addingTimeInterval(5), source: .daemon)
            let capture2 = LedgerCapture(
                orderID: "o-2", captureID: nil, amount: 2_000, currency: "SEK", capturedAt: Fixtures.t0.addingTimeInterval(7.5), source: .daemon)
            #expect(
                try await migrated.ledger(orderIDs: ["o-1", "o-2"], account: .default) == [
                    "o-1": LedgerOrder(orderID: "o-1", merchantReference: "shop-1", currency: "EUR", captures: [capture1]),
                    "o-2": LedgerOrder(orderID: "o-2", currency: "SEK", captures: [capture2]),
                ])
            // Keyed as the core keys them: the same captures committed again are not new.
            var again = Change()
            again.ledgerCaptures = [capture1, capture2]
            try await migrated.commit(again, at: Fixtures.t0)
            #expect(
                try await migrated.unsettledCaptures(account: .default, capturedFrom: .distantPast, capturedBefore: day(1), limit: 10) == [
                    capture1, capture2,
                ])
            #expect(capture2.key.captureID == "~2000@1800000007")
        }
    }

    @Test("Retention prunes a payment and leaves its ledger rows: the order is answered from them", arguments: Backend.allCases)
    func pruneKeepsLedger(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            var session = TrackedSession(
                hppSessionID: "hpp-p", kpSessionID: "kp-p", mode: PlaceOrderMode.none, merchantReference: nil, capturePolicy: .immediate,
                purpose: .buy, trackedAt: Fixtures.t0)
            session.phase = .closed
            session.orderID = "o-p"
            var closed = order("o-p", session: "hpp-p")
            closed.phase = .closed
            let captured = capture("o-p", "cap-p", 1_000)
            var change = Change()
            change.sessions = [session]
            change.newOrders = [closed]
            change.ledgerCaptures = [captured]
            try await s.store.commit(change, at: Fixtures.t0)
            let cutoffs = PruneCutoffs(
                closedPaymentsBefore: Fixtures.t0.addingTimeInterval(1), eventsBefore: nil, rejectionsBefore: nil, spoolDoneBefore: nil,
                outboxAcknowledgedBefore: nil)
            #expect(try await s.store.prune(cutoffs, limit: 10, dryRun: false).payments == 1)
            #expect(try await s.store.order("o-p") == nil)
            #expect(try await s.store.ledger(orderIDs: ["o-p"], account: .default) == ["o-p": LedgerOrder(orderID: "o-p", captures: [captured])])
        }
    }
}
