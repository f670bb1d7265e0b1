import Foundation
import Testing
import TestSupport
@testable import Engine
import ReconcilerCore
import ReconcilerStore

@Suite("Scheduler")
struct SchedulerTests {
    @Test("Hands out due keys in due order, up to the capacity")
    func order() async {
        let scheduler = Scheduler()
        await scheduler.schedule(.session("c"), at: Fixtures.t0.addingTimeInterval(3))
        await scheduler.schedule(.session("a"), at: Fixtures.t0.addingTimeInterval(1))
        await scheduler.schedule(.session("b"), at: Fixtures.t0.addingTimeInterval(2))
        await scheduler.schedule(.session("later"), at: Fixtures.t0.addingTimeInterval(100))
        #expect(await scheduler.take(now: Fixtures.t0, capacity: 10).isEmpty)
        #expect(await scheduler.take(now: Fixtures.t0.addingTimeInterval(5), capacity: 2).map(\.key) == [.session("a"), .session("b")])
        #expect(await scheduler.take(now: Fixtures.t0.addingTimeInterval(5), capacity: 2).map(\.key) == [.session("c")])
        #expect(await scheduler.nextDue() == Fixtures.t0.addingTimeInterval(100))
    }

    @Test("Rescheduling replaces the plan; a wake only moves it earlier")
    func reschedule() async {
        let scheduler = Scheduler()
        await scheduler.schedule(.order("o"), at: Fixtures.t0.addingTimeInterval(10))
        await scheduler.schedule(.order("o"), at: Fixtures.t0.addingTimeInterval(50))
        #expect(await scheduler.nextDue() == Fixtures.t0.addingTimeInterval(50))
        await scheduler.wake(.order("o"), at: Fixtures.t0.addingTimeInterval(60))
        #expect(await scheduler.nextDue() == Fixtures.t0.addingTimeInterval(50))
        await scheduler.wake(.order("o"), at: Fixtures.t0.addingTimeInterval(5))
        #expect(await scheduler.nextDue() == Fixtures.t0.addingTimeInterval(5))
        #expect(await scheduler.take(now: Fixtures.t0.addingTimeInterval(100), capacity: 10).map(\.key) == [.order("o")])
        #expect(await scheduler.scheduledCount == 0)
    }

    @Test("A key another daemon took is forgotten: its plan and hint go, and a running one is dropped when its worker is done")
    func forget() async {
        let scheduler = Scheduler()
        await scheduler.schedule(.session("waiting"), at: Fixtures.t0)
        await scheduler.wake(.session("waiting"), at: Fixtures.t0)
        await scheduler.schedule(.session("running"), at: Fixtures.t0)
        #expect(await scheduler.take(now: Fixtures.t0, capacity: 1).map(\.key) == [.session("waiting")])
        await scheduler.finished(.session("waiting"), next: WorkPlan(due: Fixtures.t0, urgency: .routine))
        await scheduler.forget(.session("waiting"))
        #expect(await !scheduler.has(.session("waiting")))
        #expect(await scheduler.take(now: Fixtures.t0, capacity: 1).map(\.key) == [.session("running")])
        await scheduler.forget(.session("running"))
        await scheduler.wake(.session("other"), at: Fixtures.t0)
        await scheduler.finished(.session("running"), next: WorkPlan(due: Fixtures.t0, urgency: .inMotion))
        #expect(await !scheduler.has(.session("running")), "what the worker wanted next is dropped")
        #expect(await scheduler.take(now: Fixtures.t0, capacity: 10).map(\.key) == [.session("other")])
        // Claimed again later: planned as any key.
        await scheduler.forget(.session("again"))
        await scheduler.schedule(.session("again"), at: Fixtures.t0)
        #expect(await scheduler.take(now: Fixtures.t0, capacity: 10).map(\.key) == [.session("again")])
    }

