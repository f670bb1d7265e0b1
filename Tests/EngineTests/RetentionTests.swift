import Foundation
import Logging
import Testing
import TestSupport
@testable import Engine
@testable import ReconcilerCore
import ReconcilerStore
@testable import SQLiteBackend

@Suite("Retention")
struct RetentionTests {
    let old = Date(timeIntervalSince1970: 1_800_000_000)
    /// 100 days after `old`: past a 90-day retention.
    var now: Date { old.addingTimeInterval(100 * 86_400) }
    let policy = RetentionPolicy(closedPayments: .seconds(90 * 86_400), events: .seconds(180 * 86_400), rejections: .seconds(30 * 86_400))

    /// Tracks `id` at `at` and, when `closed`, closes it with an outcome (delivered when `delivered`) and an intent.
    func payment(
        _ store: SQLiteStore, _ id: String, at: Date, closed: Bool = true, delivered: Bool = true, intent: Intent.State = .confirmed
    ) async throws {
        _ = try await store.track(Fixtures.session(id, reference: id, policy: .immediate, at: old), event: DomainEvent(.tracked, "t"), at: at)
        guard closed else { return }
        var done = Fixtures.session(id, reference: id, policy: .immediate, at: old)
        done.phase = .closed
        done.nextDueAt = nil
        var change = Change()
        change.sessions = [done]
        change.outcomes = [done.outcome(.cancelled, "consumer cancelled")]
        change.events = [NewEvent(hppSessionID: id, orderID: nil, DomainEvent(.status, "HPP status → CANCELLED"))]
        var sideEffect = Intent(key: "intent-\(id)", kind: .placeOrder, subject: id, now: at)
        sideEffect.state = intent
        change.intents = [sideEffect]
        try await store.commit(change, at: at)
        guard delivered else { return }
        for outcome in try await store.undeliveredOutcomes(now: at, limit: 100) where outcome.outcome.hppSessionID == id {
            try await store.markOutboxWritten([outcome.id], notified: true)
        }
    }

    @Test("A finished payment goes whole once past its retention; open, recent, undelivered or unsettled ones stay")
    func prunesOnlyWhatIsFinished() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/s.sqlite")
        try await payment(store, "done-old", at: old)
        try await payment(store, "done-old-2", at: old)
        try await payment(store, "done-recent", at: now.addingTimeInterval(-86_400))
        try await payment(store, "open-old", at: old, closed: false)
        try await payment(store, "undelivered-old", at: old, delivered: false)
        try await payment(store, "ambiguous-old", at: old, intent: .ambiguous)
        try await store.recordRejection(source: "socket", status: 400, error: "bad_json", detail: "x", at: old)
        try await store.recordRejection(source: "socket", status: 400, error: "bad_json", detail: "y", at: now)

        let pruner = Pruner(store: store, policy: policy, doneDirectory: nil, clock: ManualClock(now: now), batch: 1)
        let counted = try await pruner.run(dryRun: true)
        #expect(counted.payments == 2)
        #expect(counted.rejections == 1)
        #expect(try await store.session("done-old") != nil, "a dry run removed something")

