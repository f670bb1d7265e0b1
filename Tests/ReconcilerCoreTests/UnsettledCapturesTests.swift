import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore

/// Captures Klarna has not settled within `settle_within_days`, each flagged once.
@Suite("Unsettled captures")
struct UnsettledCapturesTests {
    let day: TimeInterval = 86_400

    func capture(
        _ id: String, _ amount: Int = 50_000, order: String = "o-1", at offset: TimeInterval = 0, settledBy: SettledLineKey? = nil
    ) -> LedgerCapture {
        LedgerCapture(
            orderID: order, captureID: id, amount: amount, currency: "EUR", capturedAt: Fixtures.t0.addingTimeInterval(offset),
            source: .daemon, settledBy: settledBy)
    }

    func key(_ id: String, order: String = "o-1") -> CaptureKey { CaptureKey(orderID: order, captureID: id) }

    @Test("A second before the deadline nothing is due and the deadline is the next look; a second after, the capture is overdue")
    func aroundTheDeadline() {
        let captures = [capture("c-1")]
        let before = UnsettledCaptures.check(captures, now: Fixtures.t0.addingTimeInterval(7 * day - 1), settleWithinDays: 7, flagged: [])
        #expect(before.overdue == [])
        #expect(before.nextDeadline == Fixtures.t0.addingTimeInterval(7 * day))

        let after = UnsettledCaptures.check(captures, now: Fixtures.t0.addingTimeInterval(7 * day + 1), settleWithinDays: 7, flagged: [])
        #expect(
            after.overdue == [
                OverdueCapture(
                    key: key("c-1"), capture: captures[0], deadline: Fixtures.t0.addingTimeInterval(7 * day), overdueBy: 1,
                    reason: "capture c-1 of order o-1 (50000 EUR, captured 2027-01-15T08:00:00Z) has not settled within 7 days")
            ])
        #expect(after.nextDeadline == nil)
    }

    @Test("At the deadline itself the capture is due: a caller that sleeps until the next deadline finds it")
    func atTheDeadline() {
        let check = UnsettledCaptures.check([capture("c-1")], now: Fixtures.t0.addingTimeInterval(7 * day), settleWithinDays: 7, flagged: [])
        #expect(check.overdue.map(\.key) == [key("c-1")])
        #expect(check.overdue.first?.overdueBy == 0)
    }

    @Test(
        "The window a check judges starts at the syncs' reach (now less the lookback, or the oldest payout when earlier) and ends settle_within_days before now"
    )
    func window() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let day: TimeInterval = 86_400
        let first = UnsettledCaptures.window(now: now, settleWithinDays: 14, oldestPayoutDate: nil, lookback: 30 * day)
        #expect(first.from == now.addingTimeInterval(-30 * day))
        #expect(first.before == now.addingTimeInterval(-14 * day))
        let older = UnsettledCaptures.window(now: now, settleWithinDays: 14, oldestPayoutDate: now.addingTimeInterval(-90 * day), lookback: 30 * day)
        #expect(older.from == now.addingTimeInterval(-90 * day))
        let newer = UnsettledCaptures.window(now: now, settleWithinDays: 14, oldestPayoutDate: now.addingTimeInterval(-2 * day), lookback: 30 * day)
        #expect(newer.from == now.addingTimeInterval(-30 * day))
    }

    @Test("A settled capture is never overdue, whether the ledger or the caller says it is settled")
    func settled() {
        let late = Fixtures.t0.addingTimeInterval(30 * day)
        let bySale = capture("c-1", settledBy: SettledLineKey(paymentReference: "P1", ordinal: 0))
        #expect(UnsettledCaptures.check([bySale], now: late, settleWithinDays: 7, flagged: []).overdue == [])
        let check = UnsettledCaptures.check([capture("c-2")], now: late, settleWithinDays: 7, settled: [key("c-2")], flagged: [])
        #expect(check.overdue == [])
        #expect(check.nextDeadline == nil)
    }

    @Test("Flag once: a capture the caller has flagged is not returned again, however late it gets")
    func flaggedOnce() {
        let captures = [capture("c-1"), capture("c-2", at: day)]
        var flagged: Set<CaptureKey> = []

        let first = UnsettledCaptures.check(captures, now: Fixtures.t0.addingTimeInterval(7 * day + 10), settleWithinDays: 7, flagged: flagged)
        #expect(first.overdue.map(\.key) == [key("c-1")])
        #expect(first.nextDeadline == Fixtures.t0.addingTimeInterval(8 * day))
        flagged.formUnion(first.overdue.map(\.key))

        let same = UnsettledCaptures.check(captures, now: Fixtures.t0.addingTimeInterval(7 * day + 20), settleWithinDays: 7, flagged: flagged)
        #expect(same.overdue == [])

        let later = UnsettledCaptures.check(captures, now: Fixtures.t0.addingTimeInterval(60 * day), settleWithinDays: 7, flagged: flagged)
        #expect(later.overdue.map(\.key) == [key("c-2")])
        flagged.formUnion(later.overdue.map(\.key))

        let done = UnsettledCaptures.check(captures, now: Fixtures.t0.addingTimeInterval(90 * day), settleWithinDays: 7, flagged: flagged)
        #expect(done.overdue == [])
        #expect(done.nextDeadline == nil)
    }

    @Test("A capture named twice is returned once; overdue captures come by deadline")
    func onceAndOrdered() {
        let captures = [capture("c-3", at: 2 * day), capture("c-1"), capture("c-3", at: 2 * day), capture("c-2", order: "o-2", at: day)]
        let check = UnsettledCaptures.check(captures, now: Fixtures.t0.addingTimeInterval(30 * day), settleWithinDays: 7, flagged: [])
        #expect(check.overdue.map(\.key) == [key("c-1"), key("c-2", order: "o-2"), key("c-3")])
    }

    @Test("The closures the caller gives decide settled and flagged without sets (a large store)")
    func closures() {
        var asked: [CaptureKey] = []
        let check = UnsettledCaptures.check(
            [capture("c-1"), capture("c-2")], now: Fixtures.t0.addingTimeInterval(30 * day), settleWithinDays: 7,
            isSettled: { key in
                asked.append(key); return key.captureID == "c-1"
            }, isFlagged: { _ in false })
        #expect(check.overdue.map(\.key) == [key("c-2")])
        #expect(asked == [key("c-1"), key("c-2")])
    }

    @Test("A capture without an id is keyed by its amount and the second it was captured")
    func captureWithoutID() {
        let capture = LedgerCapture(orderID: "o-1", captureID: nil, amount: 700, capturedAt: Fixtures.t0.addingTimeInterval(0.75), source: .observed)
        #expect(capture.key == CaptureKey(orderID: "o-1", captureID: "~700@1800000000"))
        let check = UnsettledCaptures.check([capture], now: Fixtures.t0.addingTimeInterval(2 * day), settleWithinDays: 1, flagged: [])
        #expect(
            check.overdue.first?.reason
                == "capture ~700@1800000000 of order o-1 (700, captured 2027-01-15T08:00:00Z, captured outside the daemon) has not settled within 1 days"
        )
    }

    @Test("A negative settle_within_days counts as 0: due as soon as captured")
    func negativeDays() {
        #expect(UnsettledCaptures.deadline(of: capture("c-1"), settleWithinDays: -3) == Fixtures.t0)
        #expect(UnsettledCaptures.check([capture("c-1")], now: Fixtures.t0, settleWithinDays: -3, flagged: []).overdue.count == 1)
    }
}
