import Foundation
import Testing
@testable import Engine
import ReconcilerCore
import ReconcilerStore

@Suite("Scheduler")
struct SchedulerTests {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    @Test("Hands out due keys in due order, up to the capacity")
    func order() async {
        let scheduler = Scheduler()
        await scheduler.schedule(.session("c"), at: t0.addingTimeInterval(3))
        await scheduler.schedule(.session("a"), at: t0.addingTimeInterval(1))
        await scheduler.schedule(.session("b"), at: t0.addingTimeInterval(2))
        await scheduler.schedule(.session("later"), at: t0.addingTimeInterval(100))
        #expect(await scheduler.take(now: t0, capacity: 10).isEmpty)
        #expect(await scheduler.take(now: t0.addingTimeInterval(5), capacity: 2).map(\.key) == [.session("a"), .session("b")])
        #expect(await scheduler.take(now: t0.addingTimeInterval(5), capacity: 2).map(\.key) == [.session("c")])
        #expect(await scheduler.nextDue() == t0.addingTimeInterval(100))
    }

    @Test("Rescheduling replaces the plan; a wake only moves it earlier")
    func reschedule() async {
        let scheduler = Scheduler()
        await scheduler.schedule(.order("o"), at: t0.addingTimeInterval(10))
        await scheduler.schedule(.order("o"), at: t0.addingTimeInterval(50))
        #expect(await scheduler.nextDue() == t0.addingTimeInterval(50))
        await scheduler.wake(.order("o"), at: t0.addingTimeInterval(60))
        #expect(await scheduler.nextDue() == t0.addingTimeInterval(50))
        await scheduler.wake(.order("o"), at: t0.addingTimeInterval(5))
        #expect(await scheduler.nextDue() == t0.addingTimeInterval(5))
        #expect(await scheduler.take(now: t0.addingTimeInterval(100), capacity: 10).map(\.key) == [.order("o")])
        #expect(await scheduler.scheduledCount == 0)
    }

    @Test("A running key is never handed out twice; a wake during the run runs it again afterwards")
    func perKeySerialization() async {
        let scheduler = Scheduler()
        await scheduler.schedule(.session("s"), at: t0)
        #expect(await scheduler.take(now: t0, capacity: 10).map(\.key) == [.session("s")])
        await scheduler.wake(.session("s"), at: t0)
        await scheduler.schedule(.session("s"), at: t0)
        #expect(await scheduler.take(now: t0.addingTimeInterval(1), capacity: 10).isEmpty)
        // The worker says "again in an hour"; the wake during the run wins.
        await scheduler.finished(.session("s"), next: t0.addingTimeInterval(3_600))
        #expect(await scheduler.take(now: t0.addingTimeInterval(1), capacity: 10).map(\.key) == [.session("s")])
        await scheduler.finished(.session("s"), next: nil)
        #expect(await scheduler.nextDue() == nil)
    }

    @Test("A wake marks the next run as hinted, once; a plain schedule does not")
    func hints() async {
        let scheduler = Scheduler()
        await scheduler.schedule(.order("o"), at: t0)
        #expect(await scheduler.take(now: t0, capacity: 1) == [Scheduler.Job(key: .order("o"), hinted: false)])
        await scheduler.wake(.order("o"), at: t0)
        await scheduler.finished(.order("o"), next: t0.addingTimeInterval(3_600))
        #expect(await scheduler.take(now: t0, capacity: 1) == [Scheduler.Job(key: .order("o"), hinted: true)])
        await scheduler.finished(.order("o"), next: t0)
        #expect(await scheduler.take(now: t0, capacity: 1) == [Scheduler.Job(key: .order("o"), hinted: false)])
    }

    @Test("A finished key with nothing to do disappears; running count tracks workers")
    func finishing() async {
        let scheduler = Scheduler()
        for index in 0..<5 { await scheduler.schedule(.order("\(index)"), at: t0) }
        let taken = await scheduler.take(now: t0, capacity: 3)
        #expect(taken.count == 3)
        #expect(await scheduler.runningCount == 3)
        for job in taken { await scheduler.finished(job.key, next: nil) }
        #expect(await scheduler.runningCount == 0)
        #expect(await scheduler.take(now: t0, capacity: 10).count == 2)
    }

    @Test("Scales: 100,000 keys come out in due order")
    func manyKeys() async {
        let scheduler = Scheduler()
        var generator = SystemRandomNumberGenerator()
        for index in 0..<100_000 {
            await scheduler.schedule(.session("\(index)"), at: t0.addingTimeInterval(Double(generator.next() % 1_000_000)))
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
        #expect(ContinuousClock.now - started < .seconds(5))
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
