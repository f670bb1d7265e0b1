import Foundation
@testable import PostgresBackend
import ReconcilerCore
import ReconcilerStore
import Synchronization
import Testing
import TestSupport

/// Group commit for the socket on PostgreSQL, with the statement replaced by a recorder (the statement itself is
/// tested on a real server by the conformance suite).
@Suite("Ingest batches on PostgreSQL")
struct IngestBatcherTests {
    /// A hint for `session` with dedupe key `key`, decided by one session.
    func delivery(_ key: String, session: String) throws -> SessionDelivery {
        let record = IngestRecord(
            dedupeKey: key, kind: "hpp_status", source: "socket", summary: key, action: .hintSession(hppSessionID: session, trackIfUnknown: nil))
        return try #require(
            try SessionDelivery(record, lookup: IngestPlanner.lookup(record), at: Date()))
    }

    /// Records each statement's deliveries (by dedupe key); the first statement waits until `open` is called.
    final class Recorder: Sendable {
        let statements = Mutex<[[String]]>([])
        let gate = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let opened = Mutex(false)

        /// `failing`: a statement holding that delivery is refused; `unreachable`: every statement after the first
        /// fails for want of the server once that delivery is sent alone.
        func send(_ deliveries: [SessionDelivery], failing: String? = nil, unreachable: String? = nil) async throws -> [IngestResult] {
            let (first, down) = statements.withLock { statements in
                let down = unreachable.map { key in statements.contains([key]) } ?? false
                statements.append(deliveries.compactMap(\.dedupeKey))
                return (statements.count == 1, down)
            }
            if first { await withCheckedContinuation { continuation in gate.withLock { $0 = continuation } } }
            if down || deliveries.map(\.dedupeKey) == [unreachable] { throw Unreachable() }
            if let failing, deliveries.contains(where: { $0.dedupeKey == failing }) { throw Refused() }
            return deliveries.map { _ in .accepted(wake: []) }
        }

        func open() async throws {
            try await waitUntil(timeout: .seconds(10)) { gate.withLock { $0 != nil } }
            gate.withLock {
                $0?.resume(); $0 = nil
            }
        }
    }

    struct Refused: Error {}
    struct Unreachable: Error {}

    @Test("Deliveries arriving while a statement is on its way go out together, in arrival order; no statement holds two of one key or one session")
    func batches() async throws {
        let batcher = IngestBatcher(most: 64, concurrent: 1)
        let recorder = Recorder()
        let first = Task { try await batcher.submit(try delivery("k1", session: "A")) { try await recorder.send($0) } }
        try await waitUntil(timeout: .seconds(10)) { recorder.statements.withLock { $0.count } == 1 }
        let later = [("k2", "A"), ("k3", "B"), ("k4", "A"), ("k2", "C"), ("k5", "D")]
        var tasks: [Task<IngestResult, any Error>] = []
        for (key, session) in later {
            let next = try delivery(key, session: session)
            tasks.append(Task { try await batcher.submit(next) { try await recorder.send($0) } })
            // One at a time, so that the arrival order is the order given.
            try await waitUntil(timeout: .seconds(10)) { batcher.waiting == tasks.count }
        }
        try await recorder.open()
        #expect(try await first.value == .accepted(wake: []))
        for task in tasks { #expect(try await task.value == .accepted(wake: [])) }
        // k4 waits behind k2 (session A), the second k2 behind the first, and k5 goes with the first ones it can.
        #expect(recorder.statements.withLock { $0 } == [["k1"], ["k2", "k3", "k5"], ["k4", "k2"]])
        #expect(batcher.waiting == 0)
    }

    @Test("A statement the server refused is sent again one delivery at a time: only the delivery at fault fails")
    func refusalIsolated() async throws {
        let batcher = IngestBatcher(most: 64, concurrent: 1, refused: { $0 is Refused })
        let recorder = Recorder()
        let first = Task { try await batcher.submit(try delivery("k0", session: "Z")) { try await recorder.send($0, failing: "bad") } }
        try await waitUntil(timeout: .seconds(10)) { recorder.statements.withLock { $0.count } == 1 }
        var tasks: [(String, Task<IngestResult, any Error>)] = []
        for key in ["a", "bad", "b"] {
            let next = try delivery(key, session: "s-\(key)")
            tasks.append((key, Task { try await batcher.submit(next) { try await recorder.send($0, failing: "bad") } }))
        }
        try await waitUntil(timeout: .seconds(10)) { batcher.waiting == 3 }
        try await recorder.open()
        _ = try await first.value
        for (key, task) in tasks {
            if key == "bad" {
                await #expect(throws: Refused.self) { try await task.value }
            } else {
                #expect(try await task.value == .accepted(wake: []))
            }
        }
        #expect(recorder.statements.withLock { $0 } == [["k0"], ["a", "bad", "b"], ["a"], ["bad"], ["b"]])
    }

    @Test(
        "A statement that failed for want of the server fails its deliveries at once; sent again one at a time, the rest fail at the first such failure, unsent"
    )
    func unreachableFailsFast() async throws {
        let batcher = IngestBatcher(most: 64, concurrent: 1, refused: { $0 is Refused })
        let recorder = Recorder()
        let send: IngestBatcher.Send = { try await recorder.send($0, failing: "bad", unreachable: "a") }
        let first = Task { try await batcher.submit(try delivery("k0", session: "Z"), via: send) }
        try await waitUntil(timeout: .seconds(10)) { recorder.statements.withLock { $0.count } == 1 }
        var tasks: [Task<IngestResult, any Error>] = []
        for key in ["a", "bad", "b"] {
            let next = try delivery(key, session: "s-\(key)")
            tasks.append(Task { try await batcher.submit(next, via: send) })
        }
        try await waitUntil(timeout: .seconds(10)) { batcher.waiting == 3 }
        try await recorder.open()
        _ = try await first.value
        for task in tasks { await #expect(throws: Unreachable.self) { try await task.value } }
        // Refused together ("bad"), then "a" alone finds the server gone: "bad" and "b" are not sent again.
        #expect(recorder.statements.withLock { $0 } == [["k0"], ["a", "bad", "b"], ["a"]])
    }
}
