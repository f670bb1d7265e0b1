import Crypto
import ChildProcess
import Foundation
import Glibc
import KlarnaAPI
import KlarnaSandbox
import Logging
import ReconcilerCore
import ReconcilerStore
import Testing
import TestSupport

/// Webhooks over the daemon's unix socket, sent with curl as a forwarder would.
@Suite("Ingest over the unix socket", .serialized)
struct IngestSocketTests {
    func token(_ kind: String, _ kp: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Array("\(kind):\(kp)".utf8), using: SymmetricKey(data: Array(DaemonFixture.callbackKey.utf8)))
        return Data(mac).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(
            of: "=", with: "")
    }

    func sign(_ body: String) -> String {
        HMAC<SHA256>.authenticationCode(for: Array(body.utf8), using: SymmetricKey(data: Array(DaemonFixture.signingKey.utf8))).map {
            String(format: "%02x", $0)
        }.joined()
    }

    @Test("Each kind through the socket leads to the right engine action, after a re-read of Klarna")
    func everyKind() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: fixture.socketPath)[.posixPermissions] as? Int)
        #expect(mode & 0o777 == 0o660)
        #expect(try await fixture.post("/v1/health", "", method: "GET").status == 200)

        // 1. A verified HPP status callback for a session nobody tracked: the daemon starts tracking it.
        let fromWebhook = try fixture.sandbox.createSession(SessionSpec(orderAmount: 3_100))
        try fixture.sandbox.setHPPStatus(fromWebhook.hppSessionId, "COMPLETED")
        let kp = fromWebhook.kpSessionId
        let callback = "/v1/webhooks/hpp-status?kp_session_id=\(kp)&token=\(token("hpp-status", kp))&hpp_session_id=\(fromWebhook.hppSessionId)"
        let event = #"{"event_id":"ev-1","session":{"session_id":"\#(fromWebhook.hppSessionId)","status":"COMPLETED"}}"#
        let first = try await fixture.post(callback, event)
        #expect(first.status == 202)
        #expect(first.body.contains(#""status":"accepted""#))
        let repeated = try await fixture.post(callback, event)
        #expect(repeated.status == 202)
        #expect(repeated.body.contains(#""status":"repeat""#))

        // 2. A track request, and a capture request for it once placed.
        let tracked = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 8_000, merchantReference: "sock-2", schedule: [ScheduleStep(afterSeconds: 0.3, status: "COMPLETED")]))
        let track = try await fixture.post(
            "/v1/sessions",
            #"{"hpp_session_id":"\#(tracked.hppSessionId)","kp_session_id":"\#(tracked.kpSessionId)","merchant_reference":"sock-2","capture":"on_request"}"#
        )
        #expect(track.status == 202, "\(track.body)")
        let store = try fixture.readStore()
        let order = try await { () async throws -> String in
            var found: String?
            try await waitUntil(timeout: .seconds(30)) {
                found = try await store.timeline(for: "sock-2").orders.first { $0.phase == .awaitingCapture }?.orderID; return found != nil
            }
            return found!
        }()
        let capture = try await fixture.post("/v1/orders/\(order)/capture", #"{"amount":3000}"#)
        #expect(capture.status == 202, "\(capture.body)")
        #expect(try await fixture.post("/v1/orders/unknown-order/capture", "{}").status == 404)

        // 3. A pending order and Klarna's notification: read at once, captured after acceptance.
        let pending = try fixture.sandbox.createSession(
            SessionSpec(merchantReference: "sock-3", fraudStatus: "PENDING", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        #expect(
            try await fixture.post(
                "/v1/sessions",
                #"{"hpp_session_id":"\#(pending.hppSessionId)","kp_session_id":"\#(pending.kpSessionId)","merchant_reference":"sock-3"}"#
            ).status == 202)
        var pendingOrder: String?
        try await waitUntil(timeout: .seconds(30)) {
            pendingOrder = try await store.timeline(for: "sock-3").orders.first { $0.phase == .pendingFraud }?.orderID; return pendingOrder != nil
        }
        try fixture.sandbox.setFraudStatus(orderID: pendingOrder!, "ACCEPTED")
        let notification = try await fixture.post(
            "/v1/webhooks/om-notification", #"{"order_id":"\#(pendingOrder!)","event_type":"FRAUD_RISK_ACCEPTED"}"#)
        #expect(notification.status == 202)

        // 4. Klarna Network, signed.
        let kn =
            #"{"metadata":{"event_type":"payment.request.state-change.completed","event_id":"kn-1"},"payload":{"payment_request_id":"krn:payment:eu1:request:1","state":"COMPLETED"}}"#
        #expect(
            try await fixture.post(
                "/v1/webhooks/klarna", kn,
                headers: ["Klarna-Signature: \(sign(kn))", "Klarna-Signing-Key-Id: krn:partner:global:notification:signing-key:1"]
            ).status == 202)

        try await waitUntil(timeout: .seconds(30)) {
            let kinds =
                (try await store.timeline(for: fromWebhook.hppSessionId).outcomes + store.timeline(for: "sock-2").outcomes
                + store.timeline(for: "sock-3").outcomes).map(\.outcome.kind)
            return kinds.filter { $0 == .captured }.count == 3
        }
        // The webhook-tracked session: tracked with the default policy and completed; no side effect came before
        // the daemon's own read of the HPP session.
        let requests = fixture.sandbox.requests()
        let firstRead = try #require(requests.firstIndex { $0.route == "hpp.read_session" && $0.path.hasSuffix(fromWebhook.hppSessionId) })
        let placed = try #require(requests.firstIndex { $0.route == "kp.create_order" })
        #expect(firstRead < placed)
        #expect(fixture.sandbox.effects(kind: .captured).filter { $0.orderId == order }.map(\.amount) == [3_000])
        let pendingEvents = try await store.timeline(for: "sock-3").events.map(\.kind)
        #expect(pendingEvents.contains("webhook"))
        #expect(try await fixture.stop() == 0)
    }

    @Test("Hostile and wrong deliveries get their status and a JSON reason; the daemon keeps serving")
    func refusals() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let kp = "kp-x"
        let good = "/v1/webhooks/hpp-status?kp_session_id=\(kp)&token=\(token("hpp-status", kp))"
        let event = #"{"event_id":"e","session":{"session_id":"hpp-x"}}"#
        let kn = #"{"metadata":{"event_type":"payment.request.state-change.completed","event_id":"kn-2"},"payload":{}}"#
        let cases: [(String, String, [String], Int, String)] = [
            ("/v1/webhooks/hpp-status?kp_session_id=\(kp)", event, [], 401, "missing_token"),
            ("/v1/webhooks/hpp-status?kp_session_id=\(kp)&token=\(token("kp-authorization", kp))", event, [], 403, "bad_token"),
            (good, "{not json", [], 400, "malformed_json"),
            (good, "\u{0}", [], 400, "bad_encoding"),
            ("/v1/webhooks/om-notification", #"{"order_id":"o","event_type":"SOMETHING_ELSE"}"#, [], 400, "unknown_event_type"),
            (
                "/v1/webhooks/klarna", kn,
                ["Klarna-Signature: \(sign(kn + " "))", "Klarna-Signing-Key-Id: krn:partner:global:notification:signing-key:1"], 400, "bad_signature"
            ),
            ("/v1/webhooks/klarna", kn, ["Klarna-Signature: \(sign(kn))", "Klarna-Signing-Key-Id: krn:unknown"], 400, "bad_signature"),
            ("/v1/webhooks/klarna", kn, [], 400, "bad_signature"),
            ("/v1/sessions", #"{"hpp_session_id":"h"}"#, [], 400, "missing_field"),
            ("/v1/nothing-here", "{}", [], 404, "not_found"),
        ]
        for (target, body, headers, status, word) in cases {
            let answer = try await fixture.post(target, body, headers: headers)
            #expect(answer.status == status, "\(target): \(answer.body)")
            #expect(answer.body.contains(#""error":"\#(word)""#), "\(target): \(answer.body)")
        }
        // A wrong method on a known route is a refusal too (its query, a token here, is never recorded).
        let wrongMethod = try await fixture.post("/v1/webhooks/hpp-status?kp_session_id=\(kp)&token=secret-in-query", "", method: "GET")
        #expect(wrongMethod.status == 405, "\(wrongMethod.body)")
        #expect(wrongMethod.body.contains(#""error":"method_not_allowed""#), "\(wrongMethod.body)")
        // Every refusal is recorded with its reason, the unknown route and the wrong method included: `status` counts
        // them and shows the last.
        let status = try await fixture.cli(["status"])
        #expect(status.output.contains("refused input:  \(cases.count + 1) in the last 24 h; last"), "\(status.output)")
        #expect(status.output.contains("socket 405 method_not_allowed: GET is not allowed on /v1/webhooks/hpp-status"), "\(status.output)")
        #expect(!status.output.contains("secret-in-query"), "\(status.output)")
        // A body over the limit is refused by the server before any handler, and recorded all the same.
        let big = String(repeating: "x", count: 2 << 20)
        #expect(try await fixture.post("/v1/sessions?token=big-secret", big).status == 413)
        let afterTooLarge = try await fixture.cli(["status"])
        #expect(afterTooLarge.output.contains("refused input:  \(cases.count + 2) in the last 24 h; last"), "\(afterTooLarge.output)")
        #expect(
            afterTooLarge.output.contains("socket 413 too_large: POST /v1/sessions: a body of 2097152 bytes is over the limit"),
            "\(afterTooLarge.output)")
        #expect(!afterTooLarge.output.contains("big-secret"), "\(afterTooLarge.output)")
        // Sent chunked, without a length, it is cut off once it passes the limit, and recorded all the same. (The
        // client may see the connection close before it reads the 413: it was still sending.)
        // (Without curl's `Expect: 100-continue`, whose second of waiting the fixture's 1 s request timeout cuts off.)
        let chunked = try await fixture.post("/v1/sessions", big, headers: ["Transfer-Encoding: chunked", "Expect:"])
        #expect(chunked.status == 413 || chunked.status == 0, "\(chunked)")
        let afterChunked = try await fixture.cli(["status"])
        #expect(afterChunked.output.contains("refused input:  \(cases.count + 3) in the last 24 h; last"), "\(afterChunked.output)")
        #expect(
            afterChunked.output.contains(
                "socket 413 too_large: POST /v1/sessions: a body of more than 1048576 bytes (sent without a length) is over the limit"),
            "\(afterChunked.output)")
        #expect(try await fixture.post("/v1/health", "", method: "GET").status == 200)
        #expect(try await fixture.post(good, event).status == 202)
        #expect(try await fixture.stop() == 0)
    }
}

