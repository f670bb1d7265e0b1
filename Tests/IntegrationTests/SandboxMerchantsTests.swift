import Foundation
import HTTPServer
import KlarnaAPI
import KlarnaSandbox
import Logging
import ReconcilerCore
import Testing

/// One sandbox serving two merchants over a real loopback socket: the primary merchant A (`K100001`) and B.
struct TwoMerchantSandbox {
    static let a = BasicCredentials(username: "merchant-a", password: "a-s3cret")
    static let b = BasicCredentials(username: "merchant-b", password: "b-s3cret")
    static let aID = "K100001"
    static let bID = "K200002"

    let sandbox: KlarnaSandbox
    let baseURL: String
    let transport: CurlTransport

    /// Runs `body` with a fresh sandbox; a manual clock by default, so that a rate budget refills only when a test
    /// says. The server stops when `body` returns.
    static func with<T: Sendable>(clock: any WallClock = ManualClock(), _ body: (TwoMerchantSandbox) async throws -> T) async throws -> T {
        let configuration = KlarnaSandbox.Configuration(
            username: a.username, password: a.password,
            otherMerchants: [SandboxMerchant(id: bID, username: b.username, password: b.password)], clock: clock)
        #expect(configuration.merchants.map(\.id) == [aID, bID])
        let sandbox = KlarnaSandbox(configuration: configuration)
        let server = try await HTTPServer.bind(
            .tcp(host: "127.0.0.1", port: 0), configuration: KlarnaSandbox.serverConfiguration, logger: Logger(label: "test.sandbox")
        ) {
            await sandbox.handle($0)
        }
        let serving = Task { try await server.run() }
        defer { serving.cancel() }
        let transport = CurlTransport(configuration: .init(connectTimeout: .seconds(2), requestTimeout: .seconds(30)))
        defer { transport.shutdown() }
        return try await body(TwoMerchantSandbox(sandbox: sandbox, baseURL: "http://127.0.0.1:\(server.port!)", transport: transport))
    }

    /// One call as `credentials` (none: `nil`); the status and the JSON answer as an object (empty when there is none).
    func call(
        _ credentials: BasicCredentials?, _ method: String, _ path: String, json: String? = nil
    ) async throws -> (status: Int, object: [String: Any]) {
        let response = try await transport.execute(
            HTTPRequest(
                method: method, url: baseURL + path, headers: HTTPHeaders(json == nil ? [] : [("Content-Type", "application/json")]),
                body: json.map { Array($0.utf8) }, credentials: credentials))
        let object = (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any] ?? [:]
        return (response.status, object)
    }

    /// An order of `merchant` (`nil`: the primary) placed through its HPP session and captured in full by its own
    /// credentials: the HPP session, the KP session and the order.
    func capturedOrder(
        _ merchant: String?, _ credentials: BasicCredentials, amount: Int = 10_000
    ) async throws -> (hpp: String, kp: String, order: String) {
        let created = try sandbox.createSession(SessionSpec(orderAmount: amount, placeOrderMode: "PLACE_ORDER", merchant: merchant))
        try sandbox.setHPPStatus(created.hppSessionId, "COMPLETED")
        let hpp = try await call(credentials, "GET", "/hpp/v1/sessions/\(created.hppSessionId)")
        let order = try #require(hpp.object["order_id"] as? String, "\(hpp)")
        let capture = try await call(credentials, "POST", "/ordermanagement/v1/orders/\(order)/captures", json: #"{"captured_amount":\#(amount)}"#)
        #expect(capture.status == 201)
        return (created.hppSessionId, created.kpSessionId, order)
    }

    /// `id` as one path segment (dispute and payment request ids are KRNs, with colons).
    static func segment(_ id: String) -> String {
        id.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~")))!
    }

    static func disputePath(_ id: String, _ tail: String = "") -> String { "/v4/payment/disputes/" + segment(id) + tail }
}

/// Several merchants in one sandbox (issue 26, item 7): separate credentials, resources, rate limits and payouts.
@Suite("Sandbox: several merchants")
struct SandboxMerchantsTests {
    typealias Two = TwoMerchantSandbox