    @Test("A running key is never handed out twice; a wake during the run runs it again afterwards")
    func perKeySerialization() async {
        let scheduler = Scheduler()
        await scheduler.schedule(.session("s"), at: Fixtures.t0)
        #expect(await scheduler.take(now: Fixtures.t0, capacity: 10).map(\.key) == [.session("s")])
        await scheduler.wake(.session("s"), at: Fixtures.t0)
        await scheduler.schedule(.session("s"), at: Fixtures.t0)
        #expect(await scheduler.take(now: Fixtures.t0.addingTimeInterval(1), capacity: 10).isEmpty)
        // The worker says "again in an hour"; the wake during the run wins.
        await scheduler.finished(.session("s"), next: WorkPlan(due: Fixtures.t0.addingTimeInterval(3_600), urgency: .inMotion))
        #expect(await scheduler.take(now: Fixtures.t0.addingTimeInterval(1), capacity: 10).map(\.key) == [.session("s")])
        await scheduler.finished(.session("s"), next: nil)
        #expect(await scheduler.nextDue() == nil)
    }

    @Test("A wake marks the next run as hinted, once; a plain schedule does not")
    func hints() async {
        let scheduler = Scheduler()
        await scheduler.schedule(.order("o"), at: Fixtures.t0)
        #expect(await scheduler.take(now: Fixtures.t0, capacity: 1) == [Scheduler.Job(key: .order("o"), hinted: false)])
        await scheduler.wake(.order("o"), at: Fixtures.t0)
        await scheduler.finished(.order("o"), next: WorkPlan(due: Fixtures.t0.addingTimeInterval(3_600), urgency: .inMotion))
        #expect(await scheduler.take(now: Fixtures.t0, capacity: 1) == [Scheduler.Job(key: .order("o"), hinted: true)])
        await scheduler.finished(.order("o"), next: WorkPlan(due: Fixtures.t0, urgency: .inMotion))
        #expect(await scheduler.take(now: Fixtures.t0, capacity: 1) == [Scheduler.Job(key: .order("o"), hinted: false)])
    }

    @Test("A finished key with nothing to do disappears; running count tracks workers")
    func finishing() async {
        let scheduler = Scheduler()
        for index in 0..<5 { await scheduler.schedule(.order("\(index)"), at: Fixtures.t0) }
        let taken = await scheduler.take(now: Fixtures.t0, capacity: 3)
        #expect(taken.count == 3)
        #expect(await scheduler.runningCount == 3)
        for job in taken { await scheduler.finished(job.key, next: nil) }
        #expect(await scheduler.runningCount == 0)
        #expect(await scheduler.take(now: Fixtures.t0, capacity: 10).count == 2)
    }

    @Test("Scales: 100,000 keys come out in due order")
    func manyKeys() async {
        let scheduler = Scheduler()
        var generator = SystemRandomNumberGenerator()
        for index in 0..<100_000 {
            await scheduler.schedule(.session("\(index)"), at: Fixtures.t0.addingTimeInterval(Double(generator.next() % 1_000_000)))
        }
        var previous = Date.distantPast
        var count = 0
        while let due = await scheduler.nextDue() {
            #expect(due >= previous)
            previous = due
            count += await scheduler.take(now: due, capacity: 1_000).count
        }
        #expect(count == 100_000)
    }
}

@Suite("Scheduler: urgency and the rate budget")
struct SchedulerBudgetTests {
    func poll(tracked ago: TimeInterval, read: TimeInterval?, hint: TimeInterval? = nil, now: Date) -> PollProfile {
        PollProfile(
            trackedAt: now.addingTimeInterval(-ago), lastReadAt: read.map { now.addingTimeInterval(-$0) },
            lastHintAt: hint.map { now.addingTimeInterval(-$0) })
    }