/// The spool as a forwarder uses it: a shell script writing into tmp/ and renaming into new/.
@Suite("Ingest through the spool directory", .serialized)
struct IngestSpoolTests {
    /// Runs `script` with /bin/sh in the spool directory.
    func shell(_ fixture: DaemonFixture, _ script: String) async throws {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", script]
        process.currentDirectoryURL = URL(fileURLWithPath: fixture.directory + "/spool")
        try process.run()
        try await waitUntil { !process.isRunning }
        #expect(process.terminationStatus == 0, "\(script)")
    }

    @Test("A shell forwarder's files are committed and removed; hostile files are quarantined with a reason; the daemon keeps working")
    func forwarder() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let plain = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 4_400, merchantReference: "spool-1", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        try await shell(
            fixture,
            #"printf '%s' '{"hpp_session_id":"\#(plain.hppSessionId)","kp_session_id":"\#(plain.kpSessionId)","merchant_reference":"spool-1"}' > tmp/0001.json && mv tmp/0001.json new/0001.json"#
        )

        // A raw HTTP request as an nginx mirror would record it: the HPP callback for a session nobody tracked.
        let raw = try fixture.sandbox.createSession(SessionSpec(orderAmount: 5_500))
        try fixture.sandbox.setHPPStatus(raw.hppSessionId, "COMPLETED")
        let token = IngestSocketTests().token("hpp-status", raw.kpSessionId)
        let body = #"{"event_id":"spool-ev-1","session":{"session_id":"\#(raw.hppSessionId)","status":"COMPLETED"}}"#
        let request =
            "POST /klarna/hpp-status?kp_session_id=\(raw.kpSessionId)&token=\(token)&hpp_session_id=\(raw.hppSessionId) HTTP/1.1\r\nHost: shop.example\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        try request.write(toFile: fixture.directory + "/spool/tmp/0002.http", atomically: false, encoding: .utf8)
        try await shell(fixture, "mv tmp/0002.http new/0002.http")

