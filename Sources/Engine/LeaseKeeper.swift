import Foundation
import Logging
import ReconcilerCore
import ReconcilerStore
import ServiceLifecycle
import Synchronization

/// What the reconciler asks before it acts when several daemons share the store; without it (one daemon on
/// SQLite) everything is this daemon's.
public protocol WorkOwnership: Sendable {
    /// Whether a Klarna call for `key` may start now: its lease is this daemon's and known to last past the start.
    func mayCall(for key: WorkKey) -> Bool
    /// How `key` came to this daemon, when it was taken over from a daemon whose lease ran out (or adopted after a
    /// lost claim answer, when who held it before is unknown).
    func takeover(of key: WorkKey) -> Takeover?
    /// The longest a Klarna call can last (the request timeout): how long a daemon's calls outlive its lease.
    var longestCall: Duration { get }
}

/// This daemon's share of the work on a store several daemons share: registers the daemon, claims free and lapsed
/// units of work, renews its leases every third of their time, takes the wakeups of what it holds, hears of new
/// work at once (LISTEN/NOTIFY) and hands every lease back on a graceful stop.
///
/// Renewals run on their own, each bounded by a third of the lease (a query on a connection whose peer vanished
/// hangs until TCP gives up, minutes later), so a claim stuck on such a connection never holds them up. A renewal's
/// answer is every key the daemon holds; keys claimed or released while it ran are accounted for, and keys the
/// database says are held here that this daemon never learnt of (a claim whose answer was lost after its commit)
/// are adopted. Claimed keys wait in an inbox the dispatcher plans from (``WorkerService``); keys another daemon
/// took are dropped from the scheduler at once.
public final class LeaseKeeper: Service, WorkOwnership, Sendable {
    public struct Settings: Sendable {
        /// How long a lease lasts unrenewed: a dead daemon's work waits this long (plus one poll) for another.
        public var ttl: Duration
        public var longestCall: Duration
        /// How often the table is looked at without a notification: lapsed leases make none.
        public var poll: Duration
        /// Most keys claimed in one go.
        public var claimBatch: Int
        /// Beyond its share of the work, a daemon takes only keys no other daemon took within this time.
        public var patience: Duration

        public init(ttl: Duration, longestCall: Duration, poll: Duration, claimBatch: Int = 64, patience: Duration = .seconds(1)) {
            self.ttl = ttl
            self.longestCall = longestCall
            self.poll = poll
            self.claimBatch = claimBatch
            self.patience = patience
        }
    }

    private struct State {
        var held: Set<WorkKey> = []
        var takeovers: [WorkKey: Takeover] = [:]
        /// Until when every held lease is known to last, by this host's monotonic clock: the start of the last
        /// renewal that went through plus the lease time (the server extended them later than that).
        var validUntil: ContinuousClock.Instant?
        /// Claimed, waiting for the dispatcher to plan them.
        var inbox: [Claim] = []
        /// Keys this daemon's own ingest or a finished step asked for while not holding them, with when: woken as
        /// hinted if claimed soon after.
        var hints: [WorkKey: ContinuousClock.Instant] = [:]
        var liveDaemons = 1
        var renewalFailing = false
        var claimFailing = false
        var releaseFailing = false
        /// Claimed and released since the renewal under way started.
        var claimedSince: Set<WorkKey> = []
        var releasedSince: Set<WorkKey> = []
        /// Finished by a step, to be handed back with the next release (``releaseFinished()``).
        var finished: Set<WorkKey> = []
    }

    public let store: any LeaseStore
    public let settings: Settings
    private let scheduler: Scheduler
    private let clock: any WallClock
    private let logger: Logger
    /// Told how many daemons are live after each renewal (the rate budget's share).
    private let onLiveDaemons: @Sendable (Int) -> Void
    private let state = Mutex(State())
    private let bell = Doorbell()
    private let renewalBell = Doorbell()
    private let releaseBell = Doorbell()
    /// A call must start this much before the lease is due to run out.
    static let callMargin: Duration = .milliseconds(500)

