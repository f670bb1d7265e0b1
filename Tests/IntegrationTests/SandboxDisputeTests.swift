import Crypto
import Foundation
import KlarnaAPI
import KlarnaSandbox
import ReconcilerCore
import Testing
import TestSupport

/// The sandbox's Disputes API v4 over a real socket: the lifecycle and its state rules, deadlines a test controls,
/// extensions, evidence limits and signed webhooks (Klarna's Disputes API v4 reference).
@Suite("Sandbox: disputes v4")
struct SandboxDisputeTests {
    /// One call to the Disputes API; the JSON answer as an object.
    func call(
        _ h: SandboxHarness, _ method: String, _ path: String, json: String? = nil, body: [UInt8]? = nil, contentType: String? = nil
    ) async throws -> (status: Int, object: [String: Any]) {
        var headers: [(String, String)] = []
        if let type = contentType ?? (json == nil ? nil : "application/json") { headers.append(("Content-Type", type)) }
        let response = try await h.transport.execute(
            HTTPRequest(
                method: method, url: h.baseURL + path, headers: HTTPHeaders(headers), body: body ?? json.map { Array($0.utf8) },
                credentials: SandboxHarness.credentials))
        let object = (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any] ?? [:]
        return (response.status, object)
    }

    func path(_ id: String, _ tail: String = "") -> String {
        "/v4/payment/disputes/" + id.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~")))! + tail
    }

    func upload(_ h: SandboxHarness, _ id: String, name: String, type: String, size: Int) async throws -> (status: Int, object: [String: Any]) {
        var body = Array("--b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"\(name)\"\r\nContent-Type: \(type)\r\n\r\n".utf8)
        body += [UInt8](repeating: 0x25, count: size)
        body += Array("\r\n--b0undary--\r\n".utf8)
        return try await call(h, "POST", path(id, "/attachments"), body: body, contentType: "multipart/form-data; boundary=b0undary")
    }