        // Hostile entries.
        try "secret".write(toFile: fixture.directory + "/outside", atomically: true, encoding: .utf8)
        try await shell(
            fixture,
            "ln -s ../../outside new/0003-link && mkfifo new/0004-fifo && printf '{}' > ../hard && ln ../hard new/0005-hard && printf 'not json' > tmp/0006.json && mv tmp/0006.json new/0006.json"
        )

        let store = try fixture.readStore()
        try await waitUntil(timeout: .seconds(30)) {
            let captured = (try await store.timeline(for: "spool-1").outcomes + store.timeline(for: raw.hppSessionId).outcomes).filter {
                $0.outcome.kind == .captured
            }
            return captured.count == 2
        }
        try await waitUntil(timeout: .seconds(30)) { Set(fixture.quarantined()) == ["0003-link", "0004-fifo", "0005-hard", "0006.json"] }
        #expect(fixture.spoolNames("new").isEmpty && fixture.spoolNames("cur").isEmpty)
        let list = try await fixture.cli(["quarantine", "list"])
        for rule in ["symlink", "not_regular", "hard_link", "unknown_format"] { #expect(list.output.contains(rule), "\(list.output)") }
        #expect(try String(contentsOfFile: fixture.directory + "/outside", encoding: .utf8) == "secret")
        let show = try await fixture.cli(["quarantine", "show", "0006.json"])
        #expect(show.output.contains("not json"))

        // A KP callback with a wrong token: quarantined, and `show` hides both tokens.
        let secretToken = "secret-authorization-token-123"
        let forged =
            "POST /klarna/kp?kp_session_id=kp-9&token=forged-callback-token HTTP/1.1\r\nHost: shop.example\r\n\r\n"
            + #"{"authorization_token":"\#(secretToken)","session_id":"kp-9"}"#
        try forged.write(toFile: fixture.directory + "/spool/tmp/0007.http", atomically: false, encoding: .utf8)
        try await shell(fixture, "mv tmp/0007.http new/0007.http")
        try await waitUntil(timeout: .seconds(30)) { fixture.quarantined().contains("0007.http") }
        let hidden = try await fixture.cli(["quarantine", "show", "0007.http"])
        #expect(hidden.output.contains("bad_token"))
        #expect(!hidden.output.contains(secretToken) && !hidden.output.contains("forged-callback-token"), "\(hidden.output)")

        // Requeued: processed like any new file (here still not a delivery, so back in quarantine, once).
        #expect(try await fixture.cli(["quarantine", "requeue", "0006.json"]).status == 0)
        try await waitUntil(timeout: .seconds(30)) { fixture.quarantined().contains("0006.json") && fixture.spoolNames("new").isEmpty }
        #expect(try await fixture.stop() == 0)
    }

