import Foundation
import Synchronization
import Testing
import TestSupport
@testable import ReconcilerCore

@Suite("Rate budget by urgency")
struct RateBudgetTests {
    let start = Date(timeIntervalSince1970: 1_000)

    /// Serves `budget` from `from` on, moving time to each next grant, until nobody waits; the grants in order with
    /// their times.
    func drain(_ budget: inout RateBudget, from: Date) -> [(RateBudget.Ticket, Date)] {
        var served: [(RateBudget.Ticket, Date)] = []
        var now = from
        while let next = budget.nextGrant(now: now) {
            now = max(now, next)
            served += budget.grant(now: now).map { ($0, now) }
        }
        return served
    }

    @Test("The burst is free, then tokens come at the rate")
    func burstThenRate() {
        var budget = RateBudget(ratePerSecond: 10, burst: 3, now: start)
        for _ in 0..<6 { _ = budget.request(.routine) }
        let times = drain(&budget, from: start).map { $0.1.timeIntervalSince(start) }
        #expect(times.map { ($0 * 1_000).rounded() } == [0, 0, 0, 100, 200, 300])
    }

    @Test("Waiters are served most urgent first, in arrival order within a level")
    func urgencyOrder() {
        var budget = RateBudget(ratePerSecond: 10, burst: 1, now: start)
        _ = budget.grant(now: start)
        let result1 = budget.takeSpare(limit: 1, now: start)
        #expect(result1 == 1)
        let routine = budget.request(.routine)
        let hinted = budget.request(.hinted)
        let motion1 = budget.request(.inMotion)
        let deadline = budget.request(.deadline)
        let motion2 = budget.request(.inMotion)
        #expect(drain(&budget, from: start).map(\.0) == [deadline, motion1, motion2, hinted, routine])
    }

    @Test("A side effect behind 10,000 waiting routine reads takes the next token: within one token interval")
    func sideEffectOvertakes() {
        var budget = RateBudget(ratePerSecond: 50, burst: 10, now: start)
        for _ in 0..<10_000 { _ = budget.request(.routine) }
        // Ten seconds of polls go out first.
        var now = start
        for _ in 0..<500 {
            now = budget.nextGrant(now: now)!
            _ = budget.grant(now: now)
        }
        let arrival = now.addingTimeInterval(0.003)
        let capture = budget.request(.inMotion)
        let next = budget.nextGrant(now: arrival)!
        let result2 = budget.grant(now: next)
        #expect(result2 == [capture])
        #expect(next.timeIntervalSince(arrival) <= 1.0 / 50 + 1e-6)
    }

    @Test("No routine read waits forever: under endless urgent demand it gets one token in fairEvery")
    func fairness() {
        var budget = RateBudget(ratePerSecond: 50, burst: 1, now: start)
        var now = start
        _ = budget.grant(now: now)
        _ = budget.takeSpare(limit: 1, now: now)
        let poll = budget.request(.routine)
        var grantsBeforePoll = 0
        while true {
            // Someone more urgent always waits.
            _ = budget.request(.hinted)
            _ = budget.request(.inMotion)
            now = budget.nextGrant(now: now)!
            let served = budget.grant(now: now)
            if served.contains(poll) { break }
            grantsBeforePoll += served.count
            if grantsBeforePoll >= 1_000 { Issue.record("the routine read was never served"); return }
        }
        #expect(grantsBeforePoll == RateBudget.fairEvery - 1)
    }

    @Test("Background work waits while anyone more urgent does, past every fairness turn; it is served once nobody else waits")
    func backgroundWaitsForEveryoneElse() {
        var budget = RateBudget(ratePerSecond: 50, burst: 1, now: start)
        _ = budget.takeSpare(limit: 1, now: start)
        let sync = budget.request(.background)
        var others = (0..<(3 * RateBudget.fairEvery)).map { _ in budget.request(.routine) }
        others.append(budget.request(.hinted))
        let served = drain(&budget, from: start).map(\.0)
        #expect(served.count == others.count + 1)
        #expect(served.last == sync)
        #expect(Set(served.dropLast()) == Set(others))
    }

