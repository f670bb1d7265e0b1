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
    /// How `key` came to this daemon, when it was taken over from a daemon whose lease ran out.
    func takeover(of key: WorkKey) -> Takeover?
    /// The longest a Klarna call can last (the request timeout): how long a daemon's calls outlive its lease.
    var longestCall: Duration { get }
}

/// This daemon's share of the work on a store several daemons share: registers the daemon, claims free and lapsed
/// units of work, renews its leases every third of their time, takes the wakeups of what it holds, hears of new
/// work at once (LISTEN/NOTIFY) and hands every lease back on a graceful stop.
///
/// It runs one loop, so a claim and a renewal never overlap (a renewal's answer is the whole set of keys held).
/// Claimed keys wait in an inbox the dispatcher plans from (``WorkerService``); keys another daemon took are
/// dropped from the scheduler at once.
public final class LeaseKeeper: Service, WorkOwnership, Sendable {
    public struct Settings: Sendable {
        /// How long a lease lasts unrenewed: a dead daemon's work waits this long (plus one poll) for another.
        public var ttl: Duration
        public var longestCall: Duration
        /// How often the table is looked at without a notification: lapsed leases make none.
        public var poll: Duration
        /// Most keys claimed in one go; also the backlog (keys due here that no worker has taken yet) from which
        /// this daemon stops claiming, leaving free work to daemons with room.
        public var claimBatch: Int

        public init(ttl: Duration, longestCall: Duration, poll: Duration, claimBatch: Int = 64) {
            self.ttl = ttl
            self.longestCall = longestCall
            self.poll = poll
            self.claimBatch = claimBatch
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
    }

    /// The claims not planned yet, for the dispatcher.
    public func takeClaims() -> [Claim] { state.withLock { state in defer { state.inbox = [] }; return state.inbox } }

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

    /// A step finished `key` for now: hands its lease back unless the unit is still open or woken again.
    public func finished(_ key: WorkKey) async {
        guard await !scheduler.has(key) else { return }
        do {
            if try await store.releaseLease(key) {
                _ = state.withLock { state in
                    state.takeovers.removeValue(forKey: key)
                    return state.held.remove(key)
                }
            }
        } catch {
            // Kept: renewed as before, and let go of by the next daemon that finds nothing to do.
            logger.debug("cannot release the lease on \(key): \(error)")
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
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                group.addTask { [self] in await store.listenForWork { [bell] in bell.ring() } }
                await loop()
                group.cancelAll()
            }
        } onGracefulShutdown: { [bell] in
            bell.ring()
        }
        // The workers stopped first (services stop in reverse order): no call is in flight, so the leases go back
        // at once instead of making other daemons wait them out.
        do {
            try await store.deregister(at: clock.now)
            logger.info("handed back every lease")
        } catch {
            logger.warning("cannot hand the leases back (\(error)): other daemons take the work over once the leases run out")
        }
    }

    private func loop() async {
        var nextRenewal = ContinuousClock.now + settings.ttl / 3
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            if ContinuousClock.now >= nextRenewal {
                nextRenewal = ContinuousClock.now + settings.ttl / 3
                try? await renew()
            }
            do {
                // A full batch means more may wait: claim again at once, as long as this daemon keeps up.
                while try await claim() == settings.claimBatch {}
                let woken = try await store.takeWakeups()
                for key in woken { await scheduler.wake(key, at: clock.now) }
                if state.withLock({ state in defer { state.claimFailing = false }; return state.claimFailing }) {
                    logger.notice("claiming work again")
                }
            } catch {
                // Once per outage, not once per poll.
                if state.withLock({ state in defer { state.claimFailing = true }; return !state.claimFailing }) {
                    logger.warning("cannot claim work or take wakeups: \(error)")
                }
            }
            let untilRenewal = max(.zero, nextRenewal - ContinuousClock.now)
            await bell.wait(timeout: min(untilRenewal, settings.poll), clock: clock)
        }
    }

    private func renew() async throws {
        let started = ContinuousClock.now
        do {
            let renewal = try await store.renewLeases(ttl: settings.ttl)
            let (lost, recovered) = state.withLock { state in
                let lost = state.held.subtracting(renewal.held)
                state.held = renewal.held
                for key in lost { state.takeovers.removeValue(forKey: key) }
                state.validUntil = started + settings.ttl
                state.liveDaemons = renewal.liveDaemons
                let recovered = state.renewalFailing
                state.renewalFailing = false
                let stale = ContinuousClock.now - .seconds(10)
                state.hints = state.hints.filter { $0.value > stale }
                return (lost, recovered)
            }
            if recovered { logger.notice("the store answers again: leases renewed (\(renewal.held.count) held)") }
            for key in lost {
                logger.notice("another daemon holds \(key) now (this daemon's lease ran out): dropped here", metadata: ["work_key": .string(key.description)])
                await scheduler.forget(key)
            }
            onLiveDaemons(renewal.liveDaemons)
        } catch {
            let first = state.withLock { state in defer { state.renewalFailing = true }; return !state.renewalFailing }
            if first {
                logger.warning("cannot renew the leases (\(error)): no Klarna call starts once they may have run out, until the store answers")
            }
            throw error
        }
    }

    /// Claims a batch unless this daemon is behind already; returns how many it claimed.
    @discardableResult
    private func claim() async throws -> Int {
        let unplanned = state.withLock { $0.inbox.count }
        guard await scheduler.backlog(now: clock.now) + unplanned < settings.claimBatch else { return 0 }
        let claims = try await store.claimWork(ttl: settings.ttl, limit: settings.claimBatch)
        guard !claims.isEmpty else { return 0 }
        state.withLock { state in
            for claim in claims {
                state.held.insert(claim.key)
                if let takeover = claim.takeover { state.takeovers[claim.key] = takeover }
            }
            state.inbox += claims
        }
        for claim in claims {
            guard let takeover = claim.takeover else { continue }
            logger.notice(
                "took \(claim.key) over from \(takeover.from) (its lease ran out \(takeover.leaseEnded.formatted(.iso8601)))",
                metadata: ["work_key": .string(claim.key.description)])
        }
        scheduler.doorbell.ring()
        return claims.count
    }
}