    @Test("Due keys go out most urgent first, by due time within a level")
    func urgencyFirst() async {
        let scheduler = Scheduler()
        await scheduler.schedule(.session("poll"), at: Fixtures.t0, urgency: .routine)
        await scheduler.schedule(.session("hinted"), at: Fixtures.t0, urgency: .hinted)
        await scheduler.schedule(.order("capture-late"), at: Fixtures.t0.addingTimeInterval(1), urgency: .inMotion)
        await scheduler.schedule(.order("capture"), at: Fixtures.t0, urgency: .inMotion)
        await scheduler.schedule(.session("token-expiring"), at: Fixtures.t0.addingTimeInterval(2), urgency: .deadline)
        let jobs = await scheduler.take(now: Fixtures.t0.addingTimeInterval(5), capacity: 10)
        #expect(jobs.map(\.key) == [.session("token-expiring"), .order("capture"), .order("capture-late"), .session("hinted"), .session("poll")])
        #expect(jobs.map(\.urgency) == [.deadline, .inMotion, .inMotion, .hinted, .routine])
    }

    @Test("Routine reads go out only as fast as the budget has spare tokens, each with its token prepaid")
    func pollsFitTheBudget() async throws {
        let clock = ManualClock(now: Fixtures.t0)
        let budget = RateLimiter(ratePerSecond: 50, burst: 10, clock: clock)
        let scheduler = Scheduler()
        for index in 0..<1_000 {
            await scheduler.schedule(.session("s\(index)"), at: Fixtures.t0, urgency: .routine, poll: poll(tracked: 60, read: 2, now: Fixtures.t0))
        }
        let burst = await scheduler.take(now: Fixtures.t0, capacity: 100, budget: budget)
        #expect(burst.count == 10 - Int(RateBudget.liveReserve), "the burst less the tokens kept for live payments")
        #expect(burst.allSatisfy { $0.prepaid && $0.urgency == .routine })
        #expect(await scheduler.take(now: Fixtures.t0, capacity: 100, budget: budget).isEmpty)
        // The dispatcher sleeps until the next token, not until the next due time (which has passed).
        let next = try #require(await scheduler.nextDue(budget: budget))
        #expect(abs(next.timeIntervalSince(Fixtures.t0) - 0.02) < 1e-6)
        clock.advance(by: .milliseconds(20))
        #expect(await scheduler.take(now: clock.now, capacity: 100, budget: budget).count == 1)
    }

    @Test("Each account's routine reads go out as fast as its own budget allows: one account polling at its limit leaves another's tokens alone")
    func budgetsPerAccount() async throws {
        let clock = ManualClock(now: Fixtures.t0)
        let (a, b) = (AccountID(rawValue: "a")!, AccountID(rawValue: "b")!)
        let budgets = [
            a: RateLimiter(ratePerSecond: 50, burst: 10, reserve: 0, clock: clock),
            b: RateLimiter(ratePerSecond: 5, burst: 2, reserve: 0, clock: clock),
        ]
        let scheduler = Scheduler()
        for index in 0..<1_000 {
            let profile = poll(tracked: 60, read: 2, now: Fixtures.t0)
            await scheduler.schedule(.session("a\(index)"), WorkPlan(due: Fixtures.t0, urgency: .routine, poll: profile, account: a))
        }
        for index in 0..<3 {
            let profile = poll(tracked: 60, read: 2, now: Fixtures.t0)
            await scheduler.schedule(.session("b\(index)"), WorkPlan(due: Fixtures.t0, urgency: .routine, poll: profile, account: b))
        }
        let first = await scheduler.take(now: Fixtures.t0, capacity: 100) { budgets[$0] }
        // A's burst is A's ten tokens; B's two reads come from B's own budget, not from what A left.
        #expect(first.filter { $0.key.description.contains("a") }.count == 10)
        #expect(first.filter { $0.key.description.contains("b") }.count == 2)
        #expect(first.allSatisfy { $0.prepaid })
        #expect(Set(first.compactMap(\.account)) == [a, b])
        #expect(await scheduler.take(now: Fixtures.t0, capacity: 100) { budgets[$0] }.isEmpty)
        // The next token is A's (every 20 ms); B's third read waits for B's (200 ms).
        let next = try #require(await scheduler.nextDue { budgets[$0] })
        #expect(abs(next.timeIntervalSince(Fixtures.t0) - 0.02) < 1e-6)
        clock.advance(by: .milliseconds(20))
        #expect(await scheduler.take(now: clock.now, capacity: 100) { budgets[$0] }.map(\.account) == [a])
        clock.advance(by: .milliseconds(180))
        let later = await scheduler.take(now: clock.now, capacity: 100) { budgets[$0] }
        #expect(later.filter { $0.account == b }.count == 1, "B's one token in 200 ms")
    }

