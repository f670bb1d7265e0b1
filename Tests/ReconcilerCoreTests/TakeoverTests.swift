import Foundation
import Testing
@testable import ReconcilerCore

@Suite("Takeover of another daemon's work")
struct TakeoverTests {
    let wallNow = Date(timeIntervalSince1970: 1_800_000_000)
    let longestCall = Duration.seconds(31)
    /// Every instant of a test is an offset from this one reading: nothing waits on real time.
    let t0 = ContinuousClock.now

    func intent(_ state: Intent.State, kind: Intent.Kind = .placeOrder) -> Intent {
        var intent = Intent(key: "k-\(state)", kind: kind, subject: "s", now: wallNow)
        intent.state = state
        return intent
    }

    func claimed(endedAgo: Duration = .seconds(2), answered: Duration = .zero) -> Takeover {
        .claimed(LapsedLease(holder: "host-a 41", endedAgo: endedAgo), answered: t0 + answered)
    }

    @Test("A sent intent waits until the old holder's lease plus the longest call have passed")
    func sentWaits() {
        let takeover = claimed(endedAgo: .seconds(2))
        let settled = t0 - .seconds(2) + longestCall
        #expect(takeover.from == "host-a 41")
        #expect(takeover.leaseEnded == t0 - .seconds(2))
        #expect(takeover.callsSettled(longestCall: longestCall) == settled)
        #expect(takeover.wait(intents: [intent(.sent)], longestCall: longestCall, now: t0) == Duration.seconds(29))
        #expect(
            takeover.wait(intents: [intent(.confirmed), intent(.sent)], longestCall: longestCall, now: settled - .milliseconds(1))
                == Duration.milliseconds(1))
        #expect(takeover.wait(intents: [intent(.sent)], longestCall: longestCall, now: settled) == nil)
        #expect(takeover.wait(intents: [intent(.sent)], longestCall: longestCall, now: settled + .seconds(1)) == nil)
    }

    @Test("Without a sent intent nothing can be in flight: the work goes on at once")
    func nothingInFlight() {
        for takeover in [claimed(), Takeover.adopted(answered: t0)] {
            for state in Intent.State.allCases where state != .sent {
                #expect(takeover.wait(intents: [intent(state)], longestCall: longestCall, now: t0) == nil)
            }
            #expect(takeover.wait(intents: [], longestCall: longestCall, now: t0) == nil)
        }
        for state in Intent.State.allCases { #expect(Takeover.mayBeInFlight(state) == (state == .sent)) }
    }

    @Test("A lease adopted after a lost claim answer waits like a claimed one, from the answer that revealed it")
    func adoptedWaitsLikeClaimed() {
        // The claim committed before the renewal that named the key answered, so the old lease (whoever held it)
        // ended before that answer: the wait is at least that of a claimed lease that had just run out.
        let adopted = Takeover.adopted(answered: t0)
        let justLapsed = claimed(endedAgo: .zero)
        #expect(adopted.leaseEnded == t0)
        #expect(adopted.callsSettled(longestCall: longestCall) == justLapsed.callsSettled(longestCall: longestCall))
        for now in [t0, t0 + .seconds(30), t0 + longestCall - .milliseconds(1), t0 + longestCall, t0 + .seconds(60)] {
            let waited = adopted.wait(intents: [intent(.sent)], longestCall: longestCall, now: now)
            #expect(waited == justLapsed.wait(intents: [intent(.sent)], longestCall: longestCall, now: now))
        }
        #expect(adopted.wait(intents: [intent(.sent)], longestCall: longestCall, now: t0) == longestCall)
        #expect(adopted.wait(intents: [intent(.sent), intent(.intended)], longestCall: longestCall, now: t0 + .seconds(1)) == Duration.seconds(30))
        #expect(adopted.wait(intents: [intent(.sent)], longestCall: longestCall, now: t0 + longestCall) == nil)
        // Not a claim answer the store gave: nobody to name.
        #expect(adopted.from != "host-a 41")
        #expect(adopted != justLapsed)
    }

    @Test("The wait counts from when the claim's answer arrived, not from when the query was sent")
    func countsFromTheAnswer() {
        // The same answer from the server (the lease ended 2 s before the query ran), arriving 5 s after the query
        // was sent: the query may have run at any moment in between, so the wait counts from the answer.
        let sent = t0
        let takeover = claimed(endedAgo: .seconds(2), answered: .seconds(5))
        #expect(takeover.callsSettled(longestCall: longestCall) == sent + .seconds(5) - .seconds(2) + longestCall)
        // Counted from the query's sending, the wait would be over here; it is not.
        let fromSending = sent - .seconds(2) + longestCall
        #expect(takeover.wait(intents: [intent(.sent)], longestCall: longestCall, now: fromSending) == Duration.seconds(5))
        #expect(takeover.wait(intents: [intent(.sent)], longestCall: longestCall, now: fromSending + .seconds(5)) == nil)
        // A later answer never shortens the wait.
        let sooner = claimed(endedAgo: .seconds(2), answered: .seconds(1))
        #expect(sooner.callsSettled(longestCall: longestCall) < takeover.callsSettled(longestCall: longestCall))
    }

    @Test("A wall-clock jump does not shorten the wait: it only moves when the work is looked at again")
    func wallClockJump() {
        let takeover = claimed(endedAgo: .seconds(2))
        let now = t0 + .seconds(1)
        let left = Duration.seconds(28)
        #expect(takeover.resumeAt(intents: [intent(.sent)], longestCall: longestCall, now: now, wallNow: wallNow) == wallNow + left.timeInterval)
        // The wall clock jumps an hour ahead (or back) while the monotonic clock moved on a second: still waiting,
        // for the same time.
        for jump: TimeInterval in [3_600, -3_600] {
            let jumped = wallNow + jump
            #expect(takeover.resumeAt(intents: [intent(.sent)], longestCall: longestCall, now: now, wallNow: jumped) == jumped + left.timeInterval)
            #expect(takeover.wait(intents: [intent(.sent)], longestCall: longestCall, now: now) == left)
        }
        // Only the monotonic clock ends it.
        let settled = takeover.callsSettled(longestCall: longestCall)
        #expect(takeover.resumeAt(intents: [intent(.sent)], longestCall: longestCall, now: settled, wallNow: wallNow - 3_600) == nil)
        #expect(takeover.resumeAt(intents: [intent(.confirmed)], longestCall: longestCall, now: now, wallNow: wallNow) == nil)
    }
}