    public init(
        store: any LeaseStore, settings: Settings, scheduler: Scheduler, clock: any WallClock, logger: Logger,
        onLiveDaemons: @escaping @Sendable (Int) -> Void = { _ in }
    ) {
        self.store = store
        self.settings = settings
        self.scheduler = scheduler
        self.clock = clock
        self.logger = logger
        self.onLiveDaemons = onLiveDaemons
    }

    public var longestCall: Duration { settings.longestCall }
    public var heldCount: Int { state.withLock { $0.held.count } }
    public var liveDaemons: Int { state.withLock { $0.liveDaemons } }

    public func mayCall(for key: WorkKey) -> Bool {
        let now = ContinuousClock.now
        return state.withLock { state in
            guard state.held.contains(key), let until = state.validUntil else { return false }
            return now + Self.callMargin < until
        }
    }

    public func takeover(of key: WorkKey) -> Takeover? { state.withLock { $0.takeovers[key] } }

    /// Whether this daemon holds `key`.
    public func holds(_ key: WorkKey) -> Bool { state.withLock { $0.held.contains(key) } }

    /// Registers, renews and claims the first share of the work (before READY).
    public func start() async throws {
        try await store.register(at: clock.now)
        try await renew()
        try await claim()
        started.replace(with: true)
        startedBell.ring()
    }

    /// Set once ``start()`` has registered this daemon and made its first claim; ``run()`` waits for it (a start
    /// whose store refused writes at first calls `start()` from the work loop, once the store takes them).
    private let started = Live(false)
    private let startedBell = Doorbell()

    /// The claims not planned yet, for the dispatcher.
    public func takeClaims() -> [Claim] {
        state.withLock { state in
            defer { state.inbox = [] }; return state.inbox
        }
    }

    /// Whether a claimed key was asked for by this daemon shortly before (its claim should read Klarna at once).
    func wasHinted(_ key: WorkKey) -> Bool { state.withLock { $0.hints.removeValue(forKey: key) != nil } }

    /// Something for `key` arrived here (this daemon's ingest, a step that handed work on): wakes it if held,
    /// else looks for it among the free work at once.
    public func hint(_ key: WorkKey) async {
        let held = state.withLock { state in
            if state.held.contains(key) { return true }
            state.hints[key] = .now
            return false
        }
        if held { await scheduler.wake(key, at: clock.now) } else { bell.ring() }
    }

    /// A step finished `key` for now: its lease goes back with the next release, unless the unit is still open or
    /// woken again by then. The worker does not wait for it.
    public func finished(_ key: WorkKey) {
        state.withLock { _ = $0.finished.insert(key) }
        releaseBell.ring()
    }

    /// Hands back, in one statement, the leases of the keys finished since the last release and not woken since;
    /// those a step finishes meanwhile wait for the next one. False when the statement failed: its keys wait to be
    /// asked again.
    @discardableResult
    func releaseFinished() async -> Bool {
        let asked = state.withLock { state in
            defer { state.finished = [] }; return state.finished
        }
        let keys = await scheduler.without(asked)
        guard !keys.isEmpty else { return true }
        do {
            let released = try await store.releaseLeases(keys)
            state.withLock { state in
                for key in released {
                    state.takeovers.removeValue(forKey: key)
                    state.held.remove(key)
                    state.releasedSince.insert(key)
                }
                if state.releaseFailing { logger.notice("handing back the leases of finished work again") }
                state.releaseFailing = false
            }
            return true
        } catch {
            // Kept, and asked again with the next release or after a poll: the server away, or a deadlock with an
            // ingest's wakeups (which PostgreSQL ends by failing one of the two statements).
            // Once per streak, not once per poll.
            if state.withLock({ state in
                state.finished.formUnion(keys)
                defer { state.releaseFailing = true }; return !state.releaseFailing
            }) {
                logger.notice("cannot hand back the leases of \(keys.count) finished unit(s), trying again each poll: \(error)")
            }
            return false
        }
    }