    @Test(
        "Renewals waiting behind the live payments' reserve hold their account's next renewal back until a token beyond the reserve, not in a loop at the token that is there"
    )
    func heldBehindTheReserve() async throws {
        let clock = ManualClock(now: Fixtures.t0)
        let account = AccountID.default
        let budget = RateLimiter(ratePerSecond: 50, burst: 10, clock: clock)
        #expect(budget.takeSpare(limit: 100) == 8, "two tokens left: the reserve")
        let charge = Task { try await budget.acquire(.renewal) }
        try await waitUntil { budget.waiting == 1 }
        let scheduler = Scheduler()
        await scheduler.schedule(.customerToken("renewal-2"), WorkPlan(due: Fixtures.t0, urgency: .renewal, account: account))
        #expect(await scheduler.take(now: clock.now, capacity: 10) { _ in budget }.isEmpty, "held back: a renewal waits already")
        // Two tokens are there, but not for renewals: the next look is when a third exists (20 ms), not now.
        let next = try #require(await scheduler.nextDue { _ in budget })
        #expect(abs(next.timeIntervalSince(Fixtures.t0) - 0.021) < 1e-6)
        clock.advance(by: .milliseconds(21))
        _ = try await charge.value
        #expect(await scheduler.take(now: clock.now, capacity: 10) { _ in budget }.map(\.key) == [.customerToken("renewal-2")])
    }

    @Test(
        "A due key whose account already has a caller as urgent waiting for its budget stays queued, not in a worker slot: the slots go to the other account's work, a more urgent key of the same account still goes, and the rest go at the account's next token"
    )
    func heldWhileItsBudgetIsTaken() async throws {
        let clock = ManualClock(now: Fixtures.t0)
        let (a, b) = (AccountID(rawValue: "a")!, AccountID(rawValue: "b")!)
        let budgets = [a: RateLimiter(ratePerSecond: 50, burst: 10, clock: clock), b: RateLimiter(ratePerSecond: 5, burst: 1, clock: clock)]
        // B's one token is spent; a hinted read of B's waits for the next, 200 ms on.
        _ = try await budgets[b]!.acquire(.hinted)
        let waiter = Task { try await budgets[b]!.acquire(.hinted) }
        try await waitUntil { budgets[b]!.waiting == 1 }
        let scheduler = Scheduler()
        let bKeys = (0..<3).map { WorkKey.session("b\($0)") }, aKeys = (0..<3).map { WorkKey.session("a\($0)") }
        for key in bKeys.dropLast() { await scheduler.schedule(key, WorkPlan(due: Fixtures.t0, urgency: .hinted, account: b)) }
        // A new session a callback woke, with the account the callback named: weighed against B's budget at once.
        await scheduler.wake(bKeys[2], at: Fixtures.t0, account: b)
        for key in aKeys { await scheduler.schedule(key, WorkPlan(due: Fixtures.t0, urgency: .hinted, account: a)) }
        await scheduler.schedule(.order("b-capture"), WorkPlan(due: Fixtures.t0, urgency: .inMotion, account: b))

        let first = await scheduler.take(now: Fixtures.t0, capacity: 100) { budgets[$0] }
        #expect(Set(first.map(\.key)) == Set(aKeys + [.order("b-capture")]), "\(first.map(\.key))")
        #expect(await scheduler.backlog(now: Fixtures.t0) == 3, "B's hinted reads wait here, planned")
        #expect(await scheduler.take(now: Fixtures.t0, capacity: 100) { budgets[$0] }.isEmpty)
        // Not a spin: the dispatcher looks again at B's next token.
        let next = try #require(await scheduler.nextDue { budgets[$0] })
        #expect(abs(next.timeIntervalSince(Fixtures.t0) - 0.201) < 1e-6, "\(next.timeIntervalSince(Fixtures.t0))")

        clock.advance(by: .milliseconds(201))
        _ = try await waiter.value
        let later = await scheduler.take(now: clock.now, capacity: 100) { budgets[$0] }
        #expect(Set(later.map(\.key)) == Set(bKeys), "\(later.map(\.key))")
    }

