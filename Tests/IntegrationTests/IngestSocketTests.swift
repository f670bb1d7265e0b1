import Crypto
import Foundation
import Glibc
import KlarnaSandbox
import ReconcilerCore
import ReconcilerStore
import Testing

/// Webhooks over the daemon's unix socket, sent with curl as a forwarder would.
@Suite("Ingest over the unix socket", .serialized)
struct IngestSocketTests {
    func token(_ kind: String, _ kp: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Array("\(kind):\(kp)".utf8), using: SymmetricKey(data: Array(DaemonFixture.callbackKey.utf8)))
        return Data(mac).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    func sign(_ body: String) -> String {
        HMAC<SHA256>.authenticationCode(for: Array(body.utf8), using: SymmetricKey(data: Array(DaemonFixture.signingKey.utf8))).map { String(format: "%02x", $0) }.joined()
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
        let tracked = try fixture.sandbox.createSession(SessionSpec(orderAmount: 8_000, merchantReference: "sock-2", schedule: [ScheduleStep(afterSeconds: 0.3, status: "COMPLETED")]))
        let track = try await fixture.post("/v1/sessions", #"{"hpp_session_id":"\#(tracked.hppSessionId)","kp_session_id":"\#(tracked.kpSessionId)","merchant_reference":"sock-2","capture":"on_request"}"#)
        #expect(track.status == 202, "\(track.body)")
        let store = try fixture.readStore()
        let order = try await { () async throws -> String in
            var found: String?
            try await waitUntilAsync { found = try await store.timeline(for: "sock-2").orders.first { $0.phase == .awaitingCapture }?.orderID; return found != nil }
            return found!
        }()
        let capture = try await fixture.post("/v1/orders/\(order)/capture", #"{"amount":3000}"#)
        #expect(capture.status == 202, "\(capture.body)")
        #expect(try await fixture.post("/v1/orders/unknown-order/capture", "{}").status == 404)

        // 3. A pending order and Klarna's notification: read at once, captured after acceptance.
        let pending = try fixture.sandbox.createSession(SessionSpec(merchantReference: "sock-3", fraudStatus: "PENDING", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        #expect(try await fixture.post("/v1/sessions", #"{"hpp_session_id":"\#(pending.hppSessionId)","kp_session_id":"\#(pending.kpSessionId)","merchant_reference":"sock-3"}"#).status == 202)
        var pendingOrder: String?
        try await waitUntilAsync { pendingOrder = try await store.timeline(for: "sock-3").orders.first { $0.phase == .pendingFraud }?.orderID; return pendingOrder != nil }
        try fixture.sandbox.setFraudStatus(orderID: pendingOrder!, "ACCEPTED")
        let notification = try await fixture.post("/v1/webhooks/om-notification", #"{"order_id":"\#(pendingOrder!)","event_type":"FRAUD_RISK_ACCEPTED"}"#)
        #expect(notification.status == 202)

        // 4. Klarna Network, signed.
        let kn = #"{"metadata":{"event_type":"payment.request.state-change.completed","event_id":"kn-1"},"payload":{"payment_request_id":"krn:payment:eu1:request:1","state":"COMPLETED"}}"#
        #expect(try await fixture.post("/v1/webhooks/klarna", kn, headers: ["Klarna-Signature: \(sign(kn))", "Klarna-Signing-Key-Id: krn:partner:global:notification:signing-key:1"]).status == 202)

        try await waitUntilAsync(timeout: .seconds(30)) {
            let kinds = (try await store.timeline(for: fromWebhook.hppSessionId).outcomes + store.timeline(for: "sock-2").outcomes + store.timeline(for: "sock-3").outcomes).map(\.outcome.kind)
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
            ("/v1/webhooks/klarna", kn, ["Klarna-Signature: \(sign(kn + " "))", "Klarna-Signing-Key-Id: krn:partner:global:notification:signing-key:1"], 400, "bad_signature"),
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
        let big = String(repeating: "x", count: 2 << 20)
        #expect(try await fixture.post("/v1/sessions", big).status == 413)
        #expect(try await fixture.post("/v1/health", "", method: "GET").status == 200)
        #expect(try await fixture.post(good, event).status == 202)
        #expect(try await fixture.stop() == 0)
    }
}
