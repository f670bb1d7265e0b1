import Foundation

/// How a settlement sync plans its work: which payouts to list, which of them to reconcile, and when to try again
/// after a failed sync.
public enum SettlementSync {
    /// Klarna may publish a payout late (or dated before one already seen): each sync lists payouts from this long
    /// before the newest one recorded. Payouts recorded already are skipped, so the overlap costs a read, not an
    /// outcome.
    public static let overlap: TimeInterval = 7 * 86_400

    /// The payout date a sync lists payouts from: the newest payout recorded less ``overlap`` (a payout date past
    /// `now` counts as `now`), or, before any payout is recorded, `now − lookback`.
    public static func windowStart(newestPayoutDate: Date?, now: Date, lookback: Duration) -> Date {
        guard let newest = newestPayoutDate else { return now.addingTimeInterval(-lookback.timeInterval) }
        return min(newest, now).addingTimeInterval(-overlap)
    }

    /// The payouts to reconcile: those not `recorded`, each reference once, oldest first (then by reference), so a
    /// capture is settled by the first payout that paid it and a later SALE for it is the duplicate.
    public static func toReconcile(_ payouts: [SettledPayout], recorded: Set<String>) -> [SettledPayout] {
        var seen = recorded
        return
            payouts
            .sorted { ($0.payoutDate, $0.paymentReference) < ($1.payoutDate, $1.paymentReference) }
            .filter { seen.insert($0.paymentReference).inserted }
    }

    /// How long to wait after the `failures`-th failed sync in a row: backoff with full jitter from
    /// ``retryInitialDelay``, Klarna's hint (a 429's reset) when it gave one, at least ``retryMinimumDelay`` and never
    /// more than `interval`. A failure retrying cannot mend (a 403: no settlements permission) waits the interval:
    /// the sync never gives up, an operator mends the cause.
    public static func retryDelay(
        afterFailures failures: Int, disposition: RetryDisposition, interval: Duration, random: any RandomSource
    ) -> Duration {
        let policy = RetryPolicy(initialDelay: retryInitialDelay, maxDelay: interval, maxAttempts: .max)
        guard
            case .retry(let delay) = policy.decide(
                afterAttempt: max(1, failures), elapsed: .zero, disposition: disposition, random: random)
        else { return interval }
        return min(max(delay, retryMinimumDelay), interval)
    }

    public static let retryInitialDelay: Duration = .seconds(30)
    public static let retryMinimumDelay: Duration = .seconds(1)
}