    @Test(
        "Keys held back for their budget and planned again or forgotten meanwhile go out by their new plan, each once; one planned again more urgent than the callers waiting goes at once"
    )
    func heldBackThenPlannedAgain() async throws {
        let clock = ManualClock(now: Fixtures.t0)
        let account = AccountID(rawValue: "a")!
        let budget = RateLimiter(ratePerSecond: 5, burst: 1, clock: clock)
        _ = try await budget.acquire(.hinted)
        let waiter = Task { try await budget.acquire(.hinted) }
        try await waitUntil { budget.waiting == 1 }
        let scheduler = Scheduler()
        let keys = (0..<2_000).map { WorkKey.session("s\($0)") }
        for key in keys { await scheduler.schedule(key, WorkPlan(due: Fixtures.t0, urgency: .hinted, account: account)) }
        #expect(await scheduler.take(now: Fixtures.t0, capacity: 100) { _ in budget }.isEmpty)
        // While they are held: one is planned for later, one is forgotten, one is planned again for now (below).
        await scheduler.schedule(keys[0], WorkPlan(due: Fixtures.t0.addingTimeInterval(60), urgency: .hinted, account: account))
        await scheduler.forget(keys[1])
        // Planned again often enough, each time held again, that the stale entries of it are dropped on the way: the
        // held list passes 2 × 1,999 plans + 1,024 = 5,022 entries after about 3,000 of these.
        for _ in 0..<5_200 {
            await scheduler.schedule(keys[2], WorkPlan(due: Fixtures.t0, urgency: .hinted, account: account))
            try #require(await scheduler.take(now: Fixtures.t0, capacity: 100) { _ in budget }.isEmpty)
        }
        // Only hinted callers wait: a key planned again in motion goes at once.
        await scheduler.schedule(keys[3], WorkPlan(due: Fixtures.t0, urgency: .inMotion, account: account))
        #expect(await scheduler.take(now: Fixtures.t0, capacity: 100) { _ in budget }.map(\.key) == [keys[3]])
        await scheduler.finished(keys[3], next: nil)

        clock.advance(by: .milliseconds(201))
        _ = try await waiter.value
        var handed: [WorkKey] = []
        while true {
            let jobs = await scheduler.take(now: clock.now, capacity: 500) { _ in budget }
            if jobs.isEmpty { break }
            handed += jobs.map(\.key)
        }
        #expect(handed.count == keys.count - 3, "each once")
        #expect(Set(handed) == Set(keys.dropFirst(2)).subtracting([keys[3]]))
        #expect(await scheduler.nextDue { _ in budget } == Fixtures.t0.addingTimeInterval(60), "the one planned for later waits for its time")
    }

    @Test("A side effect enqueued behind 10,000 due polls starts within one token interval")
    func sideEffectBehindPolls() async throws {
        let clock = ManualClock(now: Fixtures.t0)
        let budget = RateLimiter(ratePerSecond: 50, burst: 10, clock: clock)
        let scheduler = Scheduler()
        for index in 0..<10_000 {
            await scheduler.schedule(.session("s\(index)"), at: Fixtures.t0, urgency: .routine, poll: poll(tracked: 120, read: 10, now: Fixtures.t0))
        }
        // Polls run for a while: each takes its prepaid token and comes back due again.
        for _ in 0..<100 {
            for job in await scheduler.take(now: clock.now, capacity: 16, budget: budget) {
                await scheduler.finished(
                    job.key, next: WorkPlan(due: clock.now, urgency: .routine, poll: poll(tracked: 130, read: 0, now: clock.now)))
            }
            clock.advance(by: .milliseconds(20))
        }
        await scheduler.schedule(.order("capture"), at: clock.now, urgency: .inMotion)
        let jobs = await scheduler.take(now: clock.now, capacity: 16, budget: budget)
        #expect(jobs.first?.key == .order("capture"))
        let enqueued = clock.now
        let acquired = Flag()
        let call = Task {
            let waited = try await budget.acquire(.inMotion)
            acquired.set()
            return waited
        }
        try await waitUntil { acquired.isSet || (budget.waiting == 1 && clock.sleeperCount >= 1) }
        // Polls keep asking while the capture waits: none is admitted ahead of it.
        #expect(await scheduler.take(now: clock.now, capacity: 16, budget: budget).allSatisfy { !$0.prepaid })
        if !acquired.isSet { clock.advance(by: .milliseconds(20)) }
        let waited = try await call.value
        #expect(waited <= .milliseconds(20))
        #expect(clock.now.timeIntervalSince(enqueued) <= 0.020 + 1e-9)
    }