    @Test("kill -9 between claiming a file and removing it loses nothing: the file in cur/ is processed at the next start")
    func crashBetweenClaimAndCommit() async throws {
        let fixture = try await DaemonFixture()
        let session = try fixture.sandbox.createSession(
            SessionSpec(merchantReference: "claimed", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        // As the daemon leaves it when killed right after the claim.
        try FileManager.default.createDirectory(atPath: fixture.directory + "/spool/cur", withIntermediateDirectories: true)
        try #"{"hpp_session_id":"\#(session.hppSessionId)","kp_session_id":"\#(session.kpSessionId)","merchant_reference":"claimed"}"#
            .write(toFile: fixture.directory + "/spool/cur/0001.json", atomically: true, encoding: .utf8)
        try await fixture.start()
        let store = try fixture.readStore()
        try await waitUntil(timeout: .seconds(30)) { try await store.timeline(for: "claimed").outcomes.contains { $0.outcome.kind == .captured } }
        #expect(fixture.spoolNames("cur").isEmpty)
        #expect(try await fixture.stop() == 0)
    }
}

extension DaemonFixture {
    func spoolNames(_ sub: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: spoolDirectory + "/" + sub)) ?? []).sorted()
    }

    func quarantined() -> [String] { spoolNames("quarantine").filter { !$0.hasSuffix(".reason") } }
}

/// A raw unix stream socket client, for what curl will not send: half requests, huge headers, slow bytes. Its
/// blocking calls run on a thread of their own, never on the task pool the in-process sandbox needs.
final class RawSocket: @unchecked Sendable {
    let fd: Int32

    init(path: String) throws {
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path.utf8.prefix($0.count - 1)) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard fd >= 0, connected == 0 else { throw SocketSetupFailed() }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        signal(SIGPIPE, SIG_IGN)
    }

    deinit { close(fd) }

    private func offThread<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: work()) }.start()
        }
    }

    /// Writes what it can; `false` once the server has closed.
    @discardableResult
    func send(_ text: String) async -> Bool {
        let bytes = Array(text.utf8)
        let fd = self.fd
        return await offThread {
            var offset = 0
            while offset < bytes.count {
                let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
                if written <= 0 { return false }
                offset += written
            }
            return true
        }
    }

    /// Everything until the server closes (or the 10 s receive timeout).
    func receiveAll() async -> String {
        let fd = self.fd
        return await offThread {
            var data: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let count = read(fd, &buffer, buffer.count)
                if count <= 0 { break }
                data += buffer[0..<count]
            }
            return String(decoding: data, as: UTF8.self)
        }
    }
}

