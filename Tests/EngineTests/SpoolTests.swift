import Foundation
import Glibc
import Logging
import Synchronization
import Testing
import TestSupport
@testable import Ingest
@testable import ReconcilerCore
import ReconcilerStore
@testable import SQLiteBackend

@Suite("Spool files")
struct SpoolFileTests {
    @Test("Bare JSON and raw HTTP requests; the body is byte-exact, the query and headers are read")
    func parsing() throws {
        let json = try SpoolFile.delivery(Array(#"  {"order_id":"o"}"#.utf8))
        #expect(json.body == Array(#"  {"order_id":"o"}"#.utf8))
        #expect(json.query.isEmpty)

        let body = #"{"event_id":"e","session":{"session_id":"h"}}"# + "\n"
        let raw =
            "POST /klarna/hpp?kp_session_id=kp%201&token=abc&hpp_session_id=h HTTP/1.1\r\nHost: shop.example\r\nKlarna-Signature: ab12\r\nContent-Length: \(body.utf8.count)\r\n\r\n"
            + body
        let delivery = try SpoolFile.delivery(Array(raw.utf8))
        #expect(delivery.body == Array(body.utf8))
        #expect(delivery.query == ["kp_session_id": "kp 1", "token": "abc", "hpp_session_id": "h"])
        #expect(delivery.header("klarna-signature") == "ab12")

        let bare = try SpoolFile.delivery(Array("POST /x?token=t HTTP/1.1\nContent-Type: application/json\n\n{\"a\":1}".utf8))
        #expect(bare.body == Array("{\"a\":1}".utf8))
        // Content-Length shorter than what follows: the extra bytes (a trailing newline from the forwarder) are not body.
        let trimmed = try SpoolFile.delivery(Array("POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}\n".utf8))
        #expect(trimmed.body == Array("{}".utf8))
    }

    @Test(
        "Malformed requests are refused with the rule",
        arguments: [
            ("POST / HTTP/1.1\r\nContent-Length: 99\r\n\r\n{}", "truncated"), ("GET /x HTTP/1.1\r\n\r\n{}", "malformed_request"),
            ("POST /x HTTP/1.1\r\nno blank line", "malformed_request"), ("POST /x HTTP/1.1\r\nBroken header\r\n\r\n{}", "malformed_request"),
            ("hello world", "unknown_format"),
        ])
    func malformed(text: String, rule: String) {
        #expect(throws: Spool.Refusal.self) { try SpoolFile.delivery(Array(text.utf8)) }
        do { _ = try SpoolFile.delivery(Array(text.utf8)) } catch { #expect(error.rule == rule) }
    }
}

@Suite("Spool directory")
struct SpoolDirectoryTests {
    func spool(_ directory: TemporaryDirectory, max: Int = 4_096) throws -> Spool {
        let spool = Spool(directory: directory.path + "/spool", maxFileBytes: max, keepDone: false)
        try spool.prepare()
        return spool
    }

    func refusal(_ spool: Spool, _ name: String) -> Spool.Refusal? {
        do {
            let path = try spool.claim(name)
            if let path { _ = try spool.read(path) }
            return nil
        } catch {
            return error
        }
    }

    @Test("Symlinks, FIFOs, hard links, oversized files and unsafe names are refused without being followed or read")
    func unsafeFiles() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let spool = try spool(directory)
        let new = spool.directory + "/new"
        let secret = directory.path + "/outside-secret"
        try "do not read".write(toFile: secret, atomically: true, encoding: .utf8)
        symlink(secret, new + "/link")
        symlink("../../outside-secret", new + "/relative-link")
        mkfifo(new + "/fifo", 0o600)
        try "{}".write(toFile: new + "/original", atomically: true, encoding: .utf8)
        link(new + "/original", directory.path + "/second-name")
        try String(repeating: "x", count: 5_000).write(toFile: new + "/big", atomically: true, encoding: .utf8)
        try "{}".write(toFile: new + "/has space", atomically: true, encoding: .utf8)
        try "{}".write(toFile: new + "/ümlaut", atomically: true, encoding: .utf8)

        // A device node, where this process may make one (root): refused from lstat alone, never opened.
        let madeDevice = mknod(new + "/device", S_IFCHR | 0o600, dev_t(0x103)) == 0  // makedev(1, 3): /dev/null
        if madeDevice { #expect(refusal(spool, "device")?.rule == "not_regular") }

        #expect(refusal(spool, "link")?.rule == "symlink")
        #expect(refusal(spool, "relative-link")?.rule == "symlink")
        #expect(refusal(spool, "fifo")?.rule == "not_regular")
        #expect(refusal(spool, "original")?.rule == "hard_link")
        #expect(refusal(spool, "big")?.rule == "too_large")
        #expect(refusal(spool, "has space")?.rule == "unsafe_name")
        #expect(refusal(spool, "ümlaut")?.rule == "unsafe_name")
        // Refused files were not claimed, and the symlink's target is untouched.
        #expect(spool.names(in: "cur").isEmpty)
        #expect(try String(contentsOfFile: secret, encoding: .utf8) == "do not read")
    }

    @Test("Safe names: letters, digits and ._:,=+-@, 1–200 bytes, no leading dot")
    func safeNames() {
        for name in ["a", "2026-11-26T09:00:00Z.json", "x_y:z,a=b+c-d@e.json", String(repeating: "n", count: 200)] {
            #expect(Spool.isSafeName(name), "\(name)")
        }
        for name in [
            "", ".hidden", "a/b", "a b", "tab\t", "new\nline", "ümlaut", "a*b", "semi;colon", "quote\"", "a\0b", String(repeating: "n", count: 201),
        ] {
            #expect(!Spool.isSafeName(name), "\(name)")
        }
    }

    @Test("Dot-files and reason files are never picked up; names come oldest first")
    func names() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let spool = try spool(directory)
        for name in ["2.json", ".partial", "1.json"] { try "{}".write(toFile: spool.directory + "/new/" + name, atomically: true, encoding: .utf8) }
        #expect(spool.names(in: "new") == ["1.json", "2.json"])
    }

    @Test("Quarantine keeps the file with its reason; requeue puts it back")
    func quarantineAndRequeue() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let spool = try spool(directory)
        try "{bad".write(toFile: spool.directory + "/new/x.json", atomically: true, encoding: .utf8)
        let claimed = try #require(try spool.claim("x.json"))
        try spool.quarantine(
            claimed, rule: "malformed_json", detail: "the body is not JSON", status: 400, at: Date(timeIntervalSince1970: 1_800_000_000))
        #expect(spool.names(in: "quarantine") == ["x.json"])
        #expect(spool.reason(of: "x.json")?.rule == "malformed_json")
        try spool.requeue("x.json")
        #expect(spool.names(in: "new") == ["x.json"])
        #expect(spool.reason(of: "x.json") == nil)
        #expect(throws: Spool.Refusal.self) { try spool.requeue("../new/x.json") }
    }
}

@Suite("Spool service with a real store")
struct SpoolServiceTests {
    @Test("Track requests, repeats and bad files: committed ones removed, bad ones quarantined, a store failure leaves the file")
    func processing() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let spool = Spool(directory: directory.path + "/spool", maxFileBytes: 4_096, keepDone: true)
        try spool.prepare()
        let store = try SQLiteStore(path: directory.path + "/state.sqlite")
        let woken = LogLines()
        let reader = WebhookReader(tokens: nil, policy: .require, signingKeys: SigningKeys([:]))
        let ingestor = Ingestor(reader: reader, store: store, defaultCapturePolicy: .onRequest, clock: SystemClock(), logger: Logger(label: "t")) {
            keys, _ in
            for key in keys { woken.logger().info("\(key)") }
        }
        let service = SpoolService(spool: spool, ingestor: ingestor, rescanInterval: .seconds(60), clock: SystemClock(), logger: Logger(label: "t"))
        func drop(_ name: String, _ text: String) throws {
            // The forwarder's way: write in tmp/, rename into new/.
            try text.write(toFile: spool.directory + "/tmp/" + name, atomically: false, encoding: .utf8)
            rename(spool.directory + "/tmp/" + name, spool.directory + "/new/" + name)
        }
        try drop("001.json", #"{"hpp_session_id":"h-1","kp_session_id":"k-1","merchant_reference":"from spool"}"#)
        try drop("002.json", #"{"hpp_session_id":"h-1","kp_session_id":"k-1"}"#)
        try drop("003.json", #"{"hpp_session_id":"#)
        try drop("004.json", #"{"order_id":"o-unknown","amount":5}"#)
        await service.scan()
        #expect(try await store.session("h-1")?.merchantReference == "from spool")
        #expect(try await store.session("h-1")?.capturePolicy == .onRequest)
        #expect(spool.names(in: "new").isEmpty && spool.names(in: "cur").isEmpty)
        #expect(spool.names(in: "done") == ["001.json", "002.json"])
        #expect(spool.names(in: "quarantine") == ["003.json", "004.json"])
        #expect(spool.reason(of: "003.json")?.rule == "malformed_json")
        #expect(spool.reason(of: "004.json")?.rule == "unknown_order")
        #expect(woken.all.filter { $0.contains("session:h-1") }.count == 1)

        // The store cannot commit (a full disk): the file stays claimed in cur/ and is taken on a later rescan.
        let broken = FaultyStore(store, failIngest: true)
        let failing = Ingestor(reader: reader, store: broken, defaultCapturePolicy: .immediate, clock: SystemClock(), logger: Logger(label: "t")) {
            _, _ in
        }
        let failingService = SpoolService(
            spool: spool, ingestor: failing, rescanInterval: .seconds(60), clock: SystemClock(), logger: Logger(label: "t"))
        try drop("005.json", #"{"hpp_session_id":"h-5","kp_session_id":"k-5","merchant_reference":"first"}"#)
        await failingService.scan(includingClaimed: true)
        #expect(spool.names(in: "cur") == ["005.json"])
        #expect(spool.names(in: "quarantine") == ["003.json", "004.json"])
        // A later file for the same payment waits behind it: an ordinary scan (an inotify event) leaves new/ alone
        // while cur/ holds what the store could not take.
        try drop("006.json", #"{"hpp_session_id":"h-5","kp_session_id":"k-5","merchant_reference":"second"}"#)
        await service.scan()
        #expect(spool.names(in: "new") == ["006.json"])
        #expect(try await store.session("h-5") == nil)
        // The rescan takes cur/ first, then new/: the earlier file is the one that tracked the payment.
        await service.scan(includingClaimed: true)
        #expect(spool.names(in: "cur").isEmpty && spool.names(in: "new").isEmpty)
        #expect(try await store.session("h-5")?.merchantReference == "first")
    }

    @Test(
        "Files found together are committed together, in name order: 300 track requests take two writes (batches of 256); a repeat in the second batch finds the session the first batch made"
    )
    func filesFoundTogetherShareACommit() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let spool = Spool(directory: directory.path + "/spool", maxFileBytes: 4_096, keepDone: false)
        try spool.prepare()
        let store = try SQLiteStore(path: directory.path + "/state.sqlite")
        let reader = WebhookReader(tokens: nil, policy: .require, signingKeys: SigningKeys([:]))
        let ingestor = Ingestor(reader: reader, store: store, defaultCapturePolicy: .immediate, clock: SystemClock(), logger: Logger(label: "t")) {
            _, _ in
        }
        let service = SpoolService(spool: spool, ingestor: ingestor, rescanInterval: .seconds(60), clock: SystemClock(), logger: Logger(label: "t"))
        for index in 0..<300 {
            // File 260 (second batch) repeats file 255's session (first batch) without its reference: the second
            // batch is read while the first commits, and committed after it, so it is a repeat.
            let session = index == 260 ? 255 : index
            let reference = index == 260 ? "" : #","merchant_reference":"ref-\#(index)""#
            let name = String(format: "%04d.json", index)
            try #"{"hpp_session_id":"h-\#(session)","kp_session_id":"k-\#(session)"\#(reference)}"#.write(
                toFile: spool.directory + "/tmp/" + name, atomically: false, encoding: .utf8)
            rename(spool.directory + "/tmp/" + name, spool.directory + "/new/" + name)
        }
        let before = store.writeStatistics
        await service.scan()
        #expect(spool.names(in: "new").isEmpty && spool.names(in: "cur").isEmpty && spool.names(in: "quarantine").isEmpty)
        let after = store.writeStatistics
        #expect(after.submitted - before.submitted == 2, "one write per batch: \(after.submitted - before.submitted)")
        #expect(after.transactions - before.transactions <= 2)
        #expect(try await store.session("h-255")?.merchantReference == "ref-255")
        #expect(try await store.session("h-260") == nil)
        #expect(try await store.session("h-299") != nil)
        #expect(try await store.openWork().count == 299)
    }

    @Test(
        "A store that cannot take the first batch: the batch read meanwhile is claimed but not committed, nothing is lost, and the rescan commits all 300; a stop between batches leaves the rest for the next scan"
    )
    func pipelineStopsOnFailureAndStop() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let spool = Spool(directory: directory.path + "/spool", maxFileBytes: 4_096, keepDone: false)
        try spool.prepare()
        let store = try SQLiteStore(path: directory.path + "/state.sqlite")
        let reader = WebhookReader(tokens: nil, policy: .require, signingKeys: SigningKeys([:]))
        func service(_ store: any IngestStore) -> SpoolService {
            let ingestor = Ingestor(reader: reader, store: store, defaultCapturePolicy: .immediate, clock: SystemClock(), logger: Logger(label: "t"))
            { _, _ in }
            return SpoolService(spool: spool, ingestor: ingestor, rescanInterval: .seconds(60), clock: SystemClock(), logger: Logger(label: "t"))
        }
        func drop(_ count: Int, from first: Int) throws {
            for index in first..<(first + count) {
                let name = String(format: "%04d.json", index)
                try #"{"hpp_session_id":"h-\#(index)","kp_session_id":"k-\#(index)"}"#.write(
                    toFile: spool.directory + "/tmp/" + name, atomically: false, encoding: .utf8)
                rename(spool.directory + "/tmp/" + name, spool.directory + "/new/" + name)
            }
        }
        try drop(300, from: 0)
        await service(FaultyStore(store, failIngest: true)).scan()
        #expect(spool.names(in: "cur").count == 300, "both batches claimed, neither committed nor removed")
        #expect(spool.names(in: "new").isEmpty && spool.names(in: "quarantine").isEmpty)
        #expect(try await store.openWork().isEmpty)
        await service(store).scan(includingClaimed: true)
        #expect(spool.names(in: "cur").isEmpty)
        #expect(try await store.openWork().count == 300)

        // A stop asked for after the first batch: it is committed and removed; the second, read meanwhile, waits in
        // cur/ and the rescan takes it.
        try drop(300, from: 300)
        await service(store).scan { false }
        #expect(spool.names(in: "cur").count == 44 && spool.names(in: "new").isEmpty)
        #expect(try await store.openWork().count == 300 + 256)
        await service(store).scan(includingClaimed: true)
        #expect(spool.names(in: "cur").isEmpty)
        #expect(try await store.openWork().count == 600)
    }

    @Test(
        "A store that fails part way through a batch (one commit per record) says which were recorded: those are accepted, the rest 503, nothing twice"
    )
    func storeFailingPartWay() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/state.sqlite")
        let failing = FailingAfter(store, successes: 2)
        let reader = WebhookReader(tokens: nil, policy: .require, signingKeys: SigningKeys([:]))
        let ingestor = Ingestor(reader: reader, store: failing, defaultCapturePolicy: .immediate, clock: SystemClock(), logger: Logger(label: "t")) {
            _, _ in
        }
        let deliveries = try (1...3).map { index in
            (
                delivery: try SpoolFile.delivery(Array(#"{"hpp_session_id":"h-\#(index)","kp_session_id":"k-\#(index)"}"#.utf8)),
                source: "spool:\(index).json"
            )
        }
        let answers = await ingestor.ingest(deliveries)
        #expect(answers.map(\.status) == [202, 202, 503])
        #expect(try await store.session("h-1") != nil)
        #expect(try await store.session("h-2") != nil)
        #expect(try await store.session("h-3") == nil)
    }
}

/// The real store's ingest, failing (a full disk) after `successes` commits; the batch is the protocol's default, one
/// commit per record, as PostgreSQL's.
final class FailingAfter: IngestStore, @unchecked Sendable {
    let store: SQLiteStore
    private let left: Mutex<Int>

    init(_ store: SQLiteStore, successes: Int) {
        self.store = store
        left = Mutex(successes)
    }

    struct DiskFull: Error {}

    func ingest(_ record: IngestRecord, at: Date) async throws -> IngestResult {
        guard
            left.withLock({ left in
                defer { left -= 1 }; return left > 0
            })
        else { throw DiskFull() }
        return try await store.ingest(record, at: at)
    }

    func recordRejection(source: String, status: Int, error: String, detail: String, at: Date) async throws {
        try await store.recordRejection(source: source, status: status, error: error, detail: detail, at: at)
    }

    func track(_ session: TrackedSession, event: DomainEvent, at: Date) async throws -> TrackResult {
        try await store.track(session, event: event, at: at)
    }

    func requestCapture(orderID: String, amount: Int?, at: Date) async throws -> CaptureRequestResult {
        try await store.requestCapture(orderID: orderID, amount: amount, at: at)
    }
    func sessionAccount(hppSessionID: String?, kpSessionID: String?) async throws -> AccountID? {
        try await store.sessionAccount(hppSessionID: hppSessionID, kpSessionID: kpSessionID)
    }
}