    @Test(
        "A dispute opens INITIATED with Klarna's deadline by reason; evidence within the limits moves it to REPRESENTMENT; a preliminary loss may be appealed; every change a webhook signed like Klarna Network's"
    )
    func lifecycle() async throws {
        let clock = AdjustableClock()
        try await SandboxHarness.with(clock: clock) { h in
            let order = try await h.placedOrder(amount: 10_000)
            _ = try await h.client.createCapture(orderID: order, request: CaptureRequest(capturedAmount: 10_000), idempotencyKey: "c-1")
            let unauthorized = try h.sandbox.openDispute(order: order, reason: "PURCHASE_UNAUTHORIZED", amount: 4_000)
            #expect(unauthorized.state == "INITIATED" && unauthorized.amount == 4_000)
            #expect(abs((unauthorized.deadline?.timeIntervalSince(clock.now) ?? 0) - 7 * 86_400) < 1, "7 days for an unauthorized purchase")
            let other = try h.sandbox.openDispute(order: order, reason: "PRODUCTS_OR_SERVICES_NOT_RECEIVED", amount: 1_000)
            #expect(abs((other.deadline?.timeIntervalSince(clock.now) ?? 0) - 21 * 86_400) < 1, "21 days otherwise")
            #expect(throws: (any Error).self) { try h.sandbox.openDispute(order: order, amount: 10_001) }

            let read = try await call(h, "GET", path(unauthorized.paymentDisputeId))
            #expect(read.status == 200 && read.object["order_id"] as? String == order && read.object["state"] as? String == "INITIATED")
            let context = read.object["state_context"] as? [String: Any]
            #expect(((context?["representment"] as? [String: Any])?["expires_at"] as? String) != nil, "the deadline is read, never computed")

            // Evidence: type, size and the name's extension are checked; then represent.
            #expect(try await upload(h, unauthorized.paymentDisputeId, name: "receipt.exe", type: "application/x-msdownload", size: 10).status == 400)
            #expect(try await upload(h, unauthorized.paymentDisputeId, name: "receipt.png", type: "application/pdf", size: 10).status == 400)
            let big = try await upload(h, unauthorized.paymentDisputeId, name: "big.pdf", type: "application/pdf", size: 7 * 1_024 * 1_024 + 1)
            #expect(big.status == 400 && big.object["error_code"] as? String == "VALIDATION_ERROR", "\(big)")
            #expect(try await upload(h, unauthorized.paymentDisputeId, name: "photo.jpeg", type: "image/jpeg", size: 3 * 1_024 * 1_024).status == 201)
            let uploaded = try await upload(h, unauthorized.paymentDisputeId, name: "receipt.pdf", type: "application/pdf", size: 2_048)
            let attachment = try #require(uploaded.object["payment_dispute_attachment_id"] as? String, "\(uploaded)")
            #expect(try await call(h, "POST", path(unauthorized.paymentDisputeId, "/appeal"), json: #"{"additional_information":"x"}"#).status == 409)
            let proposal = try await call(
                h, "POST", path(unauthorized.paymentDisputeId, "/represent"),
                json: #"{"attachments":[{"payment_dispute_attachment_id":"\#(attachment)"}],"partner_proposed_refund_amount":4000}"#)
            #expect(proposal.status == 400, "a proposed refund must be below the disputed amount")
            let represented = try await call(
                h, "POST", path(unauthorized.paymentDisputeId, "/represent"),
                json: #"{"attachments":[{"payment_dispute_attachment_id":"\#(attachment)","description":"receipt"}]}"#)
            #expect(represented.status == 201 && represented.object["state"] as? String == "REPRESENTMENT")
            let representedContext = try await call(h, "GET", path(unauthorized.paymentDisputeId)).object["state_context"] as? [String: Any]
            let evidence = representedContext?["partner_evidence"] as? [String: Any]
            #expect((evidence?["attachments"] as? [Any])?.count == 1, "the evidence shows without additional information")
            #expect(try await call(h, "POST", path(unauthorized.paymentDisputeId, "/accept-loss")).status == 409, "no accept-loss in REPRESENTMENT")

            // A preliminary loss opens the appeal window; an appeal goes to arbitration; Klarna's final word closes it.
            #expect(try h.sandbox.decideDispute(unauthorized.paymentDisputeId, outcome: "LOST").state == "PRE_ARBITRATION")
            let appealed = try await call(
                h, "POST", path(unauthorized.paymentDisputeId, "/appeal"), json: #"{"additional_information":"tracking 123"}"#)
            #expect(appealed.status == 201 && appealed.object["state"] as? String == "ARBITRATION")
            #expect(try h.sandbox.decideDispute(unauthorized.paymentDisputeId, outcome: "WON").outcome == "WON")

            // The other: accepted as lost, once; a second accept-loss is a conflict.
            let accepted = try await call(h, "POST", path(other.paymentDisputeId, "/accept-loss"))
            #expect(accepted.status == 202 && accepted.object["state"] as? String == "CLOSED")
            let again = try await call(h, "POST", path(other.paymentDisputeId, "/accept-loss"))
            #expect(again.status == 409 && again.object["error_code"] as? String == "RESOURCE_CONFLICT")

            let webhooks = h.sandbox.webhooks()
            #expect(
                webhooks.map(\.eventType) == [
                    "payment.dispute.state-change.initiated", "payment.dispute.state-change.initiated",
                    "payment.dispute.state-change.representment", "payment.dispute.state-change.pre-arbitration",
                    "payment.dispute.state-change.arbitration", "payment.dispute.state-change.closed", "payment.dispute.state-change.closed",
                ])
            for webhook in webhooks {
                let mac = HMAC<SHA256>.authenticationCode(
                    for: Array(webhook.body.utf8), using: SymmetricKey(data: Array("sandbox-webhook-secret".utf8)))
                #expect(webhook.signature == mac.map { String(format: "%02x", $0) }.joined() && webhook.signingKeyId == "sandbox-signing-key-1")
                let envelope = try #require(try JSONSerialization.jsonObject(with: Data(webhook.body.utf8)) as? [String: Any])
                #expect((envelope["metadata"] as? [String: Any])?["event_type"] as? String == webhook.eventType)
                #expect((envelope["payload"] as? [String: Any])?["order_id"] as? String == order)
            }
            #expect(h.sandbox.webhooks(after: webhooks[4].seq).count == 2)
        }
    }

    @Test("Deadlines: an extension moves the response deadline (and says so in a webhook); a missed deadline closes the dispute as lost")
    func deadlines() async throws {
        let clock = AdjustableClock()
        try await SandboxHarness.with(clock: clock) { h in
            let order = try await h.placedOrder(amount: 5_000)
            _ = try await h.client.createCapture(orderID: order, request: CaptureRequest(capturedAmount: 5_000), idempotencyKey: "c-1")
            let dispute = try h.sandbox.openDispute(order: order, respondWithin: .seconds(3_600))
            let later = clock.now.addingTimeInterval(7_200)
            #expect(try h.sandbox.extendDispute(dispute.paymentDisputeId, until: later).deadline == later)
            #expect(throws: (any Error).self) { try h.sandbox.extendDispute(dispute.paymentDisputeId, until: later) }
            let extended = try #require(h.sandbox.webhooks().last)
            #expect(extended.eventType == "payment.dispute.updated.representment-deadline-extended")
            #expect(extended.body.contains("evidence_response_deadline_at") && extended.body.contains("previous_fields"))

            clock.advance(by: .seconds(3_601))
            #expect(h.sandbox.dispute(dispute.paymentDisputeId)?.state == "INITIATED", "the extension holds")
            clock.advance(by: .seconds(3_600))
            let closed = try #require(h.sandbox.dispute(dispute.paymentDisputeId))
            #expect(closed.state == "CLOSED" && closed.outcome == "LOST")
            let read = try await call(h, "GET", path(dispute.paymentDisputeId))
            let context = read.object["state_context"] as? [String: Any]
            #expect(context?["dispute_outcome_detailed"] as? String == "partner_did_not_reply_to_dispute_request")
            #expect(try await call(h, "POST", path(dispute.paymentDisputeId, "/accept-loss")).status == 409)
        }
    }

    @Test("The list: by order, state and updated_at, oldest first, in pages the last of which has no last_item")
    func list() async throws {
        try await SandboxHarness.with { h in
            let order = try await h.placedOrder(amount: 9_000)
            _ = try await h.client.createCapture(orderID: order, request: CaptureRequest(capturedAmount: 9_000), idempotencyKey: "c-1")
            let ids = try (0..<3).map { _ in try h.sandbox.openDispute(order: order, amount: 1_000).paymentDisputeId }
            let first = try await call(h, "GET", "/v4/payment/disputes?order_ids=\(order)&size=2")
            let page = try #require(first.object["disputes"] as? [[String: Any]])
            #expect(page.compactMap { $0["payment_dispute_id"] as? String } == Array(ids.prefix(2)))
            let pagination = first.object["pagination"] as? [String: Any]
            let last = try #require(pagination?["last_item"] as? String)
            #expect(pagination?["total"] as? Int == 3)
            let second = try await call(
                h, "GET",
                "/v4/payment/disputes?order_ids=\(order)&size=2&starting_after=\(last.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)")
            #expect((second.object["disputes"] as? [[String: Any]])?.compactMap { $0["payment_dispute_id"] as? String } == [ids[2]])
            #expect((second.object["pagination"] as? [String: Any])?["last_item"] is NSNull)
            #expect(try await call(h, "GET", "/v4/payment/disputes?state=CLOSED").object["disputes"] as? [Any] != nil)
            #expect((try await call(h, "GET", "/v4/payment/disputes?state=CLOSED").object["disputes"] as? [Any])?.isEmpty == true)
            #expect(try await call(h, "GET", "/v4/payment/disputes?size=0").status == 400)
            #expect(try await call(h, "GET", "/v4/payment/disputes?reason=PURCHASE_UNAUTHORIZED").status == 400, "a filter it does not apply")
        }
    }
}
