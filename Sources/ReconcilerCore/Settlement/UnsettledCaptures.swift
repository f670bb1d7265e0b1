import Foundation

/// A capture past its settlement deadline that no SALE has settled.
public struct OverdueCapture: Codable, Sendable, Equatable {
    public var key: CaptureKey
    public var capture: LedgerCapture
    /// `capturedAt` + `settle_within_days`.
    public var deadline: Date
    /// Seconds past the deadline.
    public var overdueBy: TimeInterval
    /// One line for an operator.
    public var reason: String

    public init(key: CaptureKey, capture: LedgerCapture, deadline: Date, overdueBy: TimeInterval, reason: String) {
        self.key = key
        self.capture = capture
        self.deadline = deadline
        self.overdueBy = overdueBy
        self.reason = reason
    }
}

/// What one look at the unsettled captures found.
public struct UnsettledCheck: Sendable, Equatable {
    /// Captures to flag now, each once, by deadline (then key).
    public var overdue: [OverdueCapture]
    /// When the next capture not yet flagged, settled or overdue will be: the time to look again (nil: none).
    public var nextDeadline: Date?

    public init(overdue: [OverdueCapture], nextDeadline: Date?) {
        self.overdue = overdue
        self.nextDeadline = nextDeadline
    }
}

/// Captures Klarna has not settled in time (Klarna's Settlements API reference, "captured-not-settled"): a capture with no SALE
/// `settle_within_days` after it was captured.
///
/// Flag once: the check returns each overdue capture's ``CaptureKey``; the caller records the keys it flagged in the
/// same store transaction as the outcome it writes for them, and passes them back as `flagged` on every later
/// check. A flagged capture is never returned again, whatever the clock says; one that settles later (the matcher's
/// ``PayoutReconciliation/settledCaptures``, or ``LedgerCapture/settledBy``) stops being a candidate. A day is
/// 86,400 seconds (UTC, no calendar); the capture is overdue from its deadline on, so a caller that sleeps until
/// ``UnsettledCheck/nextDeadline`` finds it due.
public enum UnsettledCaptures {
    public static let secondsPerDay: TimeInterval = 86_400

    /// When `capture` should have settled by: `capturedAt` + `settleWithinDays` days (a negative count is 0).
    public static func deadline(of capture: LedgerCapture, settleWithinDays: Int) -> Date {
        capture.capturedAt.addingTimeInterval(TimeInterval(max(0, settleWithinDays)) * secondsPerDay)
    }

    /// The captures a check at `now` can judge: captured from `from` up to and including `before` (`now` less
    /// `settleWithinDays`). A capture from before the syncs' reach may have been settled by a payout no sync listed,
    /// so it is never flagged: without this, switching settlements on for a store with history would flag every
    /// older capture. The reach is `now − lookback` (a first sync lists that far back, and any later one from the
    /// newest payout on, so every payout dated from then on was listed) or the oldest payout recorded, whichever is
    /// earlier: a payout pays only what was captured before it.
    public static func window(
        now: Date, settleWithinDays: Int, oldestPayoutDate: Date?, lookback: TimeInterval
    ) -> (from: Date, before: Date) {
        let reach = now.addingTimeInterval(-max(0, lookback))
        let from = oldestPayoutDate.map { min($0, reach) } ?? reach
        return (from, now.addingTimeInterval(-TimeInterval(max(0, settleWithinDays)) * secondsPerDay))
    }

    /// The captures overdue at `now` that are neither settled (``LedgerCapture/settledBy`` or `isSettled`) nor
    /// flagged already (`isFlagged`), each once even when `captures` names it twice; and the next deadline to come.
    public static func check(
        _ captures: [LedgerCapture], now: Date, settleWithinDays: Int, isSettled: (CaptureKey) -> Bool,
        isFlagged: (CaptureKey) -> Bool
    ) -> UnsettledCheck {
        var seen: Set<CaptureKey> = []
        var overdue: [OverdueCapture] = []
        var nextDeadline: Date?
        for capture in captures {
            let key = capture.key
            guard seen.insert(key).inserted else { continue }
            guard capture.settledBy == nil, !isSettled(key), !isFlagged(key) else { continue }
            let due = Self.deadline(of: capture, settleWithinDays: settleWithinDays)
            if now.hasReached(due) {
                let captured = capture.capturedAt.formatted(Date.ISO8601FormatStyle())
                let currency = capture.currency.map { " \($0)" } ?? ""
                let outside = capture.source == .observed ? ", captured outside the daemon" : ""
                overdue.append(
                    OverdueCapture(
                        key: key, capture: capture, deadline: due, overdueBy: max(0, now.timeIntervalSince(due)),
                        reason:
                            "capture \(key.captureID) of order \(key.orderID) (\(capture.amount)\(currency), captured \(captured)\(outside)) has not settled within \(max(0, settleWithinDays)) days"
                    ))
            } else if nextDeadline.map({ due < $0 }) ?? true {
                nextDeadline = due
            }
        }
        overdue.sort { a, b in
            a.deadline != b.deadline ? a.deadline < b.deadline : a.key.description < b.key.description
        }
        return UnsettledCheck(overdue: overdue, nextDeadline: nextDeadline)
    }

    /// ``check(_:now:settleWithinDays:isSettled:isFlagged:)`` with the settled and flagged keys as sets.
    public static func check(
        _ captures: [LedgerCapture], now: Date, settleWithinDays: Int, settled: Set<CaptureKey> = [],
        flagged: Set<CaptureKey>
    ) -> UnsettledCheck {
        check(
            captures, now: now, settleWithinDays: settleWithinDays, isSettled: { settled.contains($0) },
            isFlagged: { flagged.contains($0) })
    }
}
