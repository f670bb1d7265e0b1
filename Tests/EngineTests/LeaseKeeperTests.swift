import Foundation
import Logging
import PostgresBackend
import ReconcilerCore
import ReconcilerStore
import Testing
import Engine
import TestSupport

/// The lease keeper against a real PostgreSQL store, with the faults a test cannot cause on demand.
@Suite("Lease keeper")
struct LeaseKeeperTests {
    let logger = Logger(label: "test.leases")

    @Test("A release of finished work the server refuses is asked again one poll later, though no other step finishes")
    func refusedReleaseAskedAgain() async throws {
        let server = try await PostgresServer.shared()
        let database = try await server.createDatabase()
        let store = try await PostgresStore.open(
            try PostgresLocation(url: server.url(database)), password: server.password,
            daemon: DaemonIdentity(host: "host-a", pid: 1, started: Date()), logger: logger)
        defer { store.close() }
        let faulty = FaultyStore(store, failReleases: 1)
        let keeper = LeaseKeeper(
            store: faulty, settings: .init(ttl: .seconds(30), longestCall: .seconds(5), poll: .milliseconds(200)), scheduler: Scheduler(),
            clock: SystemClock(), logger: logger)

        // A session this daemon claims, closes and has no wakeup left for: its lease may go back.
        var session = Fixtures.session("hpp-done", mode: nil, reference: nil, at: Date())
        _ = try await store.track(session, event: DomainEvent(.tracked, "test"), at: Date())
        try await keeper.start()
        let key = WorkKey.session("hpp-done")
        try #require(keeper.holds(key))
        session.phase = .closed
        session.outcome = .expired
        var change = Change()
        change.sessions = [session]
        try await store.commit(change, at: Date(), fencedBy: key)
        _ = try await store.takeWakeups()

        let running = Task { try await keeper.run() }
        let finished = ContinuousClock.now
        keeper.finished(key)
        try await waitUntil { !keeper.holds(key) }
        #expect(ContinuousClock.now - finished >= .milliseconds(200), "asked again after a poll, not at once")
        #expect(faulty.releaseAttempts.withLock { $0 } == [[key], [key]], "refused once, then asked again")
        #expect(try await server.psql("SELECT count(*) FROM work_leases WHERE holder IS NOT NULL", database: database) == "0", "nothing held")
        #expect(try await store.unclaimedWork() == 0, "and nothing waiting to be claimed")
        running.cancel()
        try await running.value
    }
}
