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

    /// An unclear answer makes the intent ambiguous: the next step reads Klarna before anything else, for a
    /// create-order only after the settle period (`createOrderSettle`, counted from `now`, when the attempt ended, and
    /// never cut short by `deadline`: see ``CreateOrderSettle``). A clear, retryable failure (for a create-order: one
    /// whose request provably never reached Klarna, or that Klarna refused unprocessed) schedules the same key again
    /// with backoff from `policy`, never past `deadline`; anything else gives up.
    public static func decide(
        intent: Intent, failure: CallFailure, now: Date, deadline: Date?, policy: RetryPolicy, createOrderSettle: Duration,
        random: any RandomSource
    ) -> IntentVerdict {
        let what = "\(intent.kind.rawValue) attempt \(intent.attempts)"
        func capped(_ delay: Duration) -> Date {
            let at = now.addingTimeInterval(delay.timeInterval)
            return deadline.map { min(at, $0) } ?? at
        }
        if failure.outcomeUnknown {
            let settleUntil = intent.kind.settlesAfterUnclearAttempt ? now.addingTimeInterval(createOrderSettle.timeInterval) : nil
            var unclear = intent.ambiguous(failure.summary, now: now)
            if let settleUntil { unclear = unclear.settling(until: settleUntil) }
            // Each unclear attempt is resolved by a read before the next; still, an answer that never comes must
            // end as an outcome, not as retries forever. A create-order given up keeps its settle period: an
            // operator's `retry` waits for it too.
            guard intent.attempts < policy.maxAttempts else {
                return .giveUp(unclear, reason: "no clear answer after \(intent.attempts) attempts")
            }
            guard let settleUntil else {
                let at = capped(Duration(timeInterval: policy.backoffCeiling(afterAttempt: intent.attempts).timeInterval * random.nextUnit()))
                return .tryAgain(
                    unclear, at: at,
                    event: DomainEvent(
                        .ambiguous, "\(what) ended without a clear answer (\(failure.summary)); reading Klarna before anything else"))
            }
            return .tryAgain(
                unclear, at: settleUntil,
                event: DomainEvent(
                    .ambiguous,
                    "\(what) ended without a clear answer (\(failure.summary)); "
                        + CreateOrderSettle.waiting(until: settleUntil, period: createOrderSettle, from: "after it ended", tokenExpiresAt: deadline)))
        }
        let decision = policy.decide(
            afterAttempt: intent.attempts, elapsed: Duration(timeInterval: now.timeIntervalSince(intent.createdAt)),
            disposition: failure.disposition, random: random)
        switch decision {
        case .retry(let delay):
            let at = capped(delay)
            let how =
                intent.kind.klarnaDeduplicates
                ? " with the same idempotency key"
                : intent.kind.settlesAfterUnclearAttempt
                    ? " without a settle period: the request never reached Klarna, or Klarna refused it unprocessed" : ""
            return .tryAgain(
                intent.retrying(failure.summary, at: at, now: now), at: at,
                event: DomainEvent(
                    .retry,
                    "\(what) failed (\(failure.summary)); retrying in \(TrackedSession.seconds(Duration(timeInterval: at.timeIntervalSince(now))))\(how)"
                ))
        case .giveUp(let reason):
            return .giveUp(intent.failed(failure.summary, now: now), reason: reason.description)
        }
    }
}
