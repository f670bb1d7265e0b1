import Engine
import Foundation
import Logging
import PostgresBackend
import ReconcilerCore
import ReconcilerStore
import ServiceLifecycle
import Testing
import TestSupport

/// The lease keeper against a real PostgreSQL store, with the faults a test cannot cause on demand.
@Suite("Lease keeper")
struct LeaseKeeperTests {
    let logger = Logger(label: "test.leases")

    /// A keeper (releases through `FaultyStore`, refused the first `failReleases` times) holding the lease of a
    /// session it claimed and that was closed since, with no wakeup left for it: a lease that may go back.
    struct Holding {
        let server: PostgresServer
        let database: String
        let store: PostgresStore
        let faulty: FaultyStore
        let keeper: LeaseKeeper
        let key = WorkKey.session("hpp-done")
    }

    func holdingClosedSession(failReleases: Int, poll: Duration) async throws -> Holding {
        let server = try await PostgresServer.shared()
        let database = try await server.createDatabase()
        let store = try await PostgresStore.open(
            try PostgresLocation(url: server.url(database)), password: server.password,
            daemon: DaemonIdentity(host: "host-a", pid: 1, started: Date()), logger: logger)
        let faulty = FaultyStore(store, failReleases: failReleases)
        let keeper = LeaseKeeper(
            store: faulty, settings: .init(ttl: .seconds(30), longestCall: .seconds(5), poll: poll), scheduler: Scheduler(), clock: SystemClock(),
            logger: logger)
        let holding = Holding(server: server, database: database, store: store, faulty: faulty, keeper: keeper)
        var session = Fixtures.session("hpp-done", mode: nil, reference: nil, at: Date())
        _ = try await store.track(session, event: DomainEvent(.tracked, "test"), at: Date())
        try await keeper.start()
        try #require(keeper.holds(holding.key))
        session.phase = .closed
        session.outcome = .expired
        var change = Change()
        change.sessions = [session]
        try await store.commit(change, at: Date(), fencedBy: holding.key)
        _ = try await store.takeWakeups()
        return holding
    }

    @Test("A release of finished work the server refuses is asked again one poll later, though no other step finishes")
    func refusedReleaseAskedAgain() async throws {
        let h = try await holdingClosedSession(failReleases: 1, poll: .milliseconds(200))
        defer { h.store.close() }
        let running = Task { try await h.keeper.run() }
        let finished = ContinuousClock.now
        h.keeper.finished(h.key)
        try await waitUntil { !h.keeper.holds(h.key) }
        #expect(ContinuousClock.now - finished >= .milliseconds(200), "asked again after a poll, not at once")
        #expect(h.faulty.releaseAttempts.withLock { $0 } == [[h.key], [h.key]], "refused once, then asked again")
        #expect(try await h.server.psql("SELECT count(*) FROM work_leases WHERE holder IS NOT NULL", database: h.database) == "0", "nothing held")
        #expect(try await h.store.unclaimedWork() == 0, "and nothing waiting to be claimed")
        running.cancel()
        try await running.value
    }

    @Test("A release still waiting at a graceful stop goes out before the leases are handed back: no daemon claims finished work")
    func releaseWaitingAtStop() async throws {
        let h = try await holdingClosedSession(failReleases: 1, poll: .seconds(600))
        defer { h.store.close() }
        let group = ServiceGroup(configuration: .init(services: [.init(service: h.keeper)], logger: logger))
        let running = Task { try await group.run() }
        h.keeper.finished(h.key)
        try await waitUntil { h.faulty.releaseAttempts.withLock { $0.count } == 1 }
        await group.triggerGracefulShutdown()
        try await running.value
        #expect(h.faulty.releaseAttempts.withLock { $0 } == [[h.key], [h.key]], "refused, then asked again at the stop")
        #expect(try await h.store.unclaimedWork() == 0, "gone, not handed back as work to claim")
        #expect(try await h.server.psql("SELECT count(*) FROM work_leases", database: h.database) == "0")
    }
}
