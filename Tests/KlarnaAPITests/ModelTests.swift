import Foundation
import Testing
@testable import KlarnaAPI

@Suite struct ModelDecodingTests {
    func decode<T: Decodable>(_ type: T.Type, _ json: String) throws -> T {
        try KlarnaJSON.decoder().decode(type, from: Data(json.utf8))
    }

    // The three read-session examples Klarna publishes (HPP API reference).
    @Test func hppExamplesFromKlarnasDocs() throws {
        let waiting = try decode(
            HPPSession.self,
            #"{"session_id":"39a1c773-bafd-754d-af1f-b30c592f1267","status":"WAITING","updated_at":"2019-05-13T14:51:46.288Z","expires_at":"2019-05-15T13:51:43.507Z"}"#
        )
        #expect(waiting.status == .waiting)
        #expect(waiting.expiresAt == KlarnaJSON.parseDate("2019-05-15T13:51:43.507Z"))
        let token = try decode(
            HPPSession.self,
            #"{"session_id":"39a1","status":"COMPLETED","authorization_token":"a1a8f727-2756-6058-bd3c-40069be0994b","updated_at":"2019-05-13T14:51:46Z","expires_at":"2019-05-15T13:51:43Z"}"#
        )
        #expect(token.authorizationToken == "a1a8f727-2756-6058-bd3c-40069be0994b")
        let order = try decode(HPPSession.self, #"{"session_id":"39a1","status":"COMPLETED","order_id":"a1a8f727","klarna_reference":"X438HG0Q"}"#)
        #expect(order.orderID == "a1a8f727")
        #expect(order.klarnaReference == "X438HG0Q")
    }

    @Test(arguments: ["TIMEOUT", "EXPIRED_SOMEHOW", ""])
    func unknownStatusesDecodeAsThemselves(value: String) throws {
        let session = try decode(HPPSession.self, #"{"session_id":"s","status":"\#(value)"}"#)
        #expect(session.status?.rawValue == value)
        #expect(session.status?.isKnown == false)
        let order = try decode(
            Order.self, #"{"order_id":"o","status":"\#(value)","fraud_status":"\#(value)","order_amount":1,"remaining_authorized_amount":1}"#)
        #expect(order.status?.rawValue == value)
        #expect(order.fraudStatus != .accepted)
    }

    @Test func createOrderResponseTakesBothShapesOfPaymentMethod() throws {
        let docs = try decode(
            CreateOrderResponse.self,
            #"{"order_id":"3eaeb557-5e30-47f8-b840-b8d987f5945d","redirect_url":"https://payments.klarna.com/redirect/x","fraud_status":"ACCEPTED","authorized_payment_method":"invoice"}"#
        )
        #expect(docs.authorizedPaymentMethod == .string("invoice"))
        let spec = try decode(
            CreateOrderResponse.self, #"{"order_id":"o","fraud_status":"PENDING","authorized_payment_method":{"type":"invoice","number_of_days":14}}"#
        )
        #expect(spec.fraudStatus == .pending)
        #expect(spec.authorizedPaymentMethod?["number_of_days"] == .int(14))
    }

    @Test func orderAmountsAreIntegerMinorUnits() throws {
        let order = try decode(
            Order.self,
            #"{"order_id":"o","status":"PART_CAPTURED","fraud_status":"ACCEPTED","order_amount":20000,"captured_amount":5000,"remaining_authorized_amount":15000,"captures":[{"capture_id":"c","captured_amount":5000,"captured_at":"2026-01-01T10:00:00Z"}]}"#
        )
        #expect(order.capturedAmount == 5_000)
        #expect(order.captures.first?.capturedAmount == 5_000)
        // A fractional amount is not money Klarna sends: refuse it instead of rounding.
        #expect(throws: DecodingError.self) {
            try decode(
                Order.self, #"{"order_id":"o","status":"AUTHORIZED","fraud_status":"ACCEPTED","order_amount":200.5,"remaining_authorized_amount":1}"#)
        }
    }

    @Test("An order's captures and refunds are read with their ids, amounts and times; absent refunds are none, a refund's fields each optional")
    func orderCapturesAndRefunds() throws {
        let order = try decode(
            Order.self,
            #"{"order_id":"o","status":"CAPTURED","fraud_status":"ACCEPTED","order_amount":20000,"captured_amount":20000,"refunded_amount":3000,"remaining_authorized_amount":0,"captures":[{"capture_id":"c-1","captured_amount":20000,"captured_at":"2026-01-01T10:00:00Z","reference":"ship-1"}],"refunds":[{"refund_id":"r-1","refunded_amount":2500,"refunded_at":"2026-01-02T09:30:00Z","reference":"rma-7","description":"returned","order_lines":[]},{"refunded_amount":500}]}"#
        )
        #expect(
            order.captures == [
                Capture(captureID: "c-1", capturedAmount: 20_000, capturedAt: KlarnaJSON.parseDate("2026-01-01T10:00:00Z"), reference: "ship-1")
            ])
        #expect(
            order.refunds == [
                Refund(refundID: "r-1", refundedAmount: 2_500, refundedAt: KlarnaJSON.parseDate("2026-01-02T09:30:00Z"), reference: "rma-7"),
                Refund(refundID: nil, refundedAmount: 500),
            ])
        #expect(order.refundedAmount == 3_000)
        let none = try decode(
            Order.self, #"{"order_id":"o","status":"AUTHORIZED","fraud_status":"ACCEPTED","order_amount":1,"remaining_authorized_amount":1}"#)
        #expect(none.refunds.isEmpty)
        #expect(none.captures.isEmpty)
    }

    @Test func createOrderRequestCopiesTheAuthorizedSessionAndPassesAddressesThrough() throws {
        let session = try decode(
            PaymentSession.self,
            #"""
            {"status":"incomplete","purchase_country":"DE","purchase_currency":"EUR","locale":"de-DE","order_amount":10995,
             "order_tax_amount":1755,"order_lines":[{"name":"Shoes","quantity":1,"unit_price":10995,"total_amount":10995,"tax_rate":1900,"total_tax_amount":1755}],
             "billing_address":{"given_name":"Ada","postal_code":"10115","attention":null},"merchant_reference1":"m-1","intent":"buy"}
            """#)
        let request = try CreateOrderRequest(session: session, merchantReference: "order-7")
        let body = try JSONSerialization.jsonObject(with: KlarnaJSON.encoder().encode(request)) as! [String: Any]
        #expect(body["order_amount"] as? Int == 10_995)
        #expect(body["merchant_reference1"] as? String == "order-7")
        let billing = body["billing_address"] as! [String: Any]
        #expect(billing["given_name"] as? String == "Ada")
        #expect(billing["attention"] is NSNull)
        #expect((body["order_lines"] as! [[String: Any]]).first?["unit_price"] as? Int == 10_995)
    }

    @Test func paymentRequestTokenComesFromStateContext() throws {
        let request = try decode(
            PaymentRequest.self,
            #"{"payment_request_id":"krn:payment:eu1:request:1","state":"COMPLETED","state_context":{"klarna_network_session_token":"tok"}}"#)
        #expect(request.klarnaNetworkSessionToken == "tok")
    }
}

@Suite struct ConfigurationTests {
    @Test func regionalBaseURLsFollowKlarnasTable() {
        #expect(KlarnaConfiguration.baseURL(region: .eu, environment: .production) == "https://api.klarna.com")
        #expect(KlarnaConfiguration.baseURL(region: .eu, environment: .playground) == "https://api.playground.klarna.com")
        #expect(KlarnaConfiguration.baseURL(region: .na, environment: .production) == "https://api-na.klarna.com")
        #expect(KlarnaConfiguration.baseURL(region: .na, environment: .playground) == "https://api-na.playground.klarna.com")
        #expect(KlarnaConfiguration.baseURL(region: .oc, environment: .playground) == "https://api-oc.playground.klarna.com")
        #expect(KlarnaConfiguration.networkBaseURL(environment: .playground) == "https://api-global.test.klarna.com")
    }

    @Test func explicitBaseURLLosesTrailingSlashes() {
        let configuration = KlarnaConfiguration(baseURL: "http://127.0.0.1:8080//", credentials: BasicCredentials(username: "u", password: "p"))
        #expect(configuration.baseURL == "http://127.0.0.1:8080")
        #expect(configuration.networkBaseURL == "http://127.0.0.1:8080")
    }

    @Test func credentialsNeverPrintTheirPassword() {
        let credentials = BasicCredentials(username: "K123", password: "hunter2-secret")
        let configuration = KlarnaConfiguration(baseURL: "https://x", credentials: credentials)
        for text in ["\(credentials)", String(reflecting: credentials), "\(configuration)", String(reflecting: configuration)] {
            #expect(!text.contains("hunter2-secret"), "leaked in: \(text)")
        }
        var dumped = ""
        dump(configuration, to: &dumped)
        #expect(!dumped.contains("hunter2-secret"))
    }

    @Test func userAgentNamesProductVersionAndLibcurl() {
        let agent = KlarnaClient.userAgent(libcurl: "libcurl/7.88.1 OpenSSL/3.0.15 zlib/1.2.13")
        #expect(agent.hasPrefix("klarna-reconciler/\(ProductInfo.version) "))
        #expect(agent.contains("libcurl/7.88.1"))
        #expect(!agent.contains("OpenSSL"))
    }
}

@Suite struct RateLimitHeaderTests {
    @Test func parsesKlarnasHeaders() {
        let headers = HTTPHeaders([("x-ratelimit-limit", "40, 40;w=1"), ("X-RateLimit-Remaining", "0"), ("X-Ratelimit-Reset", "2")])
        let parsed = RateLimitHeaders(headers: headers)
        #expect(parsed.limit == "40, 40;w=1")
        #expect(parsed.remaining == 0)
        #expect(parsed.reset == .seconds(2))
        #expect(parsed.hint == .seconds(2))
    }

    @Test func retryAfterInSecondsOrAsADateWinsOverTheReset() {
        let now = Date(timeIntervalSince1970: 1_784_000_000)
        let seconds = RateLimitHeaders(headers: HTTPHeaders([("Retry-After", "7"), ("X-Ratelimit-Reset", "1")]), now: now)
        #expect(seconds.hint == .seconds(7))
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        let date = RateLimitHeaders(headers: HTTPHeaders([("Retry-After", formatter.string(from: now.addingTimeInterval(30)))]), now: now)
        #expect(date.retryAfter == .seconds(30))
    }

    @Test(arguments: ["-3", "soon", "nan", ""])
    func nonsenseIsIgnored(value: String) {
        let parsed = RateLimitHeaders(headers: HTTPHeaders([("Retry-After", value), ("X-Ratelimit-Reset", value)]))
        #expect(parsed.hint == nil)
    }

    @Test func absurdlyLongWaitsAreCappedAtADay() {
        #expect(RateLimitHeaders(headers: HTTPHeaders([("Retry-After", "99999999")])).retryAfter == .seconds(86_400))
    }
}

@Suite struct RetryClassificationTests {
    func error(_ operation: KlarnaOperation, _ failure: KlarnaAPIError.Failure, rateLimit: RateLimitHeaders = .init()) -> KlarnaAPIError {
        KlarnaAPIError(operation: operation, failure: failure, requestID: "r", rateLimit: rateLimit)
    }

    static let operations: [KlarnaOperation] = [.readHPPSession, .createCapture, .createOrder]

    @Test(arguments: [400, 401, 403, 404, 413, 422])
    func clientErrorsAreNeverRetried(status: Int) {
        for operation in Self.operations {
            #expect(error(operation, .http(status: status)).retryDisposition == .doNotRetry)
            #expect(!error(operation, .http(status: status)).outcomeUnknown)
        }
    }

    @Test(arguments: [408, 409, 425, 500, 502, 503, 504])
    func transientStatusesAreRetriedWhereRepeatingIsSafe(status: Int) {
        #expect(error(.readHPPSession, .http(status: status)).retryDisposition == .retry(notBefore: nil))
        #expect(error(.createCapture, .http(status: status)).retryDisposition == .retry(notBefore: nil))
        #expect(error(.createOrder, .http(status: status)).retryDisposition == .doNotRetry)
    }

    @Test func rateLimitIsRetriedForEveryOperationWithTheHint() {
        for operation in Self.operations {
            let limited = error(operation, .http(status: 429), rateLimit: RateLimitHeaders(reset: .seconds(3)))
            #expect(limited.retryDisposition == .retry(notBefore: .seconds(3)))
            #expect(!limited.outcomeUnknown)
        }
    }

    @Test func transportFailuresDependOnWhetherTheRequestLeft() {
        let refused = TransportError(kind: .connectFailed, requestMayHaveBeenSent: false, detail: "")
        let timedOut = TransportError(kind: .timeout, requestMayHaveBeenSent: true, detail: "")
        let tls = TransportError(kind: .tls, requestMayHaveBeenSent: false, detail: "")
        #expect(error(.createOrder, .transport(refused)).retryDisposition == .retry(notBefore: nil))
        #expect(!error(.createOrder, .transport(refused)).outcomeUnknown)
        #expect(error(.createOrder, .transport(timedOut)).retryDisposition == .doNotRetry)
        #expect(error(.createOrder, .transport(timedOut)).outcomeUnknown)
        #expect(error(.createCapture, .transport(timedOut)).retryDisposition == .retry(notBefore: nil))
        #expect(error(.createCapture, .transport(timedOut)).outcomeUnknown)
        #expect(!error(.readOrder, .transport(timedOut)).outcomeUnknown)
        #expect(error(.readOrder, .transport(tls)).retryDisposition == .doNotRetry)
    }

    @Test func descriptionQuotesKlarnaAndTheCorrelationID() {
        var failure = error(.createCapture, .http(status: 403))
        failure.errorCode = "CAPTURE_NOT_ALLOWED"
        failure.errorMessages = ["Capture not allowed."]
        failure.correlationIDHeader = "corr-1"
        #expect(
            failure.description
                == "Klarna om.create_capture failed, HTTP 403, error_code CAPTURE_NOT_ALLOWED, messages: Capture not allowed., correlation id corr-1, request r"
        )
    }

    @Test("A v4 dispute is read leniently: dates without seconds or a zone, deadlines by state, evidence; no id or no state is refused")
    func dispute() throws {
        let text = #"""
            {"payment_dispute_id":"krn:d:1","state":"PRE_ARBITRATION","previous_state":"REPRESENTMENT","order_id":"o-1",
             "dispute_reason":"PURCHASE_UNAUTHORIZED","dispute_details":{"dispute_amount":4000.0,"currency":"EUR"},
             "configuration":{"options":{"hold_policy":"ON_DISPUTE_INITIATED"}},"updated_at":"2025-06-24T05:51",
             "state_context":{"arbitration_expires_at":"2025-07-04T05:51:00Z","partner_evidence":{"attachments":[{"payment_dispute_attachment_id":"a-1"}]}},
             "representment":{"expires_at":"2025-06-30T00:00:00.000Z"}}
            """#
        let value = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
        let dispute = try PaymentDispute(json: value)
        #expect(dispute.paymentDisputeID == "krn:d:1" && dispute.state == "PRE_ARBITRATION" && dispute.previousState == "REPRESENTMENT")
        #expect(dispute.amount == 4_000 && dispute.currency == "EUR" && dispute.holdPolicy == "ON_DISPUTE_INITIATED")
        #expect(dispute.updatedAt == PaymentDispute.parseDate("2025-06-24T05:51:00Z") && dispute.updatedAt != nil)
        #expect(dispute.arbitrationExpiresAt != nil && dispute.responseExpiresAt != nil && dispute.evidenceAttachmentIDs == ["a-1"])
        #expect(dispute.raw.contains("krn:d:1"))
        for broken in [#"{"state":"INITIATED"}"#, #"{"payment_dispute_id":"d"}"#, #"[1]"#] {
            let value = try JSONDecoder().decode(JSONValue.self, from: Data(broken.utf8))
            #expect(throws: DisputeDecodingError.self) { try PaymentDispute(json: value) }
        }
    }
}
