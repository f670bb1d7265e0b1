import Foundation
import KlarnaAPI
import KlarnaSandbox
import Testing

/// The sandbox's `/_sandbox/` control API over HTTP, as a separate test process or script drives it.
@Suite struct ControlAPITests {
    func call(_ h: SandboxHarness, _ method: String, _ path: String, _ json: String? = nil) async throws -> (Int, [String: Any]) {
        let response = try await h.transport.execute(HTTPRequest(method: method, url: h.baseURL + path, body: json.map { Array($0.utf8) }))
        let object = (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any] ?? [:]
        return (response.status, object)
    }

    @Test func scenarioFaultsExpiryAndLogsOverHTTP() async throws {
        try await SandboxHarness.with { h in
            let (status, created) = try await call(h, "POST", "/_sandbox/sessions", #"{"order_amount":20000,"fraud_status":"PENDING"}"#)
            #expect(status == 201)
            let hpp = try #require(created["hpp_session_id"] as? String)
            let kp = try #require(created["kp_session_id"] as? String)

            #expect(try await call(h, "POST", "/_sandbox/hpp-sessions/\(hpp)/status", #"{"status":"COMPLETED"}"#).0 == 204)
            let token = try #require(try await h.client.readHPPSession(id: hpp).authorizationToken)
            #expect(try await call(h, "POST", "/_sandbox/expire", #"{"kind":"authorization_token","id":"\#(token)"}"#).0 == 204)
            let session = try await h.client.readPaymentSession(id: kp)
            await #expect(throws: KlarnaAPIError.self) {
                try await h.client.createOrder(authorizationToken: token, order: CreateOrderRequest(session: session))
            }

            #expect(try await call(h, "POST", "/_sandbox/faults", #"{"route":"kp.read_session","kind":"status","status":500,"count":null}"#).0 == 201)
            for _ in 0..<2 { await #expect(throws: KlarnaAPIError.self) { try await h.client.readPaymentSession(id: kp) } }
            #expect(try await call(h, "DELETE", "/_sandbox/faults").0 == 204)
            #expect(try await h.client.readPaymentSession(id: kp).status == .incomplete)
            // Without `count`, a fault fires once, as the control API says.
            #expect(try await call(h, "POST", "/_sandbox/faults", #"{"route":"kp.read_session","kind":"status","status":503}"#).0 == 201)
            await #expect(throws: KlarnaAPIError.self) { try await h.client.readPaymentSession(id: kp) }
            #expect(try await h.client.readPaymentSession(id: kp).status == .incomplete)

            let (_, log) = try await call(h, "GET", "/_sandbox/requests?route=kp.read_session")
            let statuses = (log["requests"] as? [[String: Any]])?.map { $0["status"] as? Int }
            #expect(statuses == [200, 500, 500, 200, 503, 200])
            let (_, effects) = try await call(h, "GET", "/_sandbox/effects?kind=order_placed")
            #expect((effects["effects"] as? [Any])?.isEmpty == true)
        }
    }

    @Test func clockAdvanceExpiresTheHPPSession() async throws {
        try await SandboxHarness.with { h in
            let created = try h.sandbox.createSession()
            #expect(try await call(h, "POST", "/_sandbox/clock/advance", #"{"seconds":172800}"#).0 == 204)
            let error = await #expect(throws: KlarnaAPIError.self) { try await h.client.readHPPSession(id: created.hppSessionId) }
            #expect(error?.status == 404)
        }
    }

    @Test func badControlRequestsSayWhatIsWrong() async throws {
        try await SandboxHarness.with { h in
            let (status, body) = try await call(h, "POST", "/_sandbox/faults", #"{"route":"*","kind":"explode"}"#)
            #expect(status == 400)
            #expect((body["error_messages"] as? [String])?.first?.contains("kind") == true)
            #expect(try await call(h, "POST", "/_sandbox/sessions", #"{"place_order_mode":"SOMETIMES"}"#).0 == 400)
            #expect(try await call(h, "POST", "/_sandbox/hpp-sessions/nope/status", #"{"status":"COMPLETED"}"#).0 == 404)
            #expect(try await call(h, "GET", "/_sandbox/nothing-here").0 == 404)
        }
    }

    @Test func klarnaRoutesNeedCredentialsAndRejectOversizedBodies() async throws {
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder()
            let anonymous = try await h.transport.execute(HTTPRequest(method: "GET", url: "\(h.baseURL)/ordermanagement/v1/orders/\(orderID)"))
            #expect(anonymous.status == 401)
            let huge = try await h.transport.execute(
                HTTPRequest(
                    method: "POST", url: "\(h.baseURL)/ordermanagement/v1/orders/\(orderID)/captures",
                    body: Array(repeating: UInt8(ascii: " "), count: KlarnaSandbox.serverConfiguration.maxBodyBytes + 1),
                    credentials: SandboxHarness.credentials))
            #expect(huge.status == 413)
            let (created, token) = try await h.authorizedSession()
            let incomplete = try await h.transport.execute(
                HTTPRequest(
                    method: "POST", url: "\(h.baseURL)/payments/v1/authorizations/\(token)/order",
                    body: Array(#"{"order_amount":20000}"#.utf8), credentials: SandboxHarness.credentials))
            #expect(incomplete.status == 400)
            #expect(
                String(decoding: incomplete.body, as: UTF8.self).contains(
                    "Missing required fields: [purchase_country, purchase_currency, order_lines]"))
            #expect(try await h.client.readPaymentSession(id: created.kpSessionId).status == .incomplete)
            let wrongMethod = try await h.transport.execute(
                HTTPRequest(method: "PUT", url: "\(h.baseURL)/ordermanagement/v1/orders/\(orderID)", credentials: SandboxHarness.credentials))
            #expect(wrongMethod.status == 405)
            #expect(h.sandbox.effects(kind: .captured).isEmpty)
        }
    }
}
