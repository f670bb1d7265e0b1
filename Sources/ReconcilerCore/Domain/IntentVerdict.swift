import Foundation

/// A failed side-effect call in the core's terms: the engine describes its API error with this.
public struct CallFailure: Sendable, Equatable {
    /// The call ended without a clear answer (timeout, reset, 5xx on a write): it may have had its effect.
    public var outcomeUnknown: Bool
    public var disposition: RetryDisposition
    /// The failure in one line, for the intent's last error and the events.
    public var summary: String

    public init(outcomeUnknown: Bool, disposition: RetryDisposition, summary: String) {
        self.outcomeUnknown = outcomeUnknown
        self.disposition = disposition
        self.summary = summary
    }
}

/// What a failed side-effect call means for its intent.
public enum IntentVerdict: Sendable, Equatable {
    /// Ambiguous (read Klarna first) or plainly failed but retryable: the intent as it now stands and when to
    /// come back.
    case tryAgain(Intent, at: Date, event: DomainEvent)
    /// Not retryable, or out of attempts: the intent as it ends (failed, or still ambiguous when nobody knows
    /// whether it happened) and why.
    case giveUp(Intent, reason: String)

    /// An unclear answer makes the intent ambiguous (the next step reads Klarna before anything else); a clear,
    /// retryable failure schedules the same key again with backoff from `policy`, never past `deadline`; anything
    /// else gives up.
    public static func decide(
        intent: Intent, failure: CallFailure, now: Date, deadline: Date?, policy: RetryPolicy, random: any RandomSource
    ) -> IntentVerdict {
        let what = "\(intent.kind.rawValue) attempt \(intent.attempts)"
        func capped(_ delay: Duration) -> Date {
            let at = now.addingTimeInterval(delay.timeInterval)
            return deadline.map { min(at, $0) } ?? at
        }
        if failure.outcomeUnknown {
            // Each unclear attempt is resolved by a read before the next; still, an answer that never comes must
            // end as an outcome, not as retries forever.
            guard intent.attempts < policy.maxAttempts else {
                return .giveUp(intent.ambiguous(failure.summary, now: now), reason: "no clear answer after \(intent.attempts) attempts")
            }
            let at = capped(Duration(timeInterval: policy.backoffCeiling(afterAttempt: intent.attempts).timeInterval * random.nextUnit()))
            return .tryAgain(intent.ambiguous(failure.summary, now: now), at: at, event: DomainEvent(
                "ambiguous", "\(what) ended without a clear answer (\(failure.summary)); reading Klarna before anything else"))
        }
        let decision = policy.decide(
            afterAttempt: intent.attempts, elapsed: Duration(timeInterval: now.timeIntervalSince(intent.createdAt)),
            disposition: failure.disposition, random: random)
        switch decision {
        case .retry(let delay):
            let at = capped(delay)
            return .tryAgain(intent.retrying(failure.summary, at: at, now: now), at: at, event: DomainEvent(
                "retry", "\(what) failed (\(failure.summary)); retrying in \(TrackedSession.seconds(Duration(timeInterval: at.timeIntervalSince(now))))\(intent.kind.klarnaDeduplicates ? " with the same idempotency key" : "")"))
        case .giveUp(let reason):
            return .giveUp(intent.failed(failure.summary, now: now), reason: reason.description)
        }
    }
}