    @Test(
        "Routine reads are chosen by value: a never-read session, then one at the typical completion age, then one abandoned an hour ago; callbacks make polling a safety net"
    )
    func byValue() async {
        let scheduler = Scheduler()
        let now = Fixtures.t0
        await scheduler.schedule(
            .session("abandoned"), at: Fixtures.t0.addingTimeInterval(-100), urgency: .routine, poll: poll(tracked: 3_600, read: 60, now: now))
        await scheduler.schedule(.session("typical"), at: Fixtures.t0, urgency: .routine, poll: poll(tracked: 170, read: 20, now: now))
        await scheduler.schedule(.session("callbacks"), at: Fixtures.t0, urgency: .routine, poll: poll(tracked: 170, read: 20, hint: 30, now: now))
        await scheduler.schedule(.session("new"), at: Fixtures.t0, urgency: .routine, poll: poll(tracked: 1, read: nil, now: now))
        var order: [WorkKey] = []
        for _ in 0..<4 { order += await scheduler.take(now: now, capacity: 1).map(\.key) }
        #expect(order == [.session("new"), .session("typical"), .session("callbacks"), .session("abandoned")])
    }

    @Test("No poll starves: every fairEvery-th routine pick goes to the read due longest, whatever its value")
    func noStarvation() async {
        let scheduler = Scheduler()
        await scheduler.schedule(
            .session("abandoned"), at: Fixtures.t0.addingTimeInterval(-7_200), urgency: .routine,
            poll: poll(tracked: 86_000, read: 7_200, now: Fixtures.t0))
        for index in 0..<100 {
            await scheduler.schedule(.session("hot\(index)"), at: Fixtures.t0, urgency: .routine, poll: poll(tracked: 180, read: 5, now: Fixtures.t0))
        }
        var picks: [WorkKey] = []
        for _ in 0..<Scheduler.fairEvery { picks += await scheduler.take(now: Fixtures.t0, capacity: 1).map(\.key) }
        #expect(picks.contains(.session("abandoned")))
    }

    @Test(
        "More due reads than one slice: a new ranking is valued a slice per take while the one before serves, then picks by value"
    )
    func rankingInSlices() async {
        let scheduler = Scheduler()
        for index in 0..<3_000 {
            await scheduler.schedule(
                .session("cold\(index)"), at: Fixtures.t0, urgency: .routine, poll: poll(tracked: 86_000, read: 7_200, now: Fixtures.t0))
        }
        _ = await scheduler.take(now: Fixtures.t0, capacity: 1)
        // A read worth far more becomes due after the first ranking, which does not know it.
        let later = Fixtures.t0.addingTimeInterval(2)
        await scheduler.schedule(.session("hot"), at: later, urgency: .routine, poll: poll(tracked: 180, read: 5, now: later))
        var picks: [WorkKey] = []
        for _ in 0..<3 { picks += await scheduler.take(now: later, capacity: 1).map(\.key) }
        #expect(picks.first != .session("hot"), "the first slice is valued; the ranking before serves")
        #expect(picks.contains(.session("hot")), "\(picks)")
    }

