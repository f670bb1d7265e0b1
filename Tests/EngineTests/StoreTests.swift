import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore
import ReconcilerStore
@testable import SQLiteBackend

/// A fresh directory under /tmp. Tests remove it with `defer { directory.remove() }`, which also keeps it alive
/// for the whole test (Swift may end a value's lifetime after its last use).
struct TemporaryDirectory: Sendable {
    let path: String

    init() {
        path = NSTemporaryDirectory() + "klarna-reconciler-test-" + UUID().uuidString.prefix(8)
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// What only the SQLite store does: its file, WAL, group commit and lock. What every store does is in
/// StoreConformanceTests, run on SQLite and PostgreSQL.
@Suite("SQLite store")
struct StoreTests {
    /// Another connection that holds the store's write lock until it runs `COMMIT`.
    func holdWriteLock(_ path: String) throws -> SQLiteConnection {
        let other = try SQLiteConnection(path: path, readOnly: false, busyTimeout: .seconds(1))
        try other.execute("BEGIN IMMEDIATE")
        return other
    }

    @Test("A new file gets the latest schema, WAL and full sync; reopening keeps the data")
    func migrationsAndPersistence() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/state.sqlite"
        do {
            let store = try SQLiteStore(path: path)
            #expect(try await store.schemaVersion() == Migrations.latest)
            _ = try await store.track(Fixtures.session(), event: DomainEvent(.tracked, "test"), at: Fixtures.t0)
        }
        let reopened = try SQLiteStore(path: path)
        #expect(try await reopened.session("hpp-1")?.kpSessionID == "kp-hpp-1")
        #expect(FileManager.default.fileExists(atPath: path + "-wal"))
        let connection = try SQLiteConnection(path: path, readOnly: true, busyTimeout: .seconds(1))
        #expect(try connection.query("PRAGMA journal_mode").first?.string(0) == "wal")
    }

    @Test("A store from a newer binary is refused, not rewritten")
    func newerSchemaRefused() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/state.sqlite"
        _ = try SQLiteStore(path: path)
        try SQLiteConnection(path: path, readOnly: false, busyTimeout: .seconds(1)).execute("PRAGMA user_version = 99")
        #expect(throws: SQLiteError.self) { try SQLiteStore(path: path) }
    }

    @Test("A reader in another connection is not blocked by an open write transaction (WAL)")
    func readersDuringWrites() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/s.sqlite"
        let store = try SQLiteStore(path: path)
        _ = try await store.track(Fixtures.session(), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
        let writer = try SQLiteConnection(path: path, readOnly: false, busyTimeout: .milliseconds(50))
        try writer.execute("BEGIN IMMEDIATE")
        try writer.query("UPDATE sessions SET phase = 'closed'")
        let reader = try SQLiteStore(path: path, readOnly: true, busyTimeout: .milliseconds(50))
        #expect(try await reader.session("hpp-1")?.phase == .polling)
        // A second writer waits for the busy timeout and then fails with a clear error instead of corrupting anything.
        let blocked = try SQLiteStore(path: path, busyTimeout: .milliseconds(50))
        await #expect { try await blocked.track(Fixtures.session("hpp-2"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0) } throws: { error in
            (error as? SQLiteError)?.isBusy == true
        }
        try writer.execute("COMMIT")
        #expect(try await reader.session("hpp-1")?.phase == .polling)  // its JSON was not touched, only the column
        _ = try await blocked.track(Fixtures.session("hpp-2"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
    }

    @Test("Writes that queue while another commits share one transaction; each is durable when it returns")
    func groupCommit() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/s.sqlite"
        let store = try SQLiteStore(path: path)
        // Another connection holds the write lock, so the store's first transaction waits and the rest queue behind it.
        let other = try holdWriteLock(path)
        let before = store.writeStatistics
        let tracked = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<200 {
                    group.addTask { _ = try await store.track(Fixtures.session("hpp-\(index)"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0) }
                }
                try await group.waitForAll()
            }
        }
        try await waitUntil { store.writeStatistics.submitted - before.submitted == 200 }
        try other.execute("COMMIT")
        try await tracked.value
        let after = store.writeStatistics
        #expect(after.committedWrites - before.committedWrites == 200)
        #expect(after.transactions - before.transactions <= 2)
        let reader = try SQLiteConnection(path: path, readOnly: true, busyTimeout: .seconds(1))
        #expect(try reader.query("SELECT COUNT(*) FROM sessions").first?.int(0) == 200)
    }

    @Test("A write refused inside a group is undone alone: the others commit, its own rows are gone")
    func groupCommitRefusalIsolated() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/s.sqlite"
        let store = try SQLiteStore(path: path)
        let other = try holdWriteLock(path)
        let before = store.writeStatistics.submitted
        // A capture for an order nobody tracked is refused after its delivery row was written: that row must go.
        let refused = IngestRecord(
            dedupeKey: "capture-1", kind: "capture", source: "socket", summary: "capture", action: .capture(orderID: "nobody", amount: nil))
        async let first = store.track(Fixtures.session("hpp-a"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
        async let middle = store.ingest(refused, at: Fixtures.t0)
        async let last = store.track(Fixtures.session("hpp-b"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
        try await waitUntil { store.writeStatistics.submitted - before == 3 }
        try other.execute("COMMIT")
        #expect(try await first == .tracked(Fixtures.session("hpp-a")))
        guard case .refused(404, _, _) = try await middle else { Issue.record("not refused"); return }
        #expect(try await last == .tracked(Fixtures.session("hpp-b")))
        // Not remembered as delivered: sent again, it is refused again rather than acknowledged as a repeat.
        guard case .refused(404, _, _) = try await store.ingest(refused, at: Fixtures.t0) else {
            Issue.record("the refused delivery was remembered"); return
        }
        #expect(try await store.session("hpp-a") != nil)
        #expect(try await store.session("hpp-b") != nil)
    }

    @Test("The watchdog's writer probe answers only while commits go through, unlike a read")
    func writerProbe() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/s.sqlite"
        let store = try SQLiteStore(path: path, busyTimeout: .milliseconds(200))
        try await store.probeWrites()
        let other = try holdWriteLock(path)
        _ = try await store.liveStatus()  // reads still answer
        await #expect { try await store.probeWrites() } throws: { ($0 as? SQLiteError)?.isBusy == true }
        try other.execute("COMMIT")
        try await store.probeWrites()
    }

    @Test("Only one daemon can hold the store lock; it is released with the holder")
    func storeLock() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/s.sqlite"
        var lock: StoreLock? = try StoreLock(storePath: path)
        #expect(throws: StoreLock.Held.self) { try StoreLock(storePath: path) }
        _ = lock
        lock = nil
        _ = try StoreLock(storePath: path)
    }
}