    /// A commit found `key` claimed by another daemon: drop it here.
    public func lost(_ key: WorkKey) async {
        state.withLock { state in
            state.held.remove(key)
            state.takeovers.removeValue(forKey: key)
        }
        await scheduler.forget(key)
    }

    public func run() async throws {
        while !started.value {
            if Task.isShuttingDownGracefully || Task.isCancelled { return }
            await startedBell.wait(timeout: settings.poll, clock: clock)
        }
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                group.addTask { [self] in await store.listenForWork { [bell] in bell.ring() } }
                group.addTask { [self] in await renewals() }
                group.addTask { [self] in await releases() }
                await loop()
                group.cancelAll()
            }
        } onGracefulShutdown: { [bell, renewalBell, releaseBell] in
            bell.ring()
            renewalBell.ring()
            releaseBell.ring()
        }
        // The workers stopped first (services stop in reverse order): no call is in flight, so the leases go back
        // at once instead of making other daemons wait them out; those of finished work first, as gone (else another
        // daemon would claim each to find nothing to do).
        await releaseFinished()
        do {
            try await store.deregister(at: clock.now)
            logger.info("handed back every lease")
        } catch {
            logger.warning("cannot hand the leases back (\(error)): other daemons take the work over once the leases run out")
        }
    }

    private func renewals() async {
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            await renewalBell.wait(timeout: settings.ttl / 3, clock: clock)
            if Task.isShuttingDownGracefully { return }
            try? await renew()
        }
    }

    /// Releases run on their own, one statement at a time: keys finished while one is on its way go out together
    /// with the next. After a failure they are asked again one poll later if no step finishes before: a quiet
    /// daemon would otherwise hold them, idle, counted in its share of the work.
    private func releases() async {
        var retry: Duration?
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            await releaseBell.wait(timeout: retry, clock: clock)
            if Task.isShuttingDownGracefully { return }
            retry = await releaseFinished() ? nil : settings.poll
        }
    }

    private func loop() async {
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            do {
                // A full batch means more may wait: claim again at once, as long as this daemon keeps up.
                while try await claim() == settings.claimBatch {}
                let woken = try await store.takeWakeups()
                for key in woken { await scheduler.wake(key, at: clock.now) }
                if state.withLock({ state in
                    defer { state.claimFailing = false }; return state.claimFailing
                }) {
                    logger.notice("claiming work again")
                }
            } catch {
                // Once per outage, not once per poll.
                if state.withLock({ state in
                    defer { state.claimFailing = true }; return !state.claimFailing
                }) {
                    logger.warning("cannot claim work or take wakeups: \(error)")
                }
            }
            await bell.wait(timeout: settings.poll, clock: clock)
        }
    }

    private func renew() async throws {
        let started = ContinuousClock.now
        state.withLock { state in
            state.claimedSince = []
            state.releasedSince = []
        }
        do {
            let renewal = try await Self.answer(within: settings.ttl / 3) { [store, settings] in try await store.renewLeases(ttl: settings.ttl) }
            // A key adopted here was claimed by a query that committed before this renewal answered: the old lease
            // (if any) ended before now, so its calls are over by now plus the longest call (``Takeover``).
            let answeredAt = ContinuousClock.now
            let (lost, unknown, recovered) = state.withLock { state in
                let answered = renewal.held.subtracting(state.releasedSince)
                let lost = state.held.subtracting(answered).subtracting(state.claimedSince)
                let unknown = answered.subtracting(state.held)
                state.held = answered.union(state.claimedSince)
                for key in lost { state.takeovers.removeValue(forKey: key) }
                for key in unknown { state.takeovers[key] = .adopted(answered: answeredAt) }
                state.validUntil = started + settings.ttl
                state.liveDaemons = renewal.liveDaemons
                let recovered = state.renewalFailing
                state.renewalFailing = false
                let stale = ContinuousClock.now - .seconds(10)
                state.hints = state.hints.filter { $0.value > stale }
                return (lost, unknown, recovered)
            }
            if recovered { logger.notice("the store answers again: leases renewed (\(renewal.held.count) held)") }
            if !unknown.isEmpty { try await adopt(unknown) }
            for key in lost {
                logger.notice(
                    "another daemon holds \(key) now (this daemon's lease ran out): dropped here", metadata: ["work_key": .string(key.description)])
                await scheduler.forget(key)
            }
            onLiveDaemons(renewal.liveDaemons)
        } catch {
            let first = state.withLock { state in
                defer { state.renewalFailing = true }; return !state.renewalFailing
            }
            if first {
                logger.warning("cannot renew the leases (\(error)): no Klarna call starts once they may have run out, until the store answers")
            }
            throw error
        }
    }

    /// Keys the store says this daemon holds that it never learnt of: planned like claims, with the takeover wait
    /// of a claimed lease (``renew()`` recorded it).
    private func adopt(_ keys: Set<WorkKey>) async throws {
        var open: [WorkKey: OpenWork] = [:]
        for work in try await store.openWork(of: Array(keys)) { open[work.key] = work }
        logger.notice("holding \(keys.count) unit(s) of work whose claim was not answered: planning them")
        state.withLock { state in state.inbox += keys.map { Claim(key: $0, work: open[$0], lapsed: nil) } }
        scheduler.doorbell.ring()
    }

    /// The store did not answer in time.
    struct NoAnswer: Error, CustomStringConvertible {
        let limit: Duration
        var description: String { "the store did not answer within \(limit)" }
    }

    /// `operation`'s answer, or ``NoAnswer`` after `limit`; the operation goes on in the background and a late
    /// answer is dropped (a renewal that late extends nothing this daemon relies on).
    static func answer<T: Sendable>(within limit: Duration, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
        let once = Once()
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let work = Task {
                do {
                    let value = try await operation()
                    if once.first() { continuation.resume(returning: value) }
                } catch {
                    if once.first() { continuation.resume(throwing: error) }
                }
            }
            Task {
                try? await Task.sleep(for: limit)
                if once.first() {
                    continuation.resume(throwing: NoAnswer(limit: limit))
                    work.cancel()
                }
            }
        }
    }

    /// Claims a batch (within this daemon's share); returns how many it claimed.
    @discardableResult
    private func claim() async throws -> Int {
        let live = state.withLock { $0.liveDaemons }
        let claims = try await store.claimWork(ttl: settings.ttl, limit: settings.claimBatch, liveDaemons: live, patience: settings.patience)
        // The takeover wait counts from here, after the answer (the query ran before it), on the monotonic clock.
        let answeredAt = ContinuousClock.now
        guard !claims.isEmpty else { return 0 }
        state.withLock { state in
            for claim in claims {
                state.held.insert(claim.key)
                state.claimedSince.insert(claim.key)
                if let lapsed = claim.lapsed { state.takeovers[claim.key] = .claimed(lapsed, answered: answeredAt) }
            }
            state.inbox += claims
        }
        for claim in claims {
            guard let lapsed = claim.lapsed else { continue }
            logger.notice(
                "took \(claim.key) over from \(lapsed.holder) (its lease ran out \(lapsed.endedAgo) before the claim)",
                metadata: ["work_key": .string(claim.key.description)])
        }
        scheduler.doorbell.ring()
        return claims.count
    }
}

/// True for the first caller only: which of two racing tasks answers.
private final class Once: Sendable {
    private let done = Mutex(false)
    func first() -> Bool {
        done.withLock { done in
            defer { done = true }; return !done
        }
    }
}