@Suite("Ingest socket limits", .serialized)
struct IngestLimitTests {
    @Test("A 50 MB body is refused with 413 before it is sent; a 1 MB header gets 400; a slow client is cut off; the daemon keeps serving")
    func limits() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()

        let big = try RawSocket(path: fixture.socketPath)
        await big.send("POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: \(50 << 20)\r\n\r\n")
        let refused = await big.receiveAll()
        #expect(refused.hasPrefix("HTTP/1.1 413"), "\(refused.prefix(200))")
        #expect(refused.contains("too_large"))

        let header = try RawSocket(path: fixture.socketPath)
        await header.send(
            "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nX-Padding: \(String(repeating: "a", count: 1 << 20))\r\nContent-Length: 2\r\n\r\n{}")
        let answer = await header.receiveAll()
        #expect(answer.isEmpty || answer.hasPrefix("HTTP/1.1 400") || answer.hasPrefix("HTTP/1.1 431"), "\(answer.prefix(200))")

        let slow = try RawSocket(path: fixture.socketPath)
        let started = ContinuousClock.now
        var closed = false
        for piece in "POST /v1/sessions HTTP/1.1\r\nHost: x\r\n".map(String.init) {
            if await !slow.send(piece) { closed = true; break }
            try await Task.sleep(for: .milliseconds(100))
            if ContinuousClock.now - started > .seconds(5) { break }
        }
        if !closed { closed = await slow.receiveAll().isEmpty }
        #expect(closed)
        #expect(ContinuousClock.now - started < .seconds(5), "the slow client was not cut off within the 1 s request timeout")

        #expect(try await fixture.post("/v1/health", "", method: "GET").status == 200)
        #expect(try await fixture.stop() == 0)
    }
}

