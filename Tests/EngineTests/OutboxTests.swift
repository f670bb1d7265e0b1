import Foundation
import HTTPServer
import KlarnaAPI
import Logging
import Synchronization
import Testing
import TestSupport
@testable import Engine
@testable import ReconcilerCore
import ReconcilerStore
@testable import SQLiteBackend

@Suite("Outbox and notifications")
struct OutboxTests {
    func storeWithOutcomes(_ directory: TemporaryDirectory, count: Int) async throws -> SQLiteStore {
        let store = try SQLiteStore(path: directory.path + "/s.sqlite")
        var change = Change()
        change.outcomes = (0..<count).map {
            Outcome(
                kind: $0 % 2 == 0 ? .orderPlaced : .captured, reason: "r\($0)", hppSessionID: "h\($0)", orderID: "o\($0)", amount: 100 * $0,
                currency: "EUR")
        }
        try await store.commit(change, at: Fixtures.t0)
        return store
    }

    /// Outcome delivery without notify.url, at `Fixtures.t0`.
    func plainDelivery(_ store: any OutcomeQueue, _ writer: OutboxWriter) -> OutcomeDeliveryService {
        OutcomeDeliveryService(
            store: store, writer: writer, notifier: nil, clock: ManualClock(now: Fixtures.t0), bell: Doorbell(), logger: Logger(label: "t"))
    }

    /// Outcome delivery with notifications to `http://127.0.0.1:PORT/outcomes`.
    func notifyingDelivery(
        _ store: SQLiteStore, _ directory: TemporaryDirectory, port: Int, transport: CurlTransport, clock: ManualClock, retry: RetryPolicy
    ) throws -> OutcomeDeliveryService {
        let notifier = OutcomeNotifier(url: "http://127.0.0.1:\(port)/outcomes", transport: transport, retry: retry, timeout: .seconds(5))
        return OutcomeDeliveryService(
            store: store, writer: try OutboxWriter(directory: directory.path + "/outbox"), notifier: notifier, clock: clock,
            random: SeededRandomSource(seed: 3), bell: Doorbell(), logger: Logger(label: "t"))
    }

