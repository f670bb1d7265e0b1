import Foundation
import Logging
import ReconcilerCore
import ReconcilerStore
import ServiceLifecycle

/// Runs due work with bounded concurrency. Sleeps until the next due time or a doorbell ring (new work, a worker
/// finishing); on graceful shutdown it stops taking work and lets the running workers finish their step.
public struct WorkerService: Service {
    public let reconciler: Reconciler
    /// Where the open work and the wakeups of other processes come from.
    public let queue: any WorkQueue
    public let scheduler: Scheduler
    private let logger: Logger
    /// Beaten every time round the dispatch loop, for the watchdog.
    public let heartbeat: Heartbeat?
    /// With several daemons on one store: the share of the work this daemon holds. `nil`: all of it is this one's.
    public let leases: LeaseKeeper?
    /// Fault injection for the watchdog's system test (`testing.wedge_work_loop_file`): when this file appears, the
    /// dispatch loop removes it and hangs for good, as a deadlocked loop would.
    private let wedgeFile: String?

    public init(
        reconciler: Reconciler, queue: any WorkQueue, scheduler: Scheduler, logger: Logger, heartbeat: Heartbeat? = nil, leases: LeaseKeeper? = nil,
        wedgeFile: String? = nil
    ) {
        self.reconciler = reconciler
        self.leases = leases
        self.queue = queue
        self.scheduler = scheduler
        self.logger = logger
        self.heartbeat = heartbeat
        self.wedgeFile = wedgeFile
    }

    /// Loads every open session and order into the scheduler, and the wakeups a previous run left (a delivery
    /// committed just before a crash); with leases, registers and claims this daemon's first share instead. Call
    /// before `run`, ahead of READY.
    public func loadOpenWork() async throws -> Int {
        if let leases {
            try await leases.start()
            return await adoptClaims()
        }
        let now = reconciler.clock.now
        let work = try await queue.openWork()
        for item in work { await scheduler.schedule(item.key, item.plan(now: now, deadlines: reconciler.settings.deadlines)) }
        let left = try await queue.wakeups(after: 0, includingDelivered: true)
        for key in left.keys { await scheduler.wake(key, at: now) }
        // An operator request whose wakeup was consumed before the daemon stopped still waits for its answer.
        for key in try await queue.keysWithPendingOperatorRequests() { await scheduler.wake(key, at: now) }
        return work.count
    }