    @Test("A background caller waiting leaves the spare tokens to routine polls; anyone more urgent waiting takes them")
    func spareWhileBackgroundWaits() {
        var budget = RateBudget(ratePerSecond: 50, burst: 5, now: start)
        _ = budget.takeSpare(limit: 5, now: start)
        _ = budget.request(.background)
        let later = start.addingTimeInterval(0.1)
        #expect(budget.takeSpare(limit: 2, now: later) == 2)
        _ = budget.request(.routine)
        #expect(budget.takeSpare(limit: 2, now: later) == 0)
    }

    @Test("Under endless routine demand background work is never served; the first token nobody else wants is its")
    func backgroundNeverTakesFromPayments() {
        var budget = RateBudget(ratePerSecond: 50, burst: 1, now: start)
        var now = start
        _ = budget.takeSpare(limit: 1, now: now)
        let sync = budget.request(.background)
        for _ in 0..<(20 * RateBudget.fairEvery) {
            let poll = budget.request(.routine)
            now = budget.nextGrant(now: now)!
            let served = budget.grant(now: now)
            guard served == [poll] else {
                Issue.record("served \(served) instead of the routine read")
                return
            }
        }
        now = budget.nextGrant(now: now)!
        let result = budget.grant(now: now)
        #expect(result == [sync])
    }

    @Test("The budget is never exceeded over any window, whatever the mix of callers and spare takes")
    func neverExceeded() {
        let rate = 50.0, burst = 10.0
        var budget = RateBudget(ratePerSecond: rate, burst: burst, now: start)
        let random = SeededRandomSource(seed: 3)
        var sent: [Double] = []
        var now = start
        for _ in 0..<20_000 {
            now = now.addingTimeInterval(random.nextUnit() * 0.01)
            switch Int(random.nextUnit() * 4) {
            case 0: _ = budget.request(Urgency.allCases[Int(random.nextUnit() * Double(Urgency.allCases.count))])
            case 1: sent += Array(repeating: now.timeIntervalSince(start), count: budget.takeSpare(limit: 3, now: now))
            default: break
            }
            sent += budget.grant(now: now).map { _ in now.timeIntervalSince(start) }
        }
        #expect(sent.count > 1_000)
        for window in [0.1, 1.0, 10.0] {
            var first = 0
            for last in sent.indices {
                while sent[last] - sent[first] > window { first += 1 }
                #expect(Double(last - first + 1) <= burst + rate * window + 1e-6, "window \(window) s")
            }
        }
    }

    @Test("Spare tokens exist only while nobody waits; unused ones come back")
    func spare() {
        var budget = RateBudget(ratePerSecond: 10, burst: 5, now: start)
        let result3 = budget.takeSpare(limit: 3, now: start)
        #expect(result3 == 3)
        let result4 = budget.takeSpare(limit: 3, now: start)
        #expect(result4 == 2)
        budget.refund(2, now: start)
        let waiter = budget.request(.inMotion)
        let result5 = budget.takeSpare(limit: 3, now: start)
        #expect(result5 == 0)
        let result6 = budget.grant(now: start)
        #expect(result6 == [waiter])
        let result7 = budget.takeSpare(limit: 3, now: start)
        #expect(result7 == 1)
    }