@Suite("Ingest durability", .serialized)
struct IngestDurabilityTests {
    @Test("kill -9 while deliveries arrive: every request that got 202 is in the store after the restart")
    func ackedIsDurable() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let acked = Locked<[String]>([])
        let sender = Task {
            for index in 0..<400 {
                let id = "ack-\(index)"
                if let answer = try? await fixture.post("/v1/sessions", #"{"hpp_session_id":"\#(id)","kp_session_id":"kp-\#(id)"}"#),
                    answer.status == 202
                {
                    acked.withLock { $0.append(id) }
                }
            }
        }
        try await waitUntil(timeout: .seconds(30)) { acked.withLock { $0.count } >= 50 }
        try await fixture.kill9()
        await sender.value
        try await fixture.start()
        let store = try fixture.readStore()
        let ids = acked.withLock { $0 }
        #expect(ids.count >= 50)
        for id in ids { #expect(try await store.session(id) != nil, "\(id) was acknowledged but is not in the store") }
        _ = try await fixture.stop()
    }

    @Test(
        "With no watermark and no reserve, a full disk: the socket answers 503, spool files stay in the spool, and both recover when space returns",
        .enabled(if: SmallDisk.canMount, "needs root and mount rights for a small tmpfs"))
    func fullDisk() async throws {
        // What the store does when the disk fills faster than the watermark sees it (DiskFullProcessTests has the
        // watermark and the reserve at work).
        try await SmallDisk.with(megabytes: 2) { disk in try await fullDisk(disk) }
    }

    private func fullDisk(_ disk: SmallDisk) async throws {
        let fixture = try await DaemonFixture(storeConfig: ["path: \(disk.path)/state.sqlite"], diskConfig: ["min_free_mb: 0", "reserve_mb: 0"])
        try await fixture.start()
        try disk.fill()
        let padding = String(repeating: "x", count: 200)
        var status = 0
        for index in 0..<50 where status != 503 {
            status = try await fixture.post(
                "/v1/sessions", #"{"hpp_session_id":"full-\#(index)","kp_session_id":"kp","merchant_reference":"\#(padding)"}"#
            ).status
        }
        #expect(status == 503)
        // A spool file meanwhile: refused by the store (and kept in cur/ for a later rescan) or, if SQLite found room
        // in its WAL after all, committed. Never quarantined, never lost.
        try #"{"hpp_session_id":"spooled","kp_session_id":"kp","merchant_reference":"\#(padding)"}"#.write(
            toFile: fixture.directory + "/spool/tmp/full.json", atomically: false, encoding: .utf8)
        rename(fixture.directory + "/spool/tmp/full.json", fixture.directory + "/spool/new/full.json")
        let store = try fixture.readStore()
        try await waitUntil(timeout: .seconds(30)) {
            if fixture.daemonLog.contains("cannot record a delivery from spool:full.json") { return true }
            return try await store.session("spooled") != nil
        }
        #expect(fixture.quarantined().isEmpty)
        if try await store.session("spooled") == nil { #expect(fixture.spoolNames("new") + fixture.spoolNames("cur") == ["full.json"]) }

        try await disk.free()
        #expect(try await fixture.post("/v1/sessions", #"{"hpp_session_id":"after","kp_session_id":"kp"}"#).status == 202)
        try await waitUntil(timeout: .seconds(30)) { fixture.spoolNames("new").isEmpty && fixture.spoolNames("cur").isEmpty }
        #expect(try await store.session("spooled") != nil)
        #expect(try await store.session("after") != nil)
        #expect(try await fixture.stop() == 0)
    }
}

final class Locked<Value>: @unchecked Sendable {
    private var value: Value
    private let lock = NSLock()
    init(_ value: Value) { self.value = value }
    func withLock<T>(_ body: (inout Value) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}

@Suite("Socket activation", .serialized)
struct SocketActivationTests {
    @Test("A socket passed by systemd (LISTEN_FDS) is adopted: a delivery sent before the daemon ran is answered 202")
    func adopted() async throws {
        let activator = URL(fileURLWithPath: "/usr/bin/systemd-socket-activate")
        guard FileManager.default.isExecutableFile(atPath: activator.path) else {
            Issue.record("systemd-socket-activate is missing (Debian package systemd)")
            return
        }
        let fixture = try await DaemonFixture()
        let process = ChildProcess()
        process.executableURL = activator
        process.arguments = ["-l", fixture.socketPath, "--fdname=ingest", DaemonFixture.executable.path, "run", "--config", fixture.configPath]
        process.standardError = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        try await waitUntil { FileManager.default.fileExists(atPath: fixture.socketPath) }
        // Nothing runs yet but the activator: this request is what starts the daemon, on the same socket. (The file
        // appears at bind, a moment before listen: connect until it is accepted.)
        var connected: RawSocket?
        try await waitUntil {
            connected = try? RawSocket(path: fixture.socketPath); return connected != nil
        }
        let client = try #require(connected)
        let body = #"{"hpp_session_id":"before-start","kp_session_id":"kp"}"#
        await client.send(
            "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        )
        let answer = await client.receiveAll()
        #expect(answer.hasPrefix("HTTP/1.1 202"), "\(answer.prefix(300))")
        #expect(try await fixture.readStore().session("before-start") != nil)
        kill(process.processIdentifier, SIGTERM)
        try await waitUntil(timeout: .seconds(20)) { !process.isRunning }
        #expect(process.terminationStatus == 0)
    }

    @Test("A passed descriptor that is not a listening unix stream socket is refused with the reason, never served")
    func wrongDescriptorRefused() async throws {
        let fixture = try await DaemonFixture()
        let errors = fixture.directory + "/activation.err"
        _ = FileManager.default.createFile(atPath: errors, contents: nil)
        let process = ChildProcess()
        // LISTEN_PID must be the daemon's own pid: the shell execs into it after opening fd 3 on a plain file.
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = [
            "-c", #"exec 3</dev/null; export LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=ingest; exec "$0" run --config "$1""#,
            DaemonFixture.executable.path, fixture.configPath,
        ]
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        try await waitUntil(timeout: .seconds(20)) { !process.isRunning }
        #expect(process.terminationStatus == 1)
        let said = try String(contentsOfFile: errors, encoding: .utf8)
        #expect(
            said.contains("cannot listen for deliveries: systemd passed 1 sockets (ingest) but none is a listening unix stream socket named ingest"),
            "\(said)")
        #expect(!FileManager.default.fileExists(atPath: fixture.socketPath))
    }
}

@Suite("Every kind through both paths", .serialized)
struct EveryKindBothPathsTests {
    /// Delivers `body` (with `query` and `headers`) through the socket at `route`, or as a raw HTTP spool file.
    func deliver(_ fixture: DaemonFixture, viaSpool: Bool, route: String, query: String = "", headers: [String] = [], body: String) async throws {
        if viaSpool {
            let name = "\(UUID().uuidString.prefix(8)).http"
            let request =
                "POST /public\(route)\(query.isEmpty ? "" : "?" + query) HTTP/1.1\r\nHost: shop.example\r\n"
                + headers.map { $0 + "\r\n" }.joined() + "Content-Length: \(body.utf8.count)\r\n\r\n" + body
            try request.write(toFile: fixture.directory + "/spool/tmp/" + name, atomically: false, encoding: .utf8)
            #expect(rename(fixture.directory + "/spool/tmp/" + name, fixture.directory + "/spool/new/" + name) == 0)
        } else {
            let answer = try await fixture.post(route + (query.isEmpty ? "" : "?" + query), body, headers: headers)
            #expect(answer.status == 202, "\(route): \(answer.body)")
        }
    }