    @Test("When urgent callers use the whole budget, one routine read at a time still joins its queue")
    func routineUnderSaturation() async throws {
        let clock = ManualClock(now: Fixtures.t0)
        let budget = RateLimiter(ratePerSecond: 1, burst: 1, clock: clock)
        try await budget.acquire(.inMotion)
        let urgent = Task { try await budget.acquire(.inMotion) }
        try await waitUntil { budget.waiting == 1 }
        let scheduler = Scheduler()
        for index in 0..<3 { await scheduler.schedule(.session("s\(index)"), at: Fixtures.t0, urgency: .routine) }
        let jobs = await scheduler.take(now: Fixtures.t0, capacity: 10, budget: budget)
        #expect(jobs.count == 1)
        #expect(jobs.first?.prepaid == false)
        #expect(await scheduler.take(now: Fixtures.t0, capacity: 10, budget: budget).isEmpty)
        urgent.cancel()
    }

    @Test("A wake makes a key a hinted read; it keeps a higher urgency it already had")
    func wakeUrgency() async {
        let scheduler = Scheduler()
        await scheduler.schedule(.session("poll"), at: Fixtures.t0.addingTimeInterval(60), urgency: .routine)
        await scheduler.schedule(.order("capture"), at: Fixtures.t0.addingTimeInterval(60), urgency: .inMotion)
        await scheduler.wake(.session("poll"), at: Fixtures.t0)
        await scheduler.wake(.order("capture"), at: Fixtures.t0)
        let jobs = await scheduler.take(now: Fixtures.t0, capacity: 10)
        #expect(
            jobs == [
                Scheduler.Job(key: .order("capture"), hinted: true, urgency: .inMotion),
                Scheduler.Job(key: .session("poll"), hinted: true, urgency: .hinted),
            ])
    }
}

@Suite("Doorbell")
struct DoorbellTests {
    @Test("A ring before the wait is not lost; a wait without a ring ends at the timeout")
    func ringAndTimeout() async {
        let bell = Doorbell()
        bell.ring()
        await bell.wait(timeout: nil, clock: SystemClock())
        let started = ContinuousClock.now
        await bell.wait(timeout: .milliseconds(50), clock: SystemClock())
        #expect(ContinuousClock.now - started >= .milliseconds(40))
    }

    @Test("A ring wakes a waiter at once")
    func ringWakes() async {
        let bell = Doorbell()
        async let waited: Void = bell.wait(timeout: .seconds(30), clock: SystemClock())
        try? await Task.sleep(for: .milliseconds(20))
        let started = ContinuousClock.now
        bell.ring()
        await waited
        // Well short of the 30 s timeout, with room for CI's two loaded cores (a full run once took 5.09 s here).
        #expect(ContinuousClock.now - started < .seconds(20))
    }
}

@Suite("Idempotency keys")
struct IdempotencyKeyTests {
    @Test("UUIDv5 matches RFC 9562's test vector and Python's uuid5")
    func vector() {
        // uuid.uuid5(uuid.NAMESPACE_DNS, "www.example.com") (RFC 9562, appendix A.4)
        let dns = UUID(uuidString: "6ba7b810-9dad-11d1-80b4-00c04fd430c8")!
        #expect(IdempotencyKey.uuidV5(namespace: dns, name: "www.example.com").uuidString.lowercased() == "2ed6657d-e927-568b-95e1-2665a8aea6a2")
    }

    @Test("Same operation and target give the same key; anything else differs")
    func deterministic() {
        #expect(IdempotencyKey.make(.capture, "o-1:full") == IdempotencyKey.make(.capture, "o-1:full"))
        #expect(IdempotencyKey.make(.capture, "o-1:full") != IdempotencyKey.make(.capture, "o-2:full"))
        #expect(IdempotencyKey.make(.capture, "o-1:full") != IdempotencyKey.make(.extendAuthorization, "o-1:full"))
        let key = IdempotencyKey.make(.placeOrder, "kp")
        #expect(key.count == 36)
        #expect(key[key.index(key.startIndex, offsetBy: 14)] == "5")
    }
}