    @Test("A pause holds everyone until the reset, then the budget restarts empty; a shorter pause never shortens it")
    func pause() {
        var budget = RateBudget(ratePerSecond: 10, burst: 5, now: start)
        budget.pause(until: start.addingTimeInterval(2), now: start)
        budget.pause(until: start.addingTimeInterval(1), now: start)
        let result8 = budget.takeSpare(limit: 5, now: start)
        #expect(result8 == 0)
        _ = budget.request(.deadline)
        let result9 = budget.grant(now: start.addingTimeInterval(1.5))
        #expect(result9.isEmpty)
        #expect(abs(budget.nextGrant(now: start)!.timeIntervalSince(start) - 2.1) < 1e-6)
        let result10 = budget.grant(now: start.addingTimeInterval(2.1))
        #expect(result10.count == 1)
    }

    @Test("Reconfiguring changes the rate live and keeps who waits")
    func reconfigure() {
        var budget = RateBudget(ratePerSecond: 10, burst: 1, now: start)
        _ = budget.takeSpare(limit: 1, now: start)
        let waiter = budget.request(.routine)
        budget.reconfigure(ratePerSecond: 2, burst: 1, now: start)
        #expect(abs(budget.nextGrant(now: start)!.timeIntervalSince(start) - 0.5) < 1e-6)
        let result11 = budget.grant(now: start.addingTimeInterval(0.5))
        #expect(result11 == [waiter])
    }

    @Test("A withdrawn ticket is never served")
    func withdraw() {
        var budget = RateBudget(ratePerSecond: 10, burst: 1, now: start)
        _ = budget.takeSpare(limit: 1, now: start)
        let gone = budget.request(.deadline)
        let stays = budget.request(.routine)
        let result12 = budget.withdraw(gone)
        #expect(result12)
        let result13 = budget.withdraw(gone)
        #expect(!result13)
        #expect(drain(&budget, from: start).map(\.0) == [stays])
    }

    @Test(
        "A renewal burst leaves the reserve: a live payment's calls find tokens at once, the renewals wait for tokens beyond it, and nobody is served less over time"
    )
    func reserveForLivePayments() {
        var budget = RateBudget(ratePerSecond: 50, burst: 10, reserve: 2, now: start)
        let renewals = (0..<1_000).map { _ in budget.request(.renewal) }
        #expect(budget.grant(now: start) == Array(renewals.prefix(8)), "the burst less the reserve")
        // The renewals wait for a third token, not "now": a scheduler waking at the next grant does not spin.
        #expect(abs(budget.nextGrant(now: start)!.timeIntervalSince(start) - 1.0 / 50) < 1e-6)
        let live = [budget.request(.hinted), budget.request(.inMotion)]
        #expect(budget.grant(now: start) == [live[1], live[0]], "both live calls served at once from the reserve")
        // The reserve spent, the renewals wait until it is whole again plus one: three tokens, 60 ms.
        #expect(abs(budget.nextGrant(now: start)!.timeIntervalSince(start) - 3.0 / 50) < 1e-6)
        #expect(budget.takeSpare(limit: 5, now: start) == 0, "routine reads leave the reserve too")
        // Ten seconds on: the renewals had every token but the reserve, 50 a second.
        var now = start
        var served = 8
        while now < start.addingTimeInterval(10) {
            now = budget.nextGrant(now: now)!
            served += budget.grant(now: now).count
        }
        #expect(served >= 8 + 500 - 3 && served <= 8 + 500, "\(served) renewals in 10 s at 50/s")
    }

    @Test("The fairness turn of a renewal waits for a token beyond the reserve; a live caller is not held up by it")
    func fairnessTurnLeavesTheReserve() {
        var budget = RateBudget(ratePerSecond: 50, burst: 3, reserve: 2, now: start)
        _ = budget.takeSpare(limit: 1, now: start)
        let renewal = budget.request(.renewal)
        // Nine live calls pass the waiting renewal, one token each as it comes; the tenth token would be its turn.
        var now = start
        for _ in 0..<(RateBudget.fairEvery - 1) {
            let live = budget.request(.inMotion)
            #expect(budget.grant(now: now) == [live])
            now = now.addingTimeInterval(1.0 / 50)
        }
        // Its turn has come, but two tokens is the reserve: the live call takes one, the renewal waits for a third.
        let live = budget.request(.inMotion)
        #expect(budget.grant(now: now) == [live])
        now = budget.nextGrant(now: now)!
        #expect(budget.grant(now: now) == [renewal])
    }

