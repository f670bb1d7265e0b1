import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore

@Suite("Intent verdict")
struct IntentVerdictTests {
    let policy = RetryPolicy(initialDelay: .seconds(1), multiplier: 2, maxDelay: .seconds(30), maxAttempts: 4)
    let half = FixedRandom(value: 0.5)
    let settle = Duration.seconds(120)

    /// An intent of `kind` whose `attempts`-th attempt was just sent at `Fixtures.t0`.
    func sent(_ kind: Intent.Kind = .placeOrder, attempts: Int) -> Intent {
        var intent = Intent(key: "key-1", kind: kind, subject: "s", now: Fixtures.t0)
        for _ in 0..<attempts { intent = intent.sending(now: Fixtures.t0) }
        return intent
    }

    func failure(unknown: Bool = false, _ disposition: RetryDisposition = .retry(notBefore: nil)) -> CallFailure {
        CallFailure(outcomeUnknown: unknown, disposition: disposition, summary: "HTTP 503 SERVICE_UNAVAILABLE")
    }

    func decide(_ intent: Intent, _ failure: CallFailure, now: Date? = nil, deadline: Date? = nil) -> IntentVerdict {
        IntentVerdict.decide(
            intent: intent, failure: failure, now: now ?? Fixtures.t0, deadline: deadline, policy: policy, createOrderSettle: settle, random: half)
    }

    @Test("A capture whose answer was lost takes the newest capture of its amount that no other capture intent claims")
    func resolvedCaptureID() {
        let capture = Intent(key: "cap-key", kind: .capture, subject: "o-1", amount: 3_000, now: Fixtures.t0)
        let captures = [
            OrderMovements.Movement(id: "earlier", amount: 3_000, at: Fixtures.t0),
            OrderMovements.Movement(id: "portal", amount: 1_000, at: Fixtures.t0),
            OrderMovements.Movement(id: "mine", amount: 3_000, at: Fixtures.t0),
            OrderMovements.Movement(id: "portal-2", amount: 500, at: Fixtures.t0),
        ]
        #expect(capture.resolvedCaptureID(among: captures, claimed: []) == "mine")
        #expect(capture.resolvedCaptureID(among: captures, claimed: ["mine"]) == "earlier")
        #expect(capture.resolvedCaptureID(among: captures, claimed: ["mine", "earlier"]) == nil)
        #expect(Intent(key: "x", kind: .cancelOrder, subject: "o-1", now: Fixtures.t0).resolvedCaptureID(among: captures, claimed: []) == nil)
    }

    @Test(
        "An unclear answer below the attempt limit makes the intent ambiguous and comes back after a jittered backoff (a create-order after its settle period: CreateOrderSettleTests)"
    )
    func ambiguousBelowLimit() {
        let intent = sent(.capture, attempts: 2)
        guard case .tryAgain(let next, let at, let event) = decide(intent, failure(unknown: true)) else {
            Issue.record("expected tryAgain"); return
        }
        // Ceiling after attempt 2 is 2 s; half of it.
        #expect(at == Fixtures.t0.addingTimeInterval(1))
        #expect(next.state == .ambiguous)
        #expect(next.needsResolution)
        #expect(next.lastError == "HTTP 503 SERVICE_UNAVAILABLE")
        #expect(next.key == intent.key)
        #expect(event.kind == .ambiguous)
        #expect(next.settleUntil == nil)
        #expect(event.message == "capture attempt 2 ended without a clear answer (HTTP 503 SERVICE_UNAVAILABLE); reading Klarna before anything else")
    }

    @Test("An unclear answer at the attempt limit gives up, and the intent stays ambiguous: nobody knows whether it happened")
    func ambiguousAtLimit() {
        let verdict = decide(sent(attempts: 4), failure(unknown: true))
        guard case .giveUp(let ended, let reason) = verdict else { Issue.record("expected giveUp"); return }
        #expect(ended.state == .ambiguous)
        #expect(!ended.isFinished)
        #expect(reason == "no clear answer after 4 attempts")
    }

    @Test("An unclear answer wins over the disposition: even a not-retryable one is read first")
    func ambiguousBeforeDisposition() {
        guard case .tryAgain(let next, _, _) = decide(sent(attempts: 1), failure(unknown: true, .doNotRetry)) else {
            Issue.record("expected tryAgain"); return
        }
        #expect(next.state == .ambiguous)
    }