    public func run() async throws {
        let stopping = Live(false)  // set once graceful shutdown begins
        let wakeupBell = Doorbell()
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                // With leases, the keeper takes the wakeups of the keys this daemon holds.
                if leases == nil { group.addTask { await pollWakeups(until: stopping, bell: wakeupBell) } }
                await dispatch(group: &group, until: stopping)
            }
        } onGracefulShutdown: {
            stopping.replace(with: true)
            reconciler.stopSendingSideEffects()
            scheduler.doorbell.ring()
            wakeupBell.ring()
        }
    }

    private func dispatch(group: inout DiscardingTaskGroup, until stopping: Live<Bool>) async {
        let clock = reconciler.clock
        while !stopping.value, !Task.isCancelled {
            heartbeat?.beat()
            if let wedgeFile, unlink(wedgeFile) == 0 {
                logger.critical("fault injection: \(wedgeFile) found; the work loop hangs now")
                await withCheckedContinuation { (_: CheckedContinuation<Void, Never>) in }
            }
            await adoptClaims()
            if reconciler.disk?.pressure != nil {
                // A full disk: no step starts (it could record nothing); the steps under way finish and record their
                // answers. The disk watch rings the doorbell when space returns.
                await scheduler.doorbell.wait(timeout: heartbeat?.interval ?? .seconds(1), clock: clock)
                continue
            }
            let limit = reconciler.settings.maxConcurrency
            let capacity = limit - (await scheduler.runningCount)
            let jobs = capacity > 0 ? await scheduler.take(now: clock.now, capacity: capacity, budgetOf: reconciler.accounts.budget(of:)) : []
            for job in jobs { group.addTask { await perform(job) } }
            if !jobs.isEmpty { continue }
            let due = await scheduler.nextDue(budgetOf: reconciler.accounts.budget(of:)).map {
                Duration(timeInterval: max(0, $0.timeIntervalSince(clock.now)))
            }
            // At capacity, only a finishing worker (which rings) can change anything; the heartbeat still wakes the
            // loop so the watchdog can tell a quiet loop from a hung one.
            let timeout = [capacity > 0 ? due : nil, heartbeat?.interval].compactMap { $0 }.min()
            await scheduler.doorbell.wait(timeout: timeout, clock: clock)
        }
    }

    /// Plans the keys the lease keeper claimed: by their open state, or at once when they were woken (a hint, an
    /// operator request) rather than open. Returns how many.
    @discardableResult
    private func adoptClaims() async -> Int {
        guard let leases else { return 0 }
        let claims = leases.takeClaims()
        let now = reconciler.clock.now
        for claim in claims {
            if let work = claim.work { await scheduler.schedule(claim.key, work.plan(now: now, deadlines: reconciler.settings.deadlines)) }
            if claim.work == nil || leases.wasHinted(claim.key) { await scheduler.wake(claim.key, at: now) }
        }
        return claims.count
    }

    /// Runs one job to the end of its step and tells the scheduler what comes next. A routine read admitted with a
    /// spare token spends it on its first call; a job that made no call gives it back.
    public func perform(_ job: Scheduler.Job) async {
        let prepaid = job.prepaid ? RateLimiter.Prepaid() : nil
        let (result, lost) = await RateLimiter.$prepaid.withValue(prepaid) { await work(job) }
        if let prepaid, prepaid.use() { reconciler.accounts.budget(of: job.account ?? .default)?.refund(1) }
        if let ending = result.ending { await scheduler.observe(ending) }
        for other in result.wake {
            if let leases { await leases.hint(other) } else { await scheduler.schedule(other, at: reconciler.clock.now, urgency: result.wakeUrgency) }
        }
        await scheduler.finished(job.key, next: result.next)
        if let leases {
            if lost { await leases.lost(job.key) } else if result.next == nil { leases.finished(job.key) }
        }
    }

    /// Runs one key; a failure of the store or anything unexpected is logged and the key tried again later, never
    /// dropped. `lost`: another daemon holds the key now.
    private func work(_ job: Scheduler.Job) async -> (Reconciler.WorkResult, lost: Bool) {
        let key = job.key
        let metadata: Logger.Metadata = ["work_key": .string(key.description)]
        // The key runs again `delay` after its step ended, at the urgency it had.
        func again(after delay: Duration) -> Reconciler.WorkResult {
            Reconciler.WorkResult(
                next: WorkPlan(due: reconciler.clock.now.addingTimeInterval(delay.timeInterval), urgency: job.urgency, account: job.account))
        }
        do {
            return (try await reconciler.process(key, hinted: job.hinted), false)
        } catch let error as LeaseLost {
            logger.notice("\(error)", metadata: metadata)
            return (Reconciler.WorkResult(next: nil), true)
        } catch let moved as IntentMoved {
            // Another session of the same KP session wrote the intent they share since this step read it: no
            // failure, but the key waits as after one (that session's send settles first anyway, and at once would
            // spin on a store edited by hand).
            let delay = failedStepDelay
            logger.notice("\(moved); trying again in \(delay)", metadata: metadata)
            return (again(after: delay), false)
        } catch is CancellationError {
            return (Reconciler.WorkResult(next: WorkPlan(due: reconciler.clock.now, urgency: job.urgency, account: job.account)), false)
        } catch {
            let delay = failedStepDelay
            logger.error("work on \(key) failed: \(error); trying again in \(delay)", metadata: metadata)
            return (again(after: delay), false)
        }
    }

    /// How long a key waits after its step failed: a tenth of the read backoff's cap, as the settings are then.
    private var failedStepDelay: Duration { reconciler.settings.readRetry.maxDelay / 10 }

    /// Picks up what `track` and `capture` (other processes) left in the store.
    private func pollWakeups(until stopping: Live<Bool>, bell: Doorbell) async {
        var last: Int64 = 0
        while !stopping.value, !Task.isCancelled {
            do {
                let (keys, newest) = try await queue.wakeups(after: last, includingDelivered: false)
                last = newest
                for key in keys { await scheduler.wake(key, at: reconciler.clock.now) }
            } catch {
                logger.warning("cannot read wakeups from the store: \(error)")
            }
            await bell.wait(timeout: reconciler.settings.wakeupInterval, clock: reconciler.clock)
        }
    }
}
