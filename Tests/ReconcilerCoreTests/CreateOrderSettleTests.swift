import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore

@Suite("Create-order settle period")
struct CreateOrderSettleTests {
    let policy = RetryPolicy(initialDelay: .seconds(1), multiplier: 2, maxDelay: .seconds(30), maxAttempts: 4)
    let settle = Duration.seconds(120)
    /// The request timeout (30 s) plus a second.
    let longestCall = Duration.seconds(31)

    /// An intent of `kind` whose `attempts`-th attempt was marked sent at `at`.
    func sent(_ kind: Intent.Kind = .placeOrder, attempts: Int = 1, at: Date? = nil) -> Intent {
        var intent = Intent(key: "key-1", kind: kind, subject: "s", now: Fixtures.t0)
        for _ in 0..<attempts { intent = intent.sending(now: at ?? Fixtures.t0) }
        return intent
    }

    func unclear(_ summary: String = "timeout: Operation timed out after 30001 milliseconds") -> CallFailure {
        CallFailure(outcomeUnknown: true, disposition: .doNotRetry, summary: summary)
    }

    func decide(_ intent: Intent, _ failure: CallFailure, now: Date, deadline: Date? = nil) -> IntentVerdict {
        IntentVerdict.decide(
            intent: intent, failure: failure, now: now, deadline: deadline, policy: policy, createOrderSettle: settle,
            random: FixedRandom(value: 0.5))
    }

    func step(_ intent: Intent, now: Date, tokenExpiresAt: Date? = nil) -> CreateOrderSettle.Step {
        CreateOrderSettle.step(for: intent, period: settle, longestCall: longestCall, tokenExpiresAt: tokenExpiresAt, now: now)
    }

    @Test("Only create-order settles after an unclear attempt", arguments: Intent.Kind.allCases)
    func onlyCreateOrderSettles(kind: Intent.Kind) {
        #expect(kind.settlesAfterUnclearAttempt == (kind == .placeOrder))
    }

    @Test("An unclear create-order waits the settle period from when the attempt ended, then reads the KP session")
    func unclearAttemptSettles() {
        let ended = Fixtures.t0.addingTimeInterval(30)
        guard case .tryAgain(let next, let at, let event) = decide(sent(), unclear(), now: ended) else {
            Issue.record("expected tryAgain"); return
        }
        let until = ended.addingTimeInterval(120)
        #expect(at == until)
        #expect(next.state == .ambiguous)
        #expect(next.settleUntil == until && next.nextAttemptAt == until)
        #expect(next.lastError == "timeout: Operation timed out after 30001 milliseconds")
        #expect(event.kind == .ambiguous)
        #expect(
            event.message
                == "place_order attempt 1 ended without a clear answer (timeout: Operation timed out after 30001 milliseconds); it may still be on its way to Klarna: settling until \(TrackedSession.format(until)) (engine.create_order_settle_seconds, 120.0 s after it ended), then the KP session is read; no create-order before"
        )

