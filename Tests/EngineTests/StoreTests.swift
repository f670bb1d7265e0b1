import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore
@testable import ReconcilerStore

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

@Suite("SQLite store")
struct StoreTests {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    func session(_ id: String = "hpp-1", reference: String? = "ref-1") -> TrackedSession {
        TrackedSession(hppSessionID: id, kpSessionID: "kp-\(id)", mode: PlaceOrderMode.none, merchantReference: reference, capturePolicy: .onRequest, purpose: .buy, trackedAt: t0)
    }

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
            _ = try await store.track(session(), event: DomainEvent("tracked", "test"), at: t0)
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

    @Test("Tracking twice keeps the first registration and says so")
    func trackIdempotent() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/s.sqlite")
        #expect(try await store.track(session(), event: DomainEvent("tracked", "first"), at: t0) == .tracked(session()))
        var other = session()
        other.merchantReference = "changed"
        guard case .existing(let existing) = try await store.track(other, event: DomainEvent("tracked", "second"), at: t0) else {
            Issue.record("expected existing")
            return
        }
        #expect(existing.merchantReference == "ref-1")
        let timeline = try await store.timeline(for: "hpp-1")
        #expect(timeline.events.map(\.message) == ["first"])
    }

    @Test("A commit is all or nothing")
    func atomicCommit() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/s.sqlite")
        _ = try await store.track(session(), event: DomainEvent("tracked", "t"), at: t0)
        var changed = session()
        changed.phase = .closed
        var change = Change()
        change.sessions = [changed]
        change.outcomes = [changed.outcome(.cancelled, "x")]
        change.finishedCaptureRequests = [(id: 1, state: "done", note: "n")]
        change.events = [NewEvent(hppSessionID: "hpp-1", orderID: nil, DomainEvent("k", "m"))]
        try await store.commit(change, at: t0)
        #expect(try await store.session("hpp-1")?.phase == .closed)

        // Now a change whose second statement fails: the first must not stick.
        var reopened = session("hpp-2")
        reopened.phase = .closed
        var failing = Change()
        failing.sessions = [reopened]
        failing.intents = [Intent(key: "k", kind: .capture, subject: "x", now: t0)]
        try SQLiteConnection(path: directory.path + "/s.sqlite", readOnly: false, busyTimeout: .seconds(1)).execute("DROP TABLE intents")
        await #expect(throws: SQLiteError.self) { try await store.commit(failing, at: t0) }
        #expect(try await store.session("hpp-2") == nil)
    }

    @Test("Open work lists what is due; closed items drop out")
    func openWork() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/s.sqlite")
        _ = try await store.track(session("a"), event: DomainEvent("tracked", "t"), at: t0)
        _ = try await store.track(session("b"), event: DomainEvent("tracked", "t"), at: t0)
        var closed = session("b")
        closed.phase = .closed
        var change = Change()
        change.sessions = [closed]
        change.newOrders = [TrackedOrder(orderID: "o-1", hppSessionID: "b", kpSessionID: nil, merchantReference: nil, capturePolicy: .onRequest, placedBy: .placeOrder, createdAt: t0)]
        try await store.commit(change, at: t0)
        let work = try await store.openWork()
        #expect(Set(work.map(\.key)) == [.session("a"), .order("o-1")])
    }

    @Test("Wakeups left by other processes are taken once, in order")
    func wakeups() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/s.sqlite")
        _ = try await store.track(session("a"), event: DomainEvent("tracked", "t"), at: t0)
        _ = try await store.track(session("b"), event: DomainEvent("tracked", "t"), at: t0)
        let first = try await store.wakeups(after: 0, includingDelivered: false)
        #expect(first.keys == [.session("a"), .session("b")])
        let second = try await store.wakeups(after: first.last, includingDelivered: false)
        #expect(second.keys.isEmpty)
        #expect(second.last == first.last)
    }

    @Test("Wakeups a delivery's ingest wrote are for a restart only: the running daemon woke itself already")
    func deliveredWakeups() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/s.sqlite")
        _ = try await store.track(session("a"), event: DomainEvent("tracked", "t"), at: t0)
        let hint = IngestRecord(dedupeKey: "e-1", kind: "hpp_status", source: "socket", summary: "s", action: .hintSession(hppSessionID: "a", trackIfUnknown: nil))
        #expect(try await store.ingest(hint, at: t0) == .accepted(wake: [.session("a")]))
        // The running daemon's poll sees the command line's track, not the hint it delivered itself.
        let running = try await store.wakeups(after: 0, includingDelivered: false)
        #expect(running.keys == [.session("a")])
        #expect(try await store.wakeups(after: running.last, includingDelivered: false).keys.isEmpty)

        // A daemon that crashed between the commit and the wake finds the hint when it starts.
        _ = try await store.ingest(IngestRecord(dedupeKey: "e-2", kind: "hpp_status", source: "socket", summary: "s", action: .hintSession(hppSessionID: "a", trackIfUnknown: nil)), at: t0)
        #expect(try await store.wakeups(after: 0, includingDelivered: true).keys == [.session("a")])
    }

    @Test("Capture requests: only for open on_request orders, oldest first")
    func captureRequests() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/s.sqlite")
        #expect(try await store.requestCapture(orderID: "nope", amount: nil, at: t0) == .unknownOrder)
        var change = Change()
        change.newOrders = [
            TrackedOrder(orderID: "o-1", hppSessionID: "h", kpSessionID: nil, merchantReference: nil, capturePolicy: .onRequest, placedBy: .placeOrder, createdAt: t0),
            TrackedOrder(orderID: "o-2", hppSessionID: "h2", kpSessionID: nil, merchantReference: nil, capturePolicy: .immediate, placedBy: .placeOrder, createdAt: t0),
        ]
        try await store.commit(change, at: t0)
        guard case .accepted(let first) = try await store.requestCapture(orderID: "o-1", amount: 100, at: t0) else { Issue.record("refused"); return }
        _ = try await store.requestCapture(orderID: "o-1", amount: nil, at: t0.addingTimeInterval(1))
        #expect(try await store.oldestCaptureRequest(orderID: "o-1")?.id == first)
        #expect(try await store.oldestCaptureRequest(orderID: "o-1")?.amount == 100)
        guard case .refused(let reason) = try await store.requestCapture(orderID: "o-2", amount: nil, at: t0) else { Issue.record("accepted"); return }
        #expect(reason.contains("immediate"))

        var done = Change()
        done.finishedCaptureRequests = [(id: first, state: "done", note: "captured")]
        try await store.commit(done, at: t0)
        #expect(try await store.oldestCaptureRequest(orderID: "o-1")?.amount == nil)
        #expect(try await store.wakeups(after: 0, includingDelivered: false).keys.contains(.order("o-1")))
    }

    @Test("show finds a payment by HPP id, KP id, order id or merchant reference")
    func timelineLookup() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/s.sqlite")
        _ = try await store.track(session("hpp-9", reference: "shop-42"), event: DomainEvent("tracked", "t"), at: t0)
        var ordered = session("hpp-9", reference: "shop-42")
        ordered.phase = .ordered
        ordered.orderID = "o-9"
        var change = Change()
        change.sessions = [ordered]
        change.newOrders = [TrackedOrder(orderID: "o-9", hppSessionID: "hpp-9", kpSessionID: "kp-hpp-9", merchantReference: "shop-42", capturePolicy: .onRequest, placedBy: .none, createdAt: t0)]
        change.events = [NewEvent(hppSessionID: "hpp-9", orderID: "o-9", DomainEvent("order_placed", "placed"), detail: ["intent": "k"])]
        change.outcomes = [Outcome(kind: .orderPlaced, reason: "r", hppSessionID: "hpp-9", orderID: "o-9")]
        try await store.commit(change, at: t0.addingTimeInterval(1))
        for id in ["hpp-9", "kp-hpp-9", "o-9", "shop-42"] {
            let found = try await store.timeline(for: id)
            #expect(found.sessions.map(\.hppSessionID) == ["hpp-9"], "\(id)")
            #expect(found.orders.map(\.orderID) == ["o-9"], "\(id)")
            #expect(found.events.map(\.kind) == ["tracked", "order_placed"], "\(id)")
            #expect(found.events.last?.detail == ["intent": "k"])
            #expect(found.outcomes.count == 1)
        }
        #expect(try await store.timeline(for: "unknown").sessions.isEmpty)
    }

    @Test("status counts, oldest open item, next deadline, backlog and Klarna health")
    func summary() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/s.sqlite")
        var a = session("a")
        a.expiresAt = t0.addingTimeInterval(7_200)
        _ = try await store.track(a, event: DomainEvent("tracked", "t"), at: t0)
        var b = session("b")
        b.trackedAt = t0.addingTimeInterval(10)
        b.nextDueAt = t0.addingTimeInterval(500)
        b.phase = .authorized
        b.tokenExpiresAt = t0.addingTimeInterval(3_600)
        _ = try await store.track(b, event: DomainEvent("tracked", "t"), at: t0)
        var change = Change()
        change.health = [(name: "klarna_ok", detail: ""), (name: "klarna_error", detail: "HTTP 503")]
        change.outcomes = [Outcome(kind: .cancelled, reason: "r", hppSessionID: "x")]
        try await store.commit(change, at: t0.addingTimeInterval(5))
        let summary = try await store.summary(now: t0.addingTimeInterval(100))
        #expect(summary.sessionsByPhase == ["polling": 1, "authorized": 1])
        #expect(summary.oldestOpenID == "a")
        #expect(summary.nextDeadlineWhat == "session b")
        #expect(summary.nextDeadline == t0.addingTimeInterval(3_600))
        #expect(summary.backlog == 1)
        #expect(summary.nextDueAt == t0)
        #expect(summary.undeliveredOutcomes == 1)
        #expect(summary.lastKlarnaErrorDetail == "HTTP 503")
        #expect(summary.lastKlarnaSuccess == t0.addingTimeInterval(5))
    }

    @Test("A reader in another connection is not blocked by an open write transaction (WAL)")
    func readersDuringWrites() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/s.sqlite"
        let store = try SQLiteStore(path: path)
        _ = try await store.track(session(), event: DomainEvent("tracked", "t"), at: t0)
        let writer = try SQLiteConnection(path: path, readOnly: false, busyTimeout: .milliseconds(50))
        try writer.execute("BEGIN IMMEDIATE")
        try writer.query("UPDATE sessions SET phase = 'closed'")
        let reader = try SQLiteStore(path: path, readOnly: true, busyTimeout: .milliseconds(50))
        #expect(try await reader.session("hpp-1")?.phase == .polling)
        // A second writer waits for the busy timeout and then fails with a clear error instead of corrupting anything.
        let blocked = try SQLiteStore(path: path, busyTimeout: .milliseconds(50))
        await #expect { try await blocked.track(session("hpp-2"), event: DomainEvent("t", "t"), at: t0) } throws: { error in
            (error as? SQLiteError)?.isBusy == true
        }
        try writer.execute("COMMIT")
        #expect(try await reader.session("hpp-1")?.phase == .polling)  // its JSON was not touched, only the column
        _ = try await blocked.track(session("hpp-2"), event: DomainEvent("t", "t"), at: t0)
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
                    group.addTask { _ = try await store.track(session("hpp-\(index)"), event: DomainEvent("tracked", "t"), at: t0) }
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
        let refused = IngestRecord(dedupeKey: "capture-1", kind: "capture", source: "socket", summary: "capture", action: .capture(orderID: "nobody", amount: nil))
        async let first = store.track(session("hpp-a"), event: DomainEvent("tracked", "t"), at: t0)
        async let middle = store.ingest(refused, at: t0)
        async let last = store.track(session("hpp-b"), event: DomainEvent("tracked", "t"), at: t0)
        try await waitUntil { store.writeStatistics.submitted - before == 3 }
        try other.execute("COMMIT")
        #expect(try await first == .tracked(session("hpp-a")))
        guard case .refused(404, _, _) = try await middle else { Issue.record("not refused"); return }
        #expect(try await last == .tracked(session("hpp-b")))
        // Not remembered as delivered: sent again, it is refused again rather than acknowledged as a repeat.
        guard case .refused(404, _, _) = try await store.ingest(refused, at: t0) else { Issue.record("the refused delivery was remembered"); return }
        #expect(try await store.session("hpp-a") != nil)
        #expect(try await store.session("hpp-b") != nil)
    }

    @Test("The watchdog's writer probe answers only while commits go through, unlike a read")
    func writerProbe() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/s.sqlite"
        let store = try SQLiteStore(path: path, busyTimeout: .milliseconds(200))
        try await store.pingWriter()
        let other = try holdWriteLock(path)
        _ = try await store.liveStatus()  // reads still answer
        await #expect { try await store.pingWriter() } throws: { ($0 as? SQLiteError)?.isBusy == true }
        try other.execute("COMMIT")
        try await store.pingWriter()
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