    @Test("Each merchant's credentials work on its own sessions, orders and payment requests, and the request log names the merchant")
    func ownResources() async throws {
        try await Two.with { h in
            let merchants: [(String?, BasicCredentials, String)] = [(nil, Two.a, Two.aID), (Two.bID, Two.b, Two.bID)]
            for (merchant, credentials, id) in merchants {
                let placed = try await h.capturedOrder(merchant, credentials)
                #expect(try await h.call(credentials, "GET", "/payments/v1/sessions/\(placed.kp)").status == 200)
                let order = try await h.call(credentials, "GET", "/ordermanagement/v1/orders/\(placed.order)")
                #expect(order.status == 200 && order.object["captured_amount"] as? Int == 10_000)
                let records = h.sandbox.requests().filter { $0.path.contains(placed.hpp) || $0.path.contains(placed.order) }
                #expect(records.count == 3 && records.allSatisfy { $0.merchant == id }, "\(records)")
            }

            // The control JSON names the merchant too; an unknown one is refused.
            let created = try await h.call(nil, "POST", "/_sandbox/sessions", json: #"{"merchant":"\#(Two.bID)"}"#)
            let hpp = try #require(created.object["hpp_session_id"] as? String, "\(created)")
            #expect(try await h.call(Two.b, "GET", "/hpp/v1/sessions/\(hpp)").status == 200)
            #expect(try await h.call(Two.a, "GET", "/hpp/v1/sessions/\(hpp)").status == 404)
            #expect(try await h.call(nil, "POST", "/_sandbox/sessions", json: #"{"merchant":"K999999"}"#).status == 400)
            #expect(throws: KlarnaSandbox.ControlError.self) { try h.sandbox.createSession(SessionSpec(merchant: "K999999")) }

            let request = h.sandbox.createPaymentRequest(merchant: Two.bID)
            #expect(try await h.call(Two.b, "GET", "/v2/payment/requests/\(Two.segment(request))").status == 200)
            let foreign = try await h.call(Two.a, "GET", "/v2/payment/requests/\(Two.segment(request))")
            #expect(foreign.status == 404 && foreign.object["error_code"] as? String == "NOT_FOUND")
        }
    }

    @Test("Merchant B reading or changing A's HPP session, KP session, authorization, order and dispute gets the route's 404, and nothing changes")
    func othersResourcesDoNotExist() async throws {
        try await Two.with { h in
            let placed = try await h.capturedOrder(nil, Two.a)
            let waiting = try h.sandbox.createSession(SessionSpec(orderAmount: 5_000))
            let authorized = try h.sandbox.createSession(SessionSpec(orderAmount: 5_000))
            try h.sandbox.setHPPStatus(authorized.hppSessionId, "COMPLETED")
            let token = try #require(
                try await h.call(Two.a, "GET", "/hpp/v1/sessions/\(authorized.hppSessionId)").object["authorization_token"] as? String)
            let dispute = try h.sandbox.openDispute(order: placed.order, amount: 1_000)
            let effects = h.sandbox.effects()
            let webhooks = h.sandbox.webhooks()

            let hppRead = try await h.call(Two.b, "GET", "/hpp/v1/sessions/\(placed.hpp)")
            #expect(hppRead.status == 404 && hppRead.object["error_code"] as? String == "NOT_FOUND")
            #expect(try await h.call(Two.b, "DELETE", "/hpp/v1/sessions/\(waiting.hppSessionId)").status == 404)
            let kpRead = try await h.call(Two.b, "GET", "/payments/v1/sessions/\(placed.kp)")
            #expect(kpRead.status == 404 && kpRead.object["error_code"] as? String == "NOT_FOUND")
            let body =
                #"{"purchase_country":"SE","purchase_currency":"SEK","order_amount":5000,"order_lines":[{"name":"Sandbox item","quantity":1,"unit_price":5000,"total_amount":5000}]}"#
            #expect(try await h.call(Two.b, "POST", "/payments/v1/authorizations/\(token)/order", json: body).status == 404)
            #expect(try await h.call(Two.b, "DELETE", "/payments/v1/authorizations/\(token)").status == 404)
            let orderRead = try await h.call(Two.b, "GET", "/ordermanagement/v1/orders/\(placed.order)")
            #expect(orderRead.status == 404 && orderRead.object["error_code"] as? String == "NO_SUCH_ORDER")
            let capture = try await h.call(Two.b, "POST", "/ordermanagement/v1/orders/\(placed.order)/captures", json: #"{"captured_amount":100}"#)
            #expect(capture.status == 404 && capture.object["error_code"] as? String == "NO_SUCH_ORDER", "not A's 403: nothing is left to capture")
            let refund = try await h.call(Two.b, "POST", "/ordermanagement/v1/orders/\(placed.order)/refunds", json: #"{"refunded_amount":100}"#)
            #expect(refund.status == 404 && refund.object["error_code"] as? String == "NO_SUCH_ORDER")
            let disputeRead = try await h.call(Two.b, "GET", Two.disputePath(dispute.paymentDisputeId))
            #expect(disputeRead.status == 404 && disputeRead.object["error_code"] as? String == "RESOURCE_NOT_FOUND")
            #expect(try await h.call(Two.b, "POST", Two.disputePath(dispute.paymentDisputeId, "/accept-loss")).status == 404)
            #expect((try await h.call(Two.b, "GET", "/v4/payment/disputes").object["disputes"] as? [Any])?.isEmpty == true)

            // Nothing happened: no effect, no webhook, every resource as it was for A.
            #expect(h.sandbox.effects() == effects)
            #expect(h.sandbox.webhooks() == webhooks)
            #expect(h.sandbox.dispute(dispute.paymentDisputeId)?.state == "INITIATED")
            #expect(try await h.call(Two.a, "GET", "/hpp/v1/sessions/\(waiting.hppSessionId)").object["status"] as? String == "WAITING")
            let order = try await h.call(Two.a, "GET", "/ordermanagement/v1/orders/\(placed.order)").object
            #expect(order["refunded_amount"] as? Int == 0 && order["captured_amount"] as? Int == 10_000)
            #expect((try await h.call(Two.a, "GET", "/v4/payment/disputes").object["disputes"] as? [Any])?.count == 1)
            #expect(
                try await h.call(Two.a, "POST", "/payments/v1/authorizations/\(token)/order", json: body).status == 200, "the token still works for A"
            )

            // The dispute webhooks name the order's merchant.
            let other = try await h.capturedOrder(Two.bID, Two.b)
            try h.sandbox.openDispute(order: other.order)
            let webhook = try #require(h.sandbox.webhooks().last)
            let envelope = try #require(try JSONSerialization.jsonObject(with: Data(webhook.body.utf8)) as? [String: Any])
            #expect((envelope["metadata"] as? [String: Any])?["merchant_id"] as? String == Two.bID)
            let first = try #require(try JSONSerialization.jsonObject(with: Data(webhooks[0].body.utf8)) as? [String: Any])
            #expect((first["metadata"] as? [String: Any])?["merchant_id"] as? String == Two.aID)
        }
    }

    @Test("Credentials of no merchant are a 401, recorded with no merchant")
    func wrongCredentials() async throws {
        try await Two.with { h in
            let placed = try await h.capturedOrder(nil, Two.a)
            let wrong = BasicCredentials(username: Two.a.username, password: Two.b.password)
            let callers: [BasicCredentials?] = [wrong, nil]
            for credentials in callers {
                #expect(try await h.call(credentials, "GET", "/ordermanagement/v1/orders/\(placed.order)").status == 401)
                let record = try #require(h.sandbox.requests().last)
                #expect(record.status == 401 && record.merchant == nil)
            }
        }
    }

    @Test("Rate limits are per merchant: A's exhausted budget leaves B's calls admitted; a call of no merchant spends none")
    func rateLimitsPerMerchant() async throws {
        try await Two.with { (h: TwoMerchantSandbox) async throws in
            let payouts = "/settlements/v1/payouts"
            h.sandbox.setRateLimit(perSecond: 1, merchant: Two.aID)
            #expect(try await h.call(Two.a, "GET", payouts).status == 200)
            #expect(try await h.call(Two.a, "GET", payouts).status == 429)
            #expect(try await h.call(Two.b, "GET", payouts).status == 200, "B has no limit")

            // Every merchant, each its own budget: B's first call passes though A's budget is spent.
            h.sandbox.setRateLimit(perSecond: 1)
            #expect(try await h.call(Two.a, "GET", payouts).status == 200)
            #expect(try await h.call(Two.a, "GET", payouts).status == 429)
            #expect(try await h.call(nil, "GET", payouts).status == 401)
            #expect(try await h.call(Two.b, "GET", payouts).status == 200)
            #expect(try await h.call(Two.b, "GET", payouts).status == 429)
            let limited = h.sandbox.requests().filter { $0.status == 429 }
            #expect(limited.map(\.merchant) == [Two.aID, Two.aID, Two.bID])

            h.sandbox.setRateLimit(perSecond: nil, merchant: Two.aID)
            #expect(try await h.call(Two.a, "GET", payouts).status == 200)
            #expect(try await h.call(Two.b, "GET", payouts).status == 429)
        }
    }

    @Test("Payouts are per merchant: captures of A and B in one currency make two payouts, each listed and readable by its merchant only")
    func payoutsPerMerchant() async throws {
        try await Two.with { h in
            let a = try await h.capturedOrder(nil, Two.a)
            let b = try await h.capturedOrder(Two.bID, Two.b, amount: 7_000)
            let made = try h.sandbox.settle()
            try #require(made.count == 2)
            #expect(made.map(\.merchantId) == [Two.aID, Two.bID])
            #expect(made.map(\.currencyCode) == ["SEK", "SEK"])
            #expect(made.map(\.totals.saleAmount) == [10_000, 7_000])
            #expect(made[0].paymentReference != made[1].paymentReference)

            for (credentials, id, order, payout) in [(Two.a, Two.aID, a.order, made[0]), (Two.b, Two.bID, b.order, made[1])] {
                let list = try await h.call(credentials, "GET", "/settlements/v1/payouts")
                let payouts = try #require(list.object["payouts"] as? [[String: Any]], "\(list)")
                #expect(payouts.compactMap { $0["payment_reference"] as? String } == [payout.paymentReference])
                #expect(payouts.compactMap { $0["merchant_id"] as? String } == [id])
                let read = try await h.call(credentials, "GET", "/settlements/v1/payouts/\(payout.paymentReference)")
                #expect(read.status == 200 && read.object["merchant_id"] as? String == id)
                let transactions = try await h.call(credentials, "GET", "/settlements/v1/transactions")
                let orders = Set((transactions.object["transactions"] as? [[String: Any]] ?? []).compactMap { $0["order_id"] as? String })
                #expect(orders == [order])
            }
            let foreign = try await h.call(Two.b, "GET", "/settlements/v1/payouts/\(made[0].paymentReference)")
            #expect(foreign.status == 404 && foreign.object["error_code"] as? String == "NOT_FOUND")
            let foreignRows = try await h.call(Two.b, "GET", "/settlements/v1/transactions?payment_reference=\(made[0].paymentReference)")
            #expect((foreignRows.object["transactions"] as? [Any])?.isEmpty == true)

            // An orphan goes to the merchant it is invented for.
            try h.sandbox.inventTransaction(amount: 4_200, currency: "SEK", merchant: Two.bID)
            #expect(try h.sandbox.settle().map(\.merchantId) == [Two.bID])
            #expect(throws: KlarnaSandbox.ControlError.self) { try h.sandbox.inventTransaction(amount: 1, currency: "SEK", merchant: "K999999") }
        }
    }
}