        // While it settles nothing is read or sent (a wake-up in between changes nothing and says nothing again);
        // from its end the KP session is read.
        #expect(step(next, now: until.addingTimeInterval(-1)) == .settle(next, until: until, event: nil))
        #expect(step(next, now: until) == .readKlarna)
        #expect(step(next, now: until.addingTimeInterval(3_600)) == .readKlarna)
    }

    @Test("The settle period is never cut short for the token: a wait past its expiry names it, and the read at its end decides")
    func settleOutlastsTheToken() {
        let expiry = Fixtures.t0.addingTimeInterval(60)
        guard case .tryAgain(let next, let at, let event) = decide(sent(), unclear(), now: Fixtures.t0, deadline: expiry) else {
            Issue.record("expected tryAgain"); return
        }
        #expect(at == Fixtures.t0.addingTimeInterval(120))
        #expect(next.settleUntil == at)
        #expect(
            event.message.hasSuffix(
                ". The authorization token expires first (\(TrackedSession.format(expiry))): if Klarna has not placed the order by then, the payment expires"
            ))
        #expect(step(next, now: expiry, tokenExpiresAt: expiry) == .settle(next, until: at, event: nil))
    }

    @Test("A create-order provably never sent (connect failure) or refused unprocessed (429) is retried at once, without a settle period")
    func neverSentRetriesAtOnce() {
        let connectFailed = CallFailure(outcomeUnknown: false, disposition: .retry(notBefore: nil), summary: "connect failed: Connection refused")
        guard case .tryAgain(let next, let at, let event) = decide(sent(), connectFailed, now: Fixtures.t0) else {
            Issue.record("expected tryAgain"); return
        }
        #expect(at == Fixtures.t0.addingTimeInterval(0.5))
        #expect(next.state == .intended && next.nextAttemptAt == at && next.settleUntil == nil)
        #expect(event.kind == .retry)
        #expect(
            event.message
                == "place_order attempt 1 failed (connect failed: Connection refused); retrying in 0.5 s without a settle period: the request never reached Klarna, or Klarna refused it unprocessed"
        )
        #expect(step(next, now: Fixtures.t0) == .proceed)
    }

    @Test("A create-order given up after its last unclear attempt keeps its settle period, so an operator's retry waits for it")
    func givenUpKeepsTheSettlePeriod() {
        guard case .giveUp(let ended, let reason) = decide(sent(attempts: 4), unclear(), now: Fixtures.t0) else {
            Issue.record("expected giveUp"); return
        }
        #expect(reason == "no clear answer after 4 attempts")
        #expect(ended.state == .ambiguous && ended.settleUntil == Fixtures.t0.addingTimeInterval(120))
        // `retry` re-drives it as ambiguous; the settle period still holds.
        let redriven = ended.ambiguous("re-driven by operator", now: Fixtures.t0.addingTimeInterval(10))
        #expect(step(redriven, now: Fixtures.t0.addingTimeInterval(10)) == .settle(redriven, until: Fixtures.t0.addingTimeInterval(120), event: nil))
    }

    @Test(
        "A create-order found sent (restart, takeover) settles from the latest its attempt could have ended, the sent mark plus the longest call, and says so once"
    )
    func sentFoundSettlesFromItsLatestEnd() {
        let sentAt = Fixtures.t0.addingTimeInterval(5)
        let intent = sent(attempts: 2, at: sentAt)
        let found = sentAt.addingTimeInterval(40)
        let latestEnd = sentAt.addingTimeInterval(31)
        let until = latestEnd.addingTimeInterval(120)
        guard case .settle(let settling, let at, let event) = step(intent, now: found) else {
            Issue.record("expected settle"); return
        }
        #expect(at == until)
        #expect(settling.state == .ambiguous && settling.settleUntil == until && settling.nextAttemptAt == until)
        #expect(settling.attempts == 2 && settling.key == intent.key)
        #expect(settling.lastError == "the answer to attempt 2 was never recorded")
        #expect(
            event
                == DomainEvent(
                    .settling,
                    "place_order attempt 2 was sent at \(TrackedSession.format(sentAt)) and its answer never recorded (this daemon stopped, or another one held the payment); it may still be on its way to Klarna: settling until \(TrackedSession.format(until)) (engine.create_order_settle_seconds, 120.0 s after the attempt could last have ended, \(TrackedSession.format(latestEnd)): sent plus the longest call, 31.0 s), then the KP session is read; no create-order before"
                ))
        // Committed, it waits silently until the end, then the KP session is read.
        #expect(step(settling, now: found.addingTimeInterval(1)) == .settle(settling, until: until, event: nil))
        #expect(step(settling, now: until) == .readKlarna)
    }

    @Test("A create-order found sent after its settle period is read at once")
    func sentLongAgoIsRead() {
        guard case .settle = step(sent(), now: Fixtures.t0.addingTimeInterval(150)) else {
            Issue.record("read before the longest call and the period were over"); return
        }
        #expect(step(sent(), now: Fixtures.t0.addingTimeInterval(151)) == .readKlarna)
        #expect(step(sent(), now: Fixtures.t0.addingTimeInterval(7_200)) == .readKlarna)
    }

    @Test("A sent create-order whose settle period outlasts the token names the expiry, and is not cut short")
    func sentOutlastsTheToken() {
        let expiry = Fixtures.t0.addingTimeInterval(30)
        guard case .settle(_, let until, let event?) = step(sent(), now: Fixtures.t0.addingTimeInterval(10), tokenExpiresAt: expiry) else {
            Issue.record("expected settle with an event"); return
        }
        #expect(until == Fixtures.t0.addingTimeInterval(151))
        #expect(event.message.contains("The authorization token expires first (\(TrackedSession.format(expiry)))"))
    }

    @Test("Nothing settles without an unclear create-order: a new or retried intent goes on, an ambiguous one without a settle period is read")
    func nothingToSettle() {
        let fresh = Intent(key: "key-1", kind: .placeOrder, subject: "s", now: Fixtures.t0)
        #expect(step(fresh, now: Fixtures.t0) == .proceed)
        #expect(step(sent().retrying("connect failed", at: Fixtures.t0.addingTimeInterval(1), now: Fixtures.t0), now: Fixtures.t0) == .proceed)
        #expect(step(sent().confirmed(result: "order-1", now: Fixtures.t0), now: Fixtures.t0) == .proceed)
        #expect(step(sent().failed("HTTP 409", now: Fixtures.t0), now: Fixtures.t0) == .proceed)
        // An operator's retry of a clearly failed create-order: nothing can be in transit.
        #expect(
            step(sent().failed("HTTP 409", now: Fixtures.t0).ambiguous("re-driven by operator", now: Fixtures.t0), now: Fixtures.t0) == .readKlarna)
    }

    @Test("Other kinds never settle: an unclear one is read at once", arguments: Intent.Kind.allCases.filter { $0 != .placeOrder })
    func otherKindsAreReadAtOnce(kind: Intent.Kind) {
        #expect(step(sent(kind), now: Fixtures.t0) == .readKlarna)
        #expect(step(sent(kind).ambiguous("timeout", now: Fixtures.t0), now: Fixtures.t0) == .readKlarna)
        guard case .tryAgain(let next, _, let event) = decide(sent(kind), unclear(), now: Fixtures.t0) else {
            Issue.record("expected tryAgain"); return
        }
        #expect(next.settleUntil == nil)
        #expect(!event.message.contains("settling"))
    }

    @Test("A new attempt clears the settle period; a clear answer keeps nothing waiting")
    func sendingClearsIt() {
        let settling = sent().ambiguous("timeout", now: Fixtures.t0).settling(until: Fixtures.t0.addingTimeInterval(120))
        let again = settling.retrying(nil, at: Fixtures.t0.addingTimeInterval(120), now: Fixtures.t0.addingTimeInterval(120)).sending(
            now: Fixtures.t0.addingTimeInterval(120))
        #expect(again.settleUntil == nil && again.attempts == 2 && again.state == .sent)
    }

    @Test("The operators' range and the default")
    func range() {
        #expect(CreateOrderSettle.standard == .seconds(120))
        #expect(CreateOrderSettle.configurableSeconds == 30...900)
        // The longest period and a generous request timeout leave most of the token's 60 minutes for the next attempt.
        #expect(Duration.seconds(CreateOrderSettle.configurableSeconds.upperBound) + .seconds(30) < Deadlines.authorizationTokenLifetime / 2)
    }
}
