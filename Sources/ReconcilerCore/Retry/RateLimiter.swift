import Foundation
import Synchronization

/// A token bucket: `ratePerSecond` tokens per second, at most `burst` saved up.
///
/// Callers *reserve* a token and are told how long to wait for it, so waiting callers are served in order and the
/// budget is never exceeded however many ask at once. ``pause(until:)`` empties the budget until a moment the server
/// named (Klarna limits per merchant: once limited, every further call is limited until the window resets).
public struct TokenBucket: Sendable, Equatable {
    public private(set) var ratePerSecond: Double
    public private(set) var burst: Double
    private var tokens: Double
    private var updatedAt: Date
    private var pausedUntil: Date?

    public init(ratePerSecond: Double, burst: Double, now: Date) {
        precondition(ratePerSecond > 0 && burst >= 1)
        self.ratePerSecond = ratePerSecond
        self.burst = burst
        self.tokens = burst
        self.updatedAt = now
    }

    /// Takes one token and returns how long the caller must wait before using it (zero when one was available).
    public mutating func reserve(now: Date) -> Duration {
        refill(now: now)
        var wait: TimeInterval = 0
        if let pausedUntil, pausedUntil > now {
            // During a pause the bucket restarts empty at the pause's end.
            wait = pausedUntil.timeIntervalSince(now)
        }
        tokens -= 1
        if tokens < 0 { wait += -tokens / ratePerSecond }
        return Duration(timeInterval: wait)
    }

    /// Empties the budget until `until`; later reservations queue behind it.
    public mutating func pause(until: Date, now: Date) {
        refill(now: now)
        if let current = pausedUntil, current >= until { return }
        pausedUntil = until
        tokens = min(tokens, 0)
    }

    /// Changes the rate live (configuration reload) without forgetting reservations already handed out.
    public mutating func reconfigure(ratePerSecond: Double, burst: Double, now: Date) {
        precondition(ratePerSecond > 0 && burst >= 1)
        refill(now: now)
        self.ratePerSecond = ratePerSecond
        self.burst = burst
        tokens = min(tokens, burst)
    }

    private mutating func refill(now: Date) {
        var from = updatedAt
        if let pausedUntil {
            if now < pausedUntil { updatedAt = now; return }
            from = max(from, pausedUntil)
            self.pausedUntil = nil
        }
        let elapsed = max(0, now.timeIntervalSince(from))
        tokens = min(burst, tokens + elapsed * ratePerSecond)
        updatedAt = now
    }
}

/// The process-wide outbound budget: a ``TokenBucket`` shared by every caller, sleeping on the injected clock.
public final class RateLimiter: Sendable {
    private let bucket: Mutex<TokenBucket>
    private let clock: any WallClock

    public init(ratePerSecond: Double, burst: Double, clock: any WallClock) {
        self.clock = clock
        self.bucket = Mutex(TokenBucket(ratePerSecond: ratePerSecond, burst: burst, now: clock.now))
    }

    /// Waits until the caller may send one request. Returns how long it waited.
    @discardableResult
    public func acquire() async throws -> Duration {
        let wait = bucket.withLock { $0.reserve(now: clock.now) }
        if wait > .zero { try await clock.sleep(for: wait) }
        return wait
    }

    public func pause(for duration: Duration) {
        let now = clock.now
        bucket.withLock { $0.pause(until: now.addingTimeInterval(duration.timeInterval), now: now) }
    }

    public func reconfigure(ratePerSecond: Double, burst: Double) {
        let now = clock.now
        bucket.withLock { $0.reconfigure(ratePerSecond: ratePerSecond, burst: burst, now: now) }
    }
}