    @Test("A reserve larger than the burst allows is cut to the burst less one: everyone is served")
    func reserveWithinTheBurst() {
        var budget = RateBudget(ratePerSecond: 10, burst: 1, reserve: 2, now: start)
        #expect(budget.reserve == 0)
        let renewal = budget.request(.renewal)
        #expect(budget.grant(now: start) == [renewal])
        budget.reconfigure(ratePerSecond: 10, burst: 2, now: start)
        #expect(budget.reserve == 1, "a larger burst makes room for more of it")
        budget.reconfigure(ratePerSecond: 10, burst: 1, now: start)
        #expect(budget.reserve == 0, "a reload keeps it within the new burst")
        budget.reconfigure(ratePerSecond: 10, burst: 10, now: start)
        #expect(budget.reserve == 2, "and a burst cut and raised again (a daemon's share) brings back what was asked")
    }
}

@Suite("Rate limiter")
struct RateLimiterTests {
    @Test("Callers waiting on the injected clock are resumed most urgent first")
    func resumesByUrgency() async throws {
        let clock = ManualClock()
        let limiter = RateLimiter(ratePerSecond: 10, burst: 1, clock: clock)
        try await limiter.acquire(.routine)
        let order = OrderLog()
        let routine = Task {
            try await limiter.acquire(.routine); order.append("routine")
        }
        try await waitUntil { limiter.waiting == 1 }
        let capture = Task {
            try await limiter.acquire(.inMotion); order.append("capture")
        }
        try await waitUntil { limiter.waiting == 2 && clock.sleeperCount == 1 }
        clock.advance(by: .milliseconds(100))
        try await capture.value
        #expect(order.entries == ["capture"])
        try await waitUntil { clock.sleeperCount == 1 }
        clock.advance(by: .milliseconds(100))
        try await routine.value
        #expect(order.entries == ["capture", "routine"])
    }

    @Test("A caller who can be served before the pump wakes gets a pump of its own: a live call beside renewals, and tokens given back")
    func pumpComesForward() async throws {
        let clock = ManualClock()
        let limiter = RateLimiter(ratePerSecond: 50, burst: 10, clock: clock)
        #expect(limiter.takeSpare(limit: 100) == 8, "two tokens left: the reserve")
        try await limiter.acquire(.hinted)
        try await limiter.acquire(.hinted)
        let order = OrderLog()
        // A renewal needs three tokens: its pump sleeps until 60 ms.
        let renewal = Task {
            try await limiter.acquire(.renewal); order.append("renewal")
        }
        try await waitUntil { limiter.waiting == 1 && clock.sleeperCount == 1 }
        // A live call needs one: served at 20 ms, not left to the renewal's pump.
        let live = Task {
            try await limiter.acquire(.inMotion); order.append("live")
        }
        try await waitUntil { limiter.waiting == 2 && clock.sleeperCount == 2 }
        clock.advance(by: .milliseconds(20))
        try await live.value
        // The pump that served the live call looks again at 80 ms (three tokens from none). One token given back:
        // the renewal's three are there at 60 ms, and a pump is there to serve it.
        limiter.refund(1)
        clock.advance(by: .milliseconds(40))
        try await waitUntil(timeout: .seconds(5)) { order.entries.count == 2 }
        #expect(order.entries == ["live", "renewal"])
        _ = try await renewal.value
    }