    @Test("KP authorization, OM notification, Klarna Network and capture requests, through the socket and the spool", arguments: [false, true])
    func kinds(viaSpool: Bool) async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let store = try fixture.readStore()
        let tokens = IngestSocketTests()

        // KP authorization callback for a tracked session: the engine reads HPP at once instead of at the next poll.
        let authorized = try fixture.sandbox.createSession(SessionSpec(merchantReference: "kp-cb"))
        #expect(
            try await fixture.cli([
                "track", authorized.hppSessionId, "--kp-session", authorized.kpSessionId, "--reference", "kp-cb", "--capture", "on_request",
            ]).status == 0)
        try await waitUntil(timeout: .seconds(30)) { try await store.session(authorized.hppSessionId)?.hppStatus?.rawValue == "WAITING" }
        // Delivered while the session is open (the callback's token is only a hint: the daemon takes the real one
        // from its own read of HPP).
        try await deliver(
            fixture, viaSpool: viaSpool, route: "/v1/webhooks/kp-authorization",
            query: "kp_session_id=\(authorized.kpSessionId)&token=\(tokens.token("kp-authorization", authorized.kpSessionId))",
            body: #"{"authorization_token":"callback-token-\#(viaSpool)","session_id":"\#(authorized.kpSessionId)"}"#)
        try await waitUntil(timeout: .seconds(30)) {
            try await store.timeline(for: "kp-cb").events.contains { $0.kind == "webhook" && $0.message.contains("KP authorization callback") }
        }
        try fixture.sandbox.setHPPStatus(authorized.hppSessionId, "COMPLETED")
        var orderID: String?
        try await waitUntil(timeout: .seconds(30)) {
            orderID = try await store.timeline(for: "kp-cb").orders.first { $0.phase == .awaitingCapture }?.orderID; return orderID != nil
        }

        // A capture request for it.
        if viaSpool {
            try #"{"order_id":"\#(orderID!)","amount":1000,"request_id":"r-1"}"#.write(
                toFile: fixture.directory + "/spool/tmp/capture.json", atomically: false, encoding: .utf8)
            rename(fixture.directory + "/spool/tmp/capture.json", fixture.directory + "/spool/new/capture.json")
        } else {
            try await deliver(fixture, viaSpool: false, route: "/v1/orders/\(orderID!)/capture", body: #"{"amount":1000,"request_id":"r-1"}"#)
        }
        try await waitUntil(timeout: .seconds(30)) {
            fixture.sandbox.effects(kind: .captured).contains { $0.orderId == orderID && $0.amount == 1_000 }
        }

        // An OM notification for a pending order.
        let pending = try fixture.sandbox.createSession(
            SessionSpec(merchantReference: "om-cb", fraudStatus: "PENDING", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        #expect(try await fixture.cli(["track", pending.hppSessionId, "--kp-session", pending.kpSessionId, "--reference", "om-cb"]).status == 0)
        var pendingOrder: String?
        try await waitUntil(timeout: .seconds(30)) {
            pendingOrder = try await store.timeline(for: "om-cb").orders.first { $0.phase == .pendingFraud }?.orderID; return pendingOrder != nil
        }
        try fixture.sandbox.setFraudStatus(orderID: pendingOrder!, "ACCEPTED")
        try await deliver(
            fixture, viaSpool: viaSpool, route: "/v1/webhooks/om-notification",
            body: #"{"order_id":"\#(pendingOrder!)","event_type":"FRAUD_RISK_ACCEPTED"}"#)
        try await waitUntil(timeout: .seconds(30)) { try await store.timeline(for: "om-cb").outcomes.contains { $0.outcome.kind == .captured } }

        // Klarna Network, signed over the byte-exact body: the daemon reads the payment request and writes an outcome
        // with the session token for the acquiring partner.
        let paymentRequest = fixture.sandbox.createPaymentRequest(state: "COMPLETED")
        let kn =
            #"{"metadata":{"event_type":"payment.request.state-change.completed","event_id":"kn-\#(viaSpool)"},"payload":{"payment_request_id":"\#(paymentRequest)","state":"COMPLETED"}}"#
        try await deliver(
            fixture, viaSpool: viaSpool, route: "/v1/webhooks/klarna",
            headers: ["Klarna-Signature: \(tokens.sign(kn))", "Klarna-Signing-Key-Id: krn:partner:global:notification:signing-key:1"], body: kn)
        var completed: String?
        try await waitUntil(timeout: .seconds(30)) {
            completed = fixture.outboxFiles().first { $0.hasSuffix("payment_request_completed.json") }; return completed != nil
        }
        let document = try String(contentsOfFile: fixture.outboxNew + "/" + completed!, encoding: .utf8)
        #expect(document.contains(#""klarna_network_session_token":"krn:network:eu1:session-token:"#))
        #expect(document.contains(paymentRequest.replacingOccurrences(of: "/", with: "\\/")) || document.contains(paymentRequest))

        #expect(fixture.quarantined().isEmpty, "\(fixture.quarantined())")
        #expect(try await fixture.stop() == 0)
    }
}

@Suite("Ingest socket ownership and TCP", .serialized)
struct IngestOwnershipTests {
    @Test(
        "The socket belongs to ingest.socket_group with mode 0660; the optional loopback TCP listener serves the same routes, refunds and charges excepted"
    )
    func groupAndTCP() async throws {
        guard let group = getgrnam("nogroup") else { Issue.record("no group nogroup on this machine"); return }
        let gid = group.pointee.gr_gid
        let fixture = try await DaemonFixture(ingestConfig: ["socket_group: nogroup", "listen: 127.0.0.1:0"])
        try await fixture.start()
        let attributes = try FileManager.default.attributesOfItem(atPath: fixture.socketPath)
        #expect((attributes[.groupOwnerAccountID] as? NSNumber)?.uint32Value == gid)
        #expect((attributes[.posixPermissions] as? Int).map { $0 & 0o777 } == 0o660)
        // The READY line names the port the kernel picked.
        let ready = try #require(fixture.daemonLog.split(separator: "\n").first { $0.contains(" ready: ") })
        let port = try #require(ready.split(separator: "127.0.0.1:").last.flatMap { Int($0.prefix { $0.isNumber }) })
        let transport = CurlTransport()
        defer { transport.shutdown() }
        let response = try await transport.execute(
            HTTPRequest(
                method: "POST", url: "http://127.0.0.1:\(port)/v1/sessions", headers: HTTPHeaders([("Content-Type", "application/json")]),
                body: Array(#"{"hpp_session_id":"over-tcp","kp_session_id":"kp"}"#.utf8)))
        #expect(response.status == 202)
        #expect(try await fixture.readStore().session("over-tcp") != nil)
        // Except refunds: money out only over the unix socket, whose group is the permission.
        let refund = try await transport.execute(
            HTTPRequest(
                method: "POST", url: "http://127.0.0.1:\(port)/v1/orders/any-order/refunds",
                headers: HTTPHeaders([("Content-Type", "application/json")]),
                body: Array(#"{"amount":100,"reference":"r"}"#.utf8)))
        #expect(refund.status == 403)
        #expect(String(decoding: refund.body, as: UTF8.self).contains("unix_socket_only"))
        #expect(try await fixture.post("/v1/orders/any-order/refunds", #"{"amount":100,"reference":"r"}"#).status == 404, "the unix socket takes it")
        // And charges: money moves on a customer token.
        let charge = try await transport.execute(
            HTTPRequest(
                method: "POST", url: "http://127.0.0.1:\(port)/v1/customer-tokens/any-token/charges",
                headers: HTTPHeaders([("Content-Type", "application/json")]),
                body: Array(#"{"amount":100,"reference":"r","currency":"EUR"}"#.utf8)))
        #expect(charge.status == 403 && String(decoding: charge.body, as: UTF8.self).contains("charges are taken on the unix socket only"))
        #expect(try await fixture.stop() == 0)
    }
}
