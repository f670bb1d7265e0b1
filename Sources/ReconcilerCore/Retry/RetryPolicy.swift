import Foundation

/// What a failed call says about trying again. Errors that can be retried conform to ``RetryClassifiable``.
public enum RetryDisposition: Sendable, Equatable {
    /// Safe to try again; `notBefore` is the server's own hint (`Retry-After`, `X-Ratelimit-Reset`) when it gave one.
    case retry(notBefore: Duration?)
    /// Trying the same call again cannot help (4xx other than 408/409/425/429) or is unsafe.
    case doNotRetry
}

public protocol RetryClassifiable: Error {
    var retryDisposition: RetryDisposition { get }
}

/// Exponential backoff with full jitter, a cap, a maximum number of attempts and an overall deadline.
///
/// The delay before attempt `n + 1` is uniform in `[0, min(maxDelay, initialDelay · multiplier^(n-1))]`
/// ("full jitter"). A server hint wins over the computed delay: the wait is then the hint plus a jitter of at most
/// `initialDelay`, so clients told to come back at the same second do not all arrive in the same millisecond.
public struct RetryPolicy: Sendable, Equatable {
    public var initialDelay: Duration
    public var multiplier: Double
    public var maxDelay: Duration
    /// Total attempts including the first one.
    public var maxAttempts: Int
    /// Time budget measured from the first attempt; `nil` for none.
    public var deadline: Duration?

    public init(
        initialDelay: Duration = .milliseconds(500),
        multiplier: Double = 2,
        maxDelay: Duration = .seconds(60),
        maxAttempts: Int = 8,
        deadline: Duration? = nil
    ) {
        precondition(maxAttempts >= 1, "maxAttempts counts the first attempt")
        precondition(multiplier >= 1)
        self.initialDelay = initialDelay
        self.multiplier = multiplier
        self.maxDelay = maxDelay
        self.maxAttempts = maxAttempts
        self.deadline = deadline
    }

    public enum Decision: Sendable, Equatable {
        case retry(after: Duration)
        case giveUp(GiveUpReason)
    }

    public enum GiveUpReason: Sendable, Equatable, CustomStringConvertible {
        case notRetryable
        case attemptsExhausted(Int)
        case deadlineExceeded

        public var description: String {
            switch self {
            case .notRetryable: "the failure is not retryable"
            case .attemptsExhausted(let n): "gave up after \(n) attempts"
            case .deadlineExceeded: "the retry deadline would be exceeded"
            }
        }
    }

    /// The upper bound of the jitter window before the attempt that follows attempt `attempt` (1-based).
    public func backoffCeiling(afterAttempt attempt: Int) -> Duration {
        let exponent = Double(max(0, attempt - 1))
        let raw = initialDelay.timeInterval * pow(multiplier, exponent)
        return Duration(timeInterval: min(maxDelay.timeInterval, raw))
    }

    /// Decides what follows a failed attempt.
    /// - Parameters:
    ///   - attempt: the 1-based number of the attempt that just failed.
    ///   - elapsed: time since the first attempt started.
    ///   - disposition: what the failure says about retrying.
    ///   - random: the jitter source.
    public func decide(
        afterAttempt attempt: Int,
        elapsed: Duration,
        disposition: RetryDisposition,
        random: any RandomSource
    ) -> Decision {
        guard case .retry(let hint) = disposition else { return .giveUp(.notRetryable) }
        guard attempt < maxAttempts else { return .giveUp(.attemptsExhausted(attempt)) }
        let delay: Duration
        if let hint, hint > .zero {
            delay = hint + Duration(timeInterval: initialDelay.timeInterval * random.nextUnit())
        } else {
            delay = Duration(timeInterval: backoffCeiling(afterAttempt: attempt).timeInterval * random.nextUnit())
        }
        if let deadline, elapsed + delay > deadline { return .giveUp(.deadlineExceeded) }
        return .retry(after: delay)
    }
}