    @Test("Each outcome becomes one complete JSON file in new/, names sorting by time; tmp/ is left empty")
    func writesFiles() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try await storeWithOutcomes(directory, count: 5)
        let writer = try OutboxWriter(directory: directory.path + "/outbox")
        let delivery = plainDelivery(store, writer)
        await delivery.deliverBatch()
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path + "/outbox/new").sorted()
        #expect(names.count == 5)
        #expect(names.first == "20270115T080000.000Z-000000000001-order_placed.json")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path + "/outbox/tmp").isEmpty)
        let data = try Data(contentsOf: URL(fileURLWithPath: directory.path + "/outbox/new/" + names[1]))
        let json = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(json["outcome"] as? String == "captured")
        #expect(json["order_id"] as? String == "o1")
        #expect(json["amount"] as? Int == 100)
        #expect((json["idempotency_key"] as? String)?.count == 36)
        #expect(try await store.undeliveredOutcomes(now: Fixtures.t0, limit: 10).isEmpty)
        // Delivering again writes nothing new.
        await delivery.deliverBatch()
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path + "/outbox/new").count == 5)
    }

    @Test("A settlement outcome's document carries its payout, finding, refund and the ledger's amount beside Klarna's")
    func settlementDocument() throws {
        let outcome = Outcome(
            kind: .settlementMismatch, reason: "r", orderID: "o-1", amount: 12_100, currency: "SEK", captureID: "c-1",
            paymentReference: "XISA93DJ", finding: .amountMismatch, refundID: "r-1", expectedAmount: 12_000)
        let stored = StoredOutcome(
            id: 7, at: Fixtures.t0, outcome: outcome, outboxWritten: false, notified: false, notifyAttempts: 0, notifyNextAt: nil)
        let data = try OutcomeDocument.encoder.encode(OutcomeDocument(stored))
        let json = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(json["outcome"] as? String == "settlement_mismatch")
        #expect(json["payment_reference"] as? String == "XISA93DJ")
        #expect(json["finding"] as? String == "amount_mismatch")
        #expect(json["refund_id"] as? String == "r-1")
        #expect(json["capture_id"] as? String == "c-1")
        #expect(json["amount"] as? Int == 12_100)
        #expect(json["expected_amount"] as? Int == 12_000)
        // A payment's outcome has none of them.
        let captured = StoredOutcome(
            id: 8, at: Fixtures.t0, outcome: Outcome(kind: .captured, reason: "r", orderID: "o-1"), outboxWritten: false, notified: false,
            notifyAttempts: 0, notifyNextAt: nil)
        let plain = try #require(
            try JSONSerialization.jsonObject(with: try OutcomeDocument.encoder.encode(OutcomeDocument(captured))) as? [String: Any])
        #expect(plain["payment_reference"] == nil && plain["finding"] == nil && plain["expected_amount"] == nil)
    }

    @Test("A crash between rename and bookkeeping rewrites the same file: still one file per outcome")
    func rewriteIsIdempotent() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try await storeWithOutcomes(directory, count: 1)
        let writer = try OutboxWriter(directory: directory.path + "/outbox")
        let stored = try #require(try await store.undeliveredOutcomes(now: Fixtures.t0, limit: 1).first)
        #expect(await writer.write([OutcomeDocument(stored)]).failure == nil)
        #expect(await writer.write([OutcomeDocument(stored)]).failure == nil)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path + "/outbox/new").count == 1)
    }

    @Test("A mark that fails after the files are written (the database full) leaves the outcomes pending; the next batch writes the same files again")
    func markFailsAfterWrite() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try await storeWithOutcomes(directory, count: 2)
        let delivery = plainDelivery(FaultyStore(store, failOutboxMarks: 1), try OutboxWriter(directory: directory.path + "/outbox"))
        await delivery.deliverBatch()
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path + "/outbox/new").count == 2)
        #expect(try await store.undeliveredOutcomes(now: Fixtures.t0, limit: 10).count == 2)
        await delivery.deliverBatch()
        #expect(try await store.undeliveredOutcomes(now: Fixtures.t0, limit: 10).isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path + "/outbox/new").count == 2, "the same names: one file an outcome")
    }

    @Test("An unwritable outbox keeps the outcome pending; it is written once the directory is usable again")
    func unwritableOutbox() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try await storeWithOutcomes(directory, count: 2)
        let writer = try OutboxWriter(directory: directory.path + "/outbox")
        // A file where tmp/ should be: no process, root included, can create files in it.
        let tmp = directory.path + "/outbox/tmp"
        try FileManager.default.removeItem(atPath: tmp)
        _ = FileManager.default.createFile(atPath: tmp, contents: Data())
        let delivery = plainDelivery(store, writer)
        await delivery.deliverBatch()
        #expect(try await store.undeliveredOutcomes(now: Fixtures.t0, limit: 10).count == 2)
        try FileManager.default.removeItem(atPath: tmp)
        try FileManager.default.createDirectory(atPath: tmp, withIntermediateDirectories: false)
        await delivery.deliverBatch()
        #expect(try await store.undeliveredOutcomes(now: Fixtures.t0, limit: 10).isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path + "/outbox/new").count == 2)
    }

    @Test("A file that cannot be written ends its batch: the outcomes before it are written and marked, it and those after stay pending")
    func failureInsideBatch() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try await storeWithOutcomes(directory, count: 3)
        let writer = try OutboxWriter(directory: directory.path + "/outbox")
        let pending = try await store.undeliveredOutcomes(now: Fixtures.t0, limit: 10)
        // A directory where the second outcome's temporary file goes: it cannot be created.
        let blocked = directory.path + "/outbox/tmp/" + OutboxWriter.fileName(OutcomeDocument(pending[1]))
        try FileManager.default.createDirectory(atPath: blocked, withIntermediateDirectories: false)
        let delivery = plainDelivery(store, writer)
        await delivery.deliverBatch()
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: directory.path + "/outbox/new") == [
                OutboxWriter.fileName(OutcomeDocument(pending[0]))
            ])
        #expect(try await store.undeliveredOutcomes(now: Fixtures.t0, limit: 10).map(\.id) == [pending[1].id, pending[2].id])
        try FileManager.default.removeItem(atPath: blocked)
        await delivery.deliverBatch()
        #expect(try await store.undeliveredOutcomes(now: Fixtures.t0, limit: 10).isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path + "/outbox/new").count == 3)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path + "/outbox/tmp").isEmpty)
    }

    @Test("An outcome whose file cannot be written holds back no notification of the outcomes that have theirs")
    func notifiesDespiteWriteFailure() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let received = Mutex<[String]>([])
        let server = try await HTTPServer.bind(.tcp(host: "127.0.0.1", port: 0), logger: Logger(label: "t")) { request in
            received.withLock { $0.append(request.header("Idempotency-Key") ?? "") }
            return .response(ServerResponse(status: 204))
        }
        let serving = Task { try await server.run() }
        defer { serving.cancel() }
        let store = try await storeWithOutcomes(directory, count: 3)
        let pending = try await store.undeliveredOutcomes(now: Fixtures.t0, limit: 10)
        let blocked = directory.path + "/outbox/tmp/" + OutboxWriter.fileName(OutcomeDocument(pending[1]))
        let transport = CurlTransport(configuration: .init())
        defer { transport.shutdown() }
        let delivery = try notifyingDelivery(
            store, directory, port: server.port!, transport: transport, clock: ManualClock(now: Fixtures.t0),
            retry: RetryPolicy(initialDelay: .seconds(10), maxDelay: .seconds(60), maxAttempts: 5))
        try FileManager.default.createDirectory(atPath: blocked, withIntermediateDirectories: false)
        await delivery.deliverBatch()
        #expect(received.withLock { $0 } == [OutcomeDocument(pending[0]).idempotencyKey], "the first has its file; the others wait")
        try FileManager.default.removeItem(atPath: blocked)
        await delivery.deliverBatch()
        #expect(received.withLock { $0 }.count == 3)
        #expect(try await store.undeliveredOutcomes(now: Fixtures.t0.addingTimeInterval(3_600), limit: 10).isEmpty)
    }

    @Test("notify.url gets each outcome with a stable Idempotency-Key, retried with backoff until it answers 2xx")
    func notifyRetries() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let received = Mutex<[(key: String, body: [UInt8])]>([])
        let failuresLeft = Mutex(2)
        let server = try await HTTPServer.bind(.tcp(host: "127.0.0.1", port: 0), logger: Logger(label: "t")) { request in
            received.withLock { $0.append((request.header("Idempotency-Key") ?? "", request.body)) }
            let fail = failuresLeft.withLock { left -> Bool in
                defer { left -= 1 }
                return left > 0
            }
            return .response(ServerResponse(status: fail ? 503 : 204))
        }
        let serving = Task { try await server.run() }
        defer { serving.cancel() }
        let store = try await storeWithOutcomes(directory, count: 1)
        let clock = ManualClock(now: Fixtures.t0)
        let transport = CurlTransport(configuration: .init())
        defer { transport.shutdown() }
        let delivery = try notifyingDelivery(
            store, directory, port: server.port!, transport: transport, clock: clock,
            retry: RetryPolicy(initialDelay: .seconds(10), maxDelay: .seconds(60), maxAttempts: 5))
        await delivery.deliverBatch()
        #expect(received.withLock { $0.count } == 1)
        // Not due again until the backoff has passed.
        await delivery.deliverBatch()
        #expect(received.withLock { $0.count } == 1)
        for _ in 0..<4 {
            clock.advance(by: .seconds(60))
            await delivery.deliverBatch()
        }
        let calls = received.withLock { $0 }
        #expect(calls.count == 3)
        #expect(Set(calls.map(\.key)).count == 1)
        #expect(try await store.undeliveredOutcomes(now: clock.now.addingTimeInterval(3_600), limit: 10).isEmpty)
        let body = try #require(try JSONSerialization.jsonObject(with: Data(calls[0].body)) as? [String: Any])
        #expect(body["idempotency_key"] as? String == calls[0].key)
    }

    @Test("A notify.url that never answers 2xx is given up after max_attempts; the outbox file stays")
    func notifyGivesUp() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let calls = Mutex(0)
        let server = try await HTTPServer.bind(.tcp(host: "127.0.0.1", port: 0), logger: Logger(label: "t")) { _ in
            calls.withLock { $0 += 1 }
            return .response(ServerResponse(status: 500))
        }
        let serving = Task { try await server.run() }
        defer { serving.cancel() }
        let store = try await storeWithOutcomes(directory, count: 1)
        let clock = ManualClock(now: Fixtures.t0)
        let transport = CurlTransport(configuration: .init())
        defer { transport.shutdown() }
        let delivery = try notifyingDelivery(
            store, directory, port: server.port!, transport: transport, clock: clock,
            retry: RetryPolicy(initialDelay: .seconds(1), maxDelay: .seconds(5), maxAttempts: 2))
        for _ in 0..<4 {
            await delivery.deliverBatch()
            clock.advance(by: .seconds(10))
        }
        #expect(calls.withLock { $0 } == 2)
        #expect(try await store.undeliveredOutcomes(now: clock.now.addingTimeInterval(3_600), limit: 10).isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path + "/outbox/new").count == 1)
    }
}