    @Test("A clear, retryable failure goes back to intended with a backoff")
    func retryableWithBackoff() {
        let now = Fixtures.t0.addingTimeInterval(2)
        guard case .tryAgain(let next, let at, let event) = decide(sent(attempts: 2), failure(), now: now) else {
            Issue.record("expected tryAgain"); return
        }
        #expect(at == now.addingTimeInterval(1))
        #expect(next.state == .intended)
        #expect(next.nextAttemptAt == at)
        #expect(next.lastError == "HTTP 503 SERVICE_UNAVAILABLE")
        #expect(next.attempts == 2)
        #expect(event.kind == .retry)
        #expect(
            event.message
                == "place_order attempt 2 failed (HTTP 503 SERVICE_UNAVAILABLE); retrying in 1.0 s without a settle period: the request never reached Klarna, or Klarna refused it unprocessed"
        )
    }

    @Test("The backoff never passes the deadline (the authorization token's expiry)")
    func backoffCappedAtDeadline() {
        let deadline = Fixtures.t0.addingTimeInterval(0.4)
        guard case .tryAgain(let retried, let at, let event) = decide(sent(attempts: 3), failure(), deadline: deadline) else {
            Issue.record("expected tryAgain"); return
        }
        #expect(at == deadline)
        #expect(retried.nextAttemptAt == deadline)
        #expect(event.message.contains("retrying in 0.4 s"))
        guard case .tryAgain(_, let unclearAt, _) = decide(sent(.capture, attempts: 3), failure(unknown: true), deadline: deadline) else {
            Issue.record("expected tryAgain"); return
        }
        #expect(unclearAt == deadline)
    }

    @Test("The server's hint wins over the computed backoff, plus at most the initial delay of jitter")
    func serverHintHonoured() {
        guard case .tryAgain(_, let at, _) = decide(sent(attempts: 1), failure(.retry(notBefore: .seconds(20)))) else {
            Issue.record("expected tryAgain"); return
        }
        #expect(at == Fixtures.t0.addingTimeInterval(20.5))
    }

    @Test("A failure that is not retryable fails the intent")
    func notRetryableFails() {
        guard case .giveUp(let ended, let reason) = decide(sent(attempts: 1), failure(.doNotRetry)) else {
            Issue.record("expected giveUp"); return
        }
        #expect(ended.state == .failed)
        #expect(ended.isFinished)
        #expect(ended.lastError == "HTTP 503 SERVICE_UNAVAILABLE")
        #expect(reason == "the failure is not retryable")
    }

    @Test("A retryable failure out of attempts, or past the policy's deadline since the intent began, fails it")
    func outOfAttemptsOrTime() {
        guard case .giveUp(let exhausted, let reason) = decide(sent(attempts: 4), failure()) else {
            Issue.record("expected giveUp"); return
        }
        #expect(exhausted.state == .failed)
        #expect(reason == "gave up after 4 attempts")
        var patient = policy
        patient.deadline = .seconds(60)
        let late = IntentVerdict.decide(
            intent: sent(attempts: 1), failure: failure(), now: Fixtures.t0.addingTimeInterval(59.9), deadline: nil, policy: patient,
            createOrderSettle: settle, random: half)
        #expect(
            late
                == .giveUp(
                    sent(attempts: 1).failed("HTTP 503 SERVICE_UNAVAILABLE", now: Fixtures.t0.addingTimeInterval(59.9)),
                    reason: "the retry deadline would be exceeded"))
    }

    @Test("Kinds Klarna deduplicates say they retry with the same idempotency key; the others do not", arguments: Intent.Kind.allCases)
    func deduplicatedKindsMentionTheKey(kind: Intent.Kind) {
        guard case .tryAgain(let next, _, let event) = decide(sent(kind, attempts: 1), failure()) else {
            Issue.record("expected tryAgain"); return
        }
        #expect(next.key == "key-1")
        #expect(event.message.hasSuffix(" with the same idempotency key") == kind.klarnaDeduplicates)
    }

    @Test("The same seed gives the same verdict")
    func seededIsReproducible() {
        let first = IntentVerdict.decide(
            intent: sent(attempts: 2), failure: failure(), now: Fixtures.t0, deadline: nil, policy: policy, createOrderSettle: settle,
            random: SeededRandomSource(seed: 9))
        let second = IntentVerdict.decide(
            intent: sent(attempts: 2), failure: failure(), now: Fixtures.t0, deadline: nil, policy: policy, createOrderSettle: settle,
            random: SeededRandomSource(seed: 9))
        #expect(first == second)
        guard case .tryAgain(_, let at, _) = first else { Issue.record("expected tryAgain"); return }
        #expect(at >= Fixtures.t0 && at < Fixtures.t0.addingTimeInterval(2))
    }
}