    @Test("A background caller that came first waits for a routine read that came after it")
    func backgroundYieldsToRoutine() async throws {
        let clock = ManualClock()
        let limiter = RateLimiter(ratePerSecond: 10, burst: 1, clock: clock)
        try await limiter.acquire(.routine)
        let order = OrderLog()
        let sync = Task {
            try await limiter.acquire(.background); order.append("settlements")
        }
        try await waitUntil { limiter.waiting == 1 }
        let poll = Task {
            try await limiter.acquire(.routine); order.append("poll")
        }
        try await waitUntil { limiter.waiting == 2 && clock.sleeperCount == 1 }
        clock.advance(by: .milliseconds(100))
        try await poll.value
        #expect(order.entries == ["poll"])
        try await waitUntil { clock.sleeperCount == 1 }
        clock.advance(by: .milliseconds(100))
        try await sync.value
        #expect(order.entries == ["poll", "settlements"])
    }

    @Test("The pump sleeps until the token's time: a clock moved after it computed that time still wakes it then")
    func absoluteDeadlineSleep() async throws {
        let clock = ManualClock()
        let deadline = clock.now.addingTimeInterval(1)
        clock.advance(by: .milliseconds(400))  // time moves between computing the deadline and parking
        let woke = Flag()
        let sleeper = Task {
            try await clock.sleep(until: deadline); woke.set()
        }
        try await waitUntil { clock.sleeperCount == 1 }
        clock.advance(by: .milliseconds(599))
        #expect(!woke.isSet)
        clock.advance(by: .milliseconds(1))  // exactly the deadline (a sleep for 1 s from the stale time would need 400 ms more)
        try await sleeper.value
        #expect(woke.isSet)
        try await clock.sleep(until: deadline)  // already past: returns at once
    }

    @Test("A 429 pause holds a waiting caller until Klarna's reset, then serves it")
    func pauseHoldsWaiters() async throws {
        let clock = ManualClock()
        let limiter = RateLimiter(ratePerSecond: 10, burst: 1, clock: clock)
        try await limiter.acquire(.routine)
        limiter.pause(for: .seconds(2))
        let served = Flag()
        let capture = Task {
            try await limiter.acquire(.deadline)
            served.set()
        }
        try await waitUntil { limiter.waiting == 1 && clock.sleeperCount == 1 }
        clock.advance(by: .seconds(1))
        try await waitUntil { clock.sleeperCount == 1 }
        #expect(!served.isSet, "served during the pause")
        clock.advance(by: .seconds(2))
        try await capture.value
        #expect(served.isSet)
    }

    @Test("A refunded token goes to a waiter at once, not when the pump wakes next")
    func refundServesWaiters() async throws {
        let clock = ManualClock()
        let limiter = RateLimiter(ratePerSecond: 1, burst: 1, clock: clock)
        #expect(limiter.takeSpare(limit: 1) == 1)
        let waiter = Task { try await limiter.acquire(.inMotion) }
        try await waitUntil { limiter.waiting == 1 && clock.sleeperCount == 1 }
        limiter.refund(1)
        // Served without the clock moving.
        #expect(try await waiter.value == .zero)
        #expect(limiter.waiting == 0)
    }

    @Test("A prepaid token is spent by the first call only; a cancelled waiter leaves the queue")
    func prepaidAndCancel() async throws {
        let clock = ManualClock()
        let limiter = RateLimiter(ratePerSecond: 1, burst: 1, clock: clock)
        #expect(limiter.takeSpare(limit: 5) == 1)
        let prepaid = RateLimiter.Prepaid()
        let waited = try await RateLimiter.$prepaid.withValue(prepaid) { try await limiter.acquire(.routine) }
        #expect(waited == .zero)
        #expect(!prepaid.use())
        let waiter = Task { try await limiter.acquire(.hinted) }
        try await waitUntil { limiter.waiting == 1 }
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        #expect(limiter.waiting == 0)
    }
}

/// Strings appended from several tasks.
final class OrderLog: Sendable {
    private let lines = Mutex<[String]>([])
    var entries: [String] { lines.withLock { $0 } }
    func append(_ line: String) { lines.withLock { $0.append(line) } }
}
