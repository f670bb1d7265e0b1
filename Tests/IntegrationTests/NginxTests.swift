import ChildProcess
import Foundation
import Glibc
import KlarnaSandbox
import ReconcilerCore
import ReconcilerStore
import Testing
import TestSupport

/// Debian's nginx in front of the daemon's socket, with the shipped `etc/nginx/klarna-reconciler.conf` and its log
/// format `etc/nginx/klarna-reconciler-log-format.conf` as they are (only the socket path and the log folder point
/// at the test's). `make check` installs nginx.
@Suite("nginx in front of the socket", .serialized, .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/sbin/nginx"), "needs Debian's nginx (make check installs it)"))
struct NginxTests {
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("etc/nginx")
    static let snippet = examples.appendingPathComponent("klarna-reconciler.conf").path
    static let logFormat = examples.appendingPathComponent("klarna-reconciler-log-format.conf").path

    /// nginx in the foreground on a loopback port, its own prefix in the fixture's folder.
    final class Nginx: @unchecked Sendable {
        let process = ChildProcess()
        let base: String
        /// The snippet's access log, and the server's own (nginx's `combined` format, for everything else).
        let accessLog: String, serverAccessLog: String

        init(_ fixture: DaemonFixture) async throws {
            let prefix = fixture.directory + "/nginx"
            try FileManager.default.createDirectory(atPath: prefix + "/logs", withIntermediateDirectories: true)
            let snippet = try String(contentsOfFile: NginxTests.snippet, encoding: .utf8)
                .replacingOccurrences(of: "/run/klarna-reconciler.sock", with: fixture.socketPath)
                .replacingOccurrences(of: "/var/log/nginx/", with: prefix + "/logs/")
            try snippet.write(toFile: prefix + "/klarna-reconciler.conf", atomically: true, encoding: .utf8)
            let serverLog = prefix + "/logs/access.log"
            accessLog = prefix + "/logs/klarna-reconciler.access.log"
            serverAccessLog = serverLog
            let port = 20_000 + Int.random(in: 0..<20_000)
            // `user root`: this test runs as root and the daemon's socket is 0660 root; on a server nginx's own user
            // joins klarna-ingest instead (the snippet says so).
            try """
                user root;
                worker_processes 1;
                error_log \(prefix)/logs/error.log;
                events { worker_connections 64; }
                http {
                    include \(NginxTests.logFormat);
                    access_log \(serverLog);
                    client_body_temp_path \(prefix)/body;
                    proxy_temp_path \(prefix)/proxy;
                    server {
                        listen 127.0.0.1:\(port);
                        include \(prefix)/klarna-reconciler.conf;
                    }
                }
                """.write(toFile: prefix + "/nginx.conf", atomically: true, encoding: .utf8)
            process.executableURL = URL(fileURLWithPath: "/usr/sbin/nginx")
            process.arguments = ["-p", prefix, "-c", prefix + "/nginx.conf", "-g", "daemon off; pid \(prefix)/nginx.pid;"]
            try process.run()
            base = "http://127.0.0.1:\(port)"
            let probe = URL(fileURLWithPath: prefix + "/nginx.pid")
            try await waitUntil(timeout: .seconds(10)) { FileManager.default.fileExists(atPath: probe.path) }
        }

        func stop() async throws {
            process.terminate()
            try await waitUntil(timeout: .seconds(10)) { !self.process.isRunning }
        }
    }

    @Test("Callbacks and signed webhooks through nginx arrive byte-exact; what nginx acknowledges was committed")
    func throughNginx() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let nginx = try await Nginx(fixture)
        let keys = IngestSocketTests()

        // An HPP status callback for a payment nobody tracked: followed from it to captured.
        let created = try fixture.sandbox.createSession(SessionSpec(orderAmount: 5_000, merchantReference: "via-nginx"))
        try fixture.sandbox.setHPPStatus(created.hppSessionId, "COMPLETED")
        let callback = #"{"event_id":"nginx-1","session":{"session_id":"\#(created.hppSessionId)","status":"COMPLETED"}}"#
        let query = "?kp_session_id=\(created.kpSessionId)&token=\(keys.token("hpp-status", created.kpSessionId))&hpp_session_id=\(created.hppSessionId)"
        let answer = try await fixture.post("/klarna/hpp-status" + query, callback, via: nginx.base)
        #expect(answer.status == 202, "\(answer.body)")
        try await waitUntil(timeout: .seconds(30)) {
            try await fixture.readStore().timeline(for: created.hppSessionId).outcomes.map(\.outcome.kind) == [.orderPlaced, .captured]
        }

        // A signed Klarna Network webhook whose body has what a rewriting proxy would change (spacing, escapes,
        // non-ASCII): the signature still matches, so nginx passed it byte for byte.
        let request = fixture.sandbox.createPaymentRequest(state: "COMPLETED")
        let kn = "{ \"metadata\" : {\"event_type\":\"payment.request.state-change.completed\",\"event_id\":\"nginx-kn-1\", \"note\": \"Grüße \\u00e9\\t\"},\n  \"payload\":{\"payment_request_id\":\"\(request)\",\"state\":\"COMPLETED\"}}\n"
        let signed = try await fixture.post("/klarna/network", kn, headers: ["Klarna-Signature: \(keys.sign(kn))", "Klarna-Signing-Key-Id: krn:partner:global:notification:signing-key:1"], via: nginx.base)
        #expect(signed.status == 202, "\(signed.body)")
        try await waitUntil(timeout: .seconds(30)) { fixture.outboxFiles().contains { $0.hasSuffix("payment_request_completed.json") } }
        // A wrong signature is the daemon's refusal, passed on as it is.
        let forged = try await fixture.post("/klarna/network", kn + " ", headers: ["Klarna-Signature: \(keys.sign(kn))", "Klarna-Signing-Key-Id: krn:partner:global:notification:signing-key:1"], via: nginx.base)
        #expect(forged.status == 400 && forged.body.contains("bad_signature"), "\(forged)")
        // Other methods get the daemon's own 405.
        #expect(try await fixture.post("/klarna/network", "", method: "GET", via: nginx.base).status == 405)

        // The daemon down: nginx must not acknowledge; the delivery is not recorded, and Klarna sends it again.
        #expect(try await fixture.stop() == 0)
        let other = try fixture.sandbox.createSession(SessionSpec(orderAmount: 5_000))
        let lostQuery = "?kp_session_id=\(other.kpSessionId)&token=\(keys.token("hpp-status", other.kpSessionId))&hpp_session_id=\(other.hppSessionId)"
        let down = try await fixture.post("/klarna/hpp-status" + lostQuery, #"{"event_id":"nginx-2","session":{"session_id":"\#(other.hppSessionId)","status":"COMPLETED"}}"#, via: nginx.base)
        #expect(down.status == 502, "nginx answered \(down.status) with the daemon down")
        #expect(try await fixture.readStore().session(other.hppSessionId) == nil)
        // Sent again once the daemon is back: accepted and acted on.
        try fixture.sandbox.setHPPStatus(other.hppSessionId, "COMPLETED")
        try await fixture.start()
        let retried = try await fixture.post("/klarna/hpp-status" + lostQuery, #"{"event_id":"nginx-2","session":{"session_id":"\#(other.hppSessionId)","status":"COMPLETED"}}"#, via: nginx.base)
        #expect(retried.status == 202)
        try await waitUntil(timeout: .seconds(30)) {
            try await fixture.readStore().timeline(for: other.hppSessionId).outcomes.map(\.outcome.kind) == [.orderPlaced, .captured]
        }
        try await nginx.stop()
        _ = try await fixture.stop()
    }

    @Test("nginx's access log has each callback's path and status, never its query: no token, no token=")
    func accessLogWithoutTokens() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let nginx = try await Nginx(fixture)
        let kp = "kp-logged"
        let token = IngestSocketTests().token("kp-authorization", kp)
        let accepted = try await fixture.post(
            "/klarna/kp-authorization?kp_session_id=\(kp)&token=\(token)", #"{"authorization_token":"auth-logged","session_id":"\#(kp)"}"#, via: nginx.base)
        #expect(accepted.status == 202, "\(accepted.body)")
        let refused = try await fixture.post(
            "/klarna/hpp-status?kp_session_id=\(kp)&token=wrong-token-value&hpp_session_id=hpp-logged",
            #"{"event_id":"logged-1","session":{"session_id":"hpp-logged"}}"#, via: nginx.base)
        #expect(refused.status == 403, "\(refused.body)")
        // nginx writes a request's log line once it has answered it: wait for both.
        var log = ""
        try await waitUntil(timeout: .seconds(10)) {
            log = (try? String(contentsOfFile: nginx.accessLog, encoding: .utf8)) ?? ""
            return log.split(separator: "\n").count == 2
        }
        #expect(log.contains(#""POST /klarna/kp-authorization HTTP/1.1" 202 "#), "\(log)")
        #expect(log.contains(#""POST /klarna/hpp-status HTTP/1.1" 403 "#), "\(log)")
        for secret in [token, "wrong-token-value", "token=", "kp_session_id=", "hpp-logged"] {
            #expect(!log.contains(secret), "the access log has \(secret): \(log)")
        }
        // The snippet's access_log replaces the server's for /klarna/: not a line of it went into the combined log.
        let serverLog = (try? String(contentsOfFile: nginx.serverAccessLog, encoding: .utf8)) ?? ""
        #expect(!serverLog.contains("/klarna/"), "\(serverLog)")
        try await nginx.stop()
        #expect(try await fixture.stop() == 0)
    }
}