        let pruned = try await pruner.run(dryRun: false)  // batches of one: several transactions
        #expect(pruned.payments == 2)
        #expect(pruned.rejections == 1)
        for gone in ["done-old", "done-old-2"] {
            #expect(try await store.session(gone) == nil)
            let timeline = try await store.timeline(for: gone)
            #expect(timeline.events.isEmpty && timeline.outcomes.isEmpty && timeline.intents.isEmpty)
            #expect(try await store.intent("intent-\(gone)") == nil)
        }
        for kept in ["done-recent", "open-old", "undelivered-old", "ambiguous-old"] {
            #expect(try await store.session(kept) != nil, "\(kept) was pruned")
        }
        #expect(try await store.timeline(for: "done-recent").events.count == 2)
        #expect(try await pruner.run(dryRun: false).isEmpty, "a second pass found more")
    }

    @Test("Events of a payment still open go by age; spool done/ files by modification time; 0 days keeps forever")
    func eventsAndSpoolFiles() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/s.sqlite")
        try await payment(store, "open-old", at: old, closed: false)
        let done = directory.path + "/done"
        try FileManager.default.createDirectory(atPath: done, withIntermediateDirectories: true)
        let later = old.addingTimeInterval(200 * 86_400)
        for folder in [done] {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            for (name, age) in [("old.json", 200.0), ("fresh.json", 1.0)] {
                _ = FileManager.default.createFile(atPath: "\(folder)/\(name)", contents: Data("{}".utf8))
                try FileManager.default.setAttributes([.modificationDate: later.addingTimeInterval(-age * 86_400)], ofItemAtPath: "\(folder)/\(name)")
            }
        }
        var keepAll = RetentionPolicy()
        let forever = try await Pruner(store: store, policy: keepAll, doneDirectory: done, clock: ManualClock(now: later)).run(dryRun: false)
        #expect(forever.isEmpty)

        keepAll.events = .seconds(180 * 86_400)
        keepAll.spoolDone = .seconds(7 * 86_400)
        let pruned = try await Pruner(store: store, policy: keepAll, doneDirectory: done, clock: ManualClock(now: later)).run(dryRun: false)
        #expect(pruned.events == 1)
        #expect(pruned.spoolFiles == 1)
        #expect(try await store.session("open-old") != nil)
        #expect(try await store.timeline(for: "open-old").events.isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: done) == ["fresh.json"])
    }

    @Test("Acknowledged outbox files (cur/) go by the time they were acknowledged, however old; new/ is never pruned")
    func outboxAcknowledged() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/s.sqlite")
        let outbox = directory.path + "/outbox"
        for folder in ["new", "cur"] { try FileManager.default.createDirectory(atPath: "\(outbox)/\(folder)", withIntermediateDirectories: true) }
        // Written long ago (its modification time), acknowledged now (the rename sets its change time).
        let now = Date()
        for name in ["taken.json", "waiting.json"] {
            _ = FileManager.default.createFile(atPath: "\(outbox)/new/\(name)", contents: Data("{}".utf8))
            try FileManager.default.setAttributes([.modificationDate: now.addingTimeInterval(-200 * 86_400)], ofItemAtPath: "\(outbox)/new/\(name)")
        }
        #expect(rename("\(outbox)/new/taken.json", "\(outbox)/cur/taken.json") == 0)
        let policy = RetentionPolicy(outboxAcknowledged: .seconds(30 * 86_400))
        func prune(at: Date) async throws -> PruneCounts {
            try await Pruner(store: store, policy: policy, doneDirectory: nil, acknowledgedDirectory: "\(outbox)/cur", clock: ManualClock(now: at))
                .run(dryRun: false)
        }
        #expect(try await prune(at: now.addingTimeInterval(29 * 86_400)).outboxFiles == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: "\(outbox)/cur") == ["taken.json"])
        #expect(try await prune(at: now.addingTimeInterval(31 * 86_400)).outboxFiles == 1)
        #expect(try FileManager.default.contentsOfDirectory(atPath: "\(outbox)/cur").isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: "\(outbox)/new") == ["waiting.json"])
    }

    @Test("The daemon's retention loop prunes every interval, not before the first one")
    func serviceRunsOnItsInterval() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/s.sqlite")
        try await payment(store, "done-old", at: old)
        let clock = ManualClock(now: now)
        let service = RetentionService(
            pruner: Pruner(store: store, policy: policy, doneDirectory: nil, clock: clock), interval: .seconds(3_600), logger: Logger(label: "test"))
        let running = Task { try await service.run() }
        try await waitUntil { clock.sleeperCount == 1 }
        #expect(try await store.session("done-old") != nil, "pruned before the first interval")
        clock.advance(by: .seconds(3_600))
        try await waitUntil { try await store.session("done-old") == nil }
        try await waitUntil { clock.sleeperCount == 1 }  // waiting for the next pass
        running.cancel()
        try await running.value
    }
}
