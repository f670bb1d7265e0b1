import Foundation
import ReconcilerCore
import Synchronization

/// Klarna's rate limit is the merchant account's, not a process's: with several daemons on one store, each spends
/// the configured budget divided by the daemons live now (learnt at each lease renewal). A daemon joining makes the
/// others' share smaller within a renewal (a third of the lease time); one that dies leaves its share unspent until
/// its heartbeat is older than a lease.
public final class BudgetShare: Sendable {
    private struct State {
        var ratePerSecond: Double
        var burst: Double
        var daemons = 1
    }

    private let state: Mutex<State>
    private let limiter: RateLimiter

    public init(limiter: RateLimiter, ratePerSecond: Double, burst: Double) {
        self.limiter = limiter
        state = Mutex(State(ratePerSecond: ratePerSecond, burst: burst))
    }

    /// The configured budget changed (a reload).
    public func configure(ratePerSecond: Double, burst: Double) {
        apply {
            $0.ratePerSecond = ratePerSecond; $0.burst = burst
        }
    }

    /// The number of live daemons changed.
    public func daemons(_ count: Int) {
        apply { $0.daemons = max(1, count) }
    }

    /// This daemon's share now: rate, burst (at least one token) and the daemon count it was divided by.
    public var share: (ratePerSecond: Double, burst: Double, daemons: Int) {
        state.withLock { Self.share($0) }
    }

    private static func share(_ state: State) -> (ratePerSecond: Double, burst: Double, daemons: Int) {
        (state.ratePerSecond / Double(state.daemons), max(1, state.burst / Double(state.daemons)), state.daemons)
    }

    private func apply(_ change: (inout State) -> Void) {
        let (old, new) = state.withLock { state in
            let old = Self.share(state)
            change(&state)
            return (old, Self.share(state))
        }
        guard old != new else { return }
        limiter.reconfigure(ratePerSecond: new.ratePerSecond, burst: new.burst)
    }
}
