import Foundation

/// Runs an operation under a ``RetryPolicy``: waits on the shared ``RateLimiter`` before every attempt, sleeps on the
/// injected clock between attempts, and reports each retry with its reason so it can be logged and shown.
public struct Retrier: Sendable {
    public struct RetryEvent: Sendable {
        public let attempt: Int
        public let delay: Duration
        public let error: any Error
    }

    public let policy: RetryPolicy
    public let clock: any WallClock
    public let random: any RandomSource
    public let rateLimiter: RateLimiter?

    public init(policy: RetryPolicy, clock: any WallClock, random: any RandomSource, rateLimiter: RateLimiter? = nil) {
        self.policy = policy
        self.clock = clock
        self.random = random
        self.rateLimiter = rateLimiter
    }

    /// - Parameters:
    ///   - onRetry: called before each wait with the failed attempt's number, the delay and the error.
    ///   - operation: receives the 1-based attempt number.
    /// - Throws: the last error when the policy gives up, or `CancellationError`.
    public func run<T: Sendable>(
        onRetry: (RetryEvent) -> Void = { _ in },
        _ operation: (Int) async throws -> T
    ) async throws -> T {
        let started = clock.now
        var attempt = 1
        while true {
            try Task.checkCancellation()
            if let rateLimiter { try await rateLimiter.acquire() }
            do {
                return try await operation(attempt)
            } catch {
                if error is CancellationError { throw error }
                let disposition = (error as? any RetryClassifiable)?.retryDisposition ?? .doNotRetry
                let elapsed = Duration(timeInterval: clock.now.timeIntervalSince(started))
                switch policy.decide(afterAttempt: attempt, elapsed: elapsed, disposition: disposition, random: random) {
                case .giveUp:
                    throw error
                case .retry(let delay):
                    if case .retry(let hint?) = disposition, let rateLimiter {
                        // A rate-limit hint applies to every caller, not only this one.
                        rateLimiter.pause(for: hint)
                    }
                    onRetry(RetryEvent(attempt: attempt, delay: delay, error: error))
                    try await clock.sleep(for: delay)
                    attempt += 1
                }
            }
        }
    }
}
