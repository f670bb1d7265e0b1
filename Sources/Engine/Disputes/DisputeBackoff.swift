import Foundation
import ReconcilerCore
import Synchronization

/// Per dispute: how long the service leaves one alone after a read failed for it alone (a 5xx, a timeout, an answer it
/// cannot read), so that one dispute Klarna cannot serve does not hold up the others. In memory: after a restart each
/// gets one read again.
final class DisputeBackoff: Sendable {
    private let failures = Mutex<[String: (count: Int, until: Date)]>([:])

    /// Whether `id` may be read at `now`.
    func allows(_ id: String, at now: Date) -> Bool {
        failures.withLock { $0[id].map { now.hasReached($0.until) } ?? true }
    }

    /// Notes a failed read of `id`; returns when it may be read again.
    func failed(_ id: String, at now: Date, policy: RetryPolicy) -> Date {
        failures.withLock { failures in
            let count = (failures[id]?.count ?? 0) + 1
            let until = now.addingTimeInterval(policy.backoffCeiling(afterAttempt: count).timeInterval)
            failures[id] = (count, until)
            return until
        }
    }

    func succeeded(_ id: String) {
        _ = failures.withLock { $0.removeValue(forKey: id) }
    }
}
