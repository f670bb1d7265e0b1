import Foundation
import Testing
@testable import KlarnaAPI

/// Every response model the daemon decodes, fed what Klarna's specs allow: spec-minimal documents (only the fields
/// the schema's `required` list names, in Klarna's OpenAPI specs or its Settlements API reference) decode, with the fallbacks the models
/// name; spec-maximal ones (every documented field, fields no spec names, values no spec's enum lists) decode the
/// known fields and keep unknown enum values as themselves.
@Suite("Decoding what Klarna's specs allow, and nothing stricter")
struct SpecMinimalTests {
    func decode<T: Decodable>(_ type: T.Type, _ json: String) throws -> T {
        try KlarnaJSON.decoder().decode(type, from: Data(json.utf8))
    }

    static let unknownFields = #""sandbox_unknown_field":"x","sandbox_unknown_object":{"nested":[1,"two",true,null],"empty":{}}"#
    static let address =
        #"{"attention":"Reception","city":"Stockholm","country":"SE","email":"a@example.com","family_name":"Andersson","given_name":"Ada","organization_name":"AB","phone":"+46701234567","postal_code":"12345","region":"AB","street_address":"Sveavägen 46","street_address2":"3","title":"Mx","sandbox_unknown_field":"x"}"#

    // MARK: HPP (SessionResponseV1: nothing required)

    @Test("HPP session: {} decodes, every field absent; the daemon knows the id it asked for")
    func hppMinimal() throws {
        let session = try decode(HPPSession.self, "{}")
        #expect(session == HPPSession())
        #expect(session.sessionID == nil && session.status == nil && session.authorizationToken == nil && session.orderID == nil)
    }

    @Test("HPP session: every documented field, unknown fields and an unknown status")
    func hppMaximal() throws {
        let session = try decode(
            HPPSession.self,
            #"""
            {"authorization_token":"tok-1","customer":{"date_of_birth":"1987-08-15","family_name":"A","given_name":"B","national_identification_number":"19870815-8493","title":"Mx"},
             "expires_at":"2038-01-19T03:14:07.000Z","klarna_reference":"ffc25786",
             "manual_identification":{"challenge":"A78","customer":{"given_name":"B"},"customer_obfuscated":{"given_name":"B*"},"expires_at":"2038-01-19T03:14:07.000Z"},
             "order_id":"o-1","session_id":"s-1","status":"SANDBOX_NEW_STATUS","updated_at":"2038-01-19T03:14:07Z",\#(Self.unknownFields)}
            """#)
        #expect(session.sessionID == "s-1")
        #expect(session.status?.rawValue == "SANDBOX_NEW_STATUS")
        #expect(session.status?.isKnown == false)
        #expect(session.updatedAt == KlarnaJSON.parseDate("2038-01-19T03:14:07Z"))
        #expect(session.expiresAt == KlarnaJSON.parseDate("2038-01-19T03:14:07.000Z"))
        #expect(session.authorizationToken == "tok-1" && session.orderID == "o-1" && session.klarnaReference == "ffc25786")
    }

    // MARK: KP read session (session_read: nothing required)

    @Test("KP session: {} decodes; without session_create's order data no create-order or customer token is built")
    func kpMinimal() throws {
        let session = try decode(PaymentSession.self, "{}")
        #expect(session == PaymentSession())
        #expect(session.status == nil && session.orderLines.isEmpty && session.locale == nil)
        #expect(session.missingOrderFields == ["purchase_country", "purchase_currency", "order_amount", "order_lines"])
        #expect(session.missingCustomerTokenFields == ["purchase_country", "purchase_currency"])
        #expect(throws: MissingFields(["purchase_country", "purchase_currency", "order_amount", "order_lines"])) {
            try CreateOrderRequest(session: session)
        }
        #expect(throws: MissingFields(["purchase_country", "purchase_currency"])) {
            try CustomerTokenRequest(session: session, description: "d")
        }
        // Lines present but empty are no lines: create-order needs at least one.
        let noLines = try decode(PaymentSession.self, #"{"purchase_country":"SE","purchase_currency":"SEK","order_amount":1,"order_lines":[]}"#)
        #expect(noLines.missingOrderFields == ["order_lines"])
    }

    @Test("KP session: session_create's required fields alone are an order; the token falls back to en-US")
    func kpWithSessionCreateFields() throws {
        let session = try decode(
            PaymentSession.self,
            #"""
            {"purchase_country":"SE","purchase_currency":"SEK","order_amount":10000,"order_lines":[{"name":"Item","quantity":1,"total_amount":10000,"unit_price":10000}]}
            """#)
        #expect(session.missingOrderFields.isEmpty && session.missingCustomerTokenFields.isEmpty)
        #expect(session.status == nil)
        let order = try CreateOrderRequest(session: session, merchantReference: "shop-1")
        #expect(
            order
                == CreateOrderRequest(
                    purchaseCountry: "SE", purchaseCurrency: "SEK", orderAmount: 10_000,
                    orderLines: [OrderLine(name: "Item", quantity: 1, unitPrice: 10_000, totalAmount: 10_000)], merchantReference1: "shop-1"))
        let body = try JSONSerialization.jsonObject(with: KlarnaJSON.encoder().encode(order)) as? [String: Any]
        #expect(body.map { Set($0.keys) } == ["purchase_country", "purchase_currency", "order_amount", "order_lines", "merchant_reference1"])
        let token = try CustomerTokenRequest(session: session, description: "Subscription")
        #expect(token == CustomerTokenRequest(purchaseCountry: "SE", purchaseCurrency: "SEK", locale: "en-US", description: "Subscription"))
    }

    @Test("KP session: every documented field, unknown fields and enum values; create-order passes them on unchanged")
    func kpMaximal() throws {
        let session = try decode(
            PaymentSession.self,
            #"""
            {"acquiring_channel":"SANDBOX_CHANNEL","attachment":{"body":"{}","content_type":"application/vnd.klarna.internal.emd-v2+json"},
             "authorization_token":"tok","billing_address":\#(Self.address),"client_token":"ct","custom_payment_method_ids":["promo-1"],
             "customer":{"date_of_birth":"1987-08-15","gender":"female","organization_entity_type":"SANDBOX_ENTITY","organization_registration_id":"1","title":"Mx","type":"person","vat_id":"SE1"},
             "design":"d","expires_at":"2038-01-19T03:14:07.000Z","locale":"sv-SE","merchant_data":"{}","merchant_reference1":"m1","merchant_reference2":"m2",
             "merchant_urls":{"confirmation":"https://c","notification":"https://n","push":"https://p","authorization":"https://a"},
             "options":{"color_border":"#FF0000","radius_border":"5px"},"order_amount":10000,"order_tax_amount":2000,
             "order_lines":[{"image_url":"https://i","merchant_data":"md","name":"Item","product_identifiers":{"brand":"B","category_path":"C","global_trade_item_number":"G","manufacturer_part_number":"M","color":"red","size":"M"},
                             "product_url":"https://p","quantity":1,"quantity_unit":"pcs","reference":"SKU","tax_rate":2500,"total_amount":10000,"total_discount_amount":0,"total_tax_amount":2000,
                             "type":"sandbox_line_type","unit_price":10000,"subscription":{"name":"Box","interval":"SANDBOX_INTERVAL","interval_count":1},"sandbox_unknown_field":"x"}],
             "payment_method_categories":[{"identifier":"sandbox_category","name":"N","asset_urls":{"descriptive":"https://d","standard":"https://s"}}],
             "purchase_country":"SE","purchase_currency":"SEK","shipping_address":\#(Self.address),"status":"sandbox_status","intent":"sandbox_intent",\#(Self.unknownFields)}
            """#)
        #expect(session.status?.rawValue == "sandbox_status" && session.status?.isKnown == false)
        #expect(session.intent?.rawValue == "sandbox_intent" && session.intent?.isKnown == false)
        #expect(session.locale == "sv-SE" && session.orderTaxAmount == 2_000 && session.customPaymentMethodIDs == ["promo-1"])
        let line = try #require(session.orderLines.first)
        #expect(line.type == "sandbox_line_type" && line.quantityUnit == "pcs" && line.totalDiscountAmount == 0)
        #expect(line.productIdentifiers?["global_trade_item_number"] == .string("G"))
        #expect(line.subscription?["interval"] == .string("SANDBOX_INTERVAL"))
        let order = try CreateOrderRequest(session: session)
        #expect(order.merchantReference1 == "m1" && order.merchantReference2 == "m2" && order.customPaymentMethodIDs == ["promo-1"])
        #expect(order.billingAddress == session.billingAddress && order.billingAddress?["sandbox_unknown_field"] == .string("x"))
        let body = try JSONSerialization.jsonObject(with: KlarnaJSON.encoder().encode(order)) as? [String: Any]
        let sentLine = try #require((body?["order_lines"] as? [[String: Any]])?.first)
        #expect((sentLine["subscription"] as? [String: Any])?["interval"] as? String == "SANDBOX_INTERVAL")
        #expect((sentLine["product_identifiers"] as? [String: Any])?["brand"] as? String == "B")
    }

    // MARK: KP create-order answer (`order`: order_id) and customer token (token_id)

    @Test("create-order answer: order_id alone decodes without a fraud status; without order_id it is refused")
    func createOrderMinimal() throws {
        let created = try decode(CreateOrderResponse.self, #"{"order_id":"o-1"}"#)
        #expect(created == CreateOrderResponse(orderID: "o-1"))
        #expect(created.fraudStatus != .accepted)
        #expect(throws: DecodingError.self) { try decode(CreateOrderResponse.self, #"{"fraud_status":"ACCEPTED"}"#) }
    }

    @Test("create-order answer: every documented field, unknown fields, an unknown fraud status and payment method")
    func createOrderMaximal() throws {
        let created = try decode(
            CreateOrderResponse.self,
            #"""
            {"order_id":"o-1","fraud_status":"SANDBOX_REVIEW","redirect_url":"https://r",
             "authorized_payment_method":{"type":"sandbox_method","number_of_days":14,"number_of_installments":3},\#(Self.unknownFields)}
            """#)
        #expect(created.orderID == "o-1" && created.redirectURL == "https://r")
        #expect(created.fraudStatus?.rawValue == "SANDBOX_REVIEW" && created.fraudStatus?.isKnown == false)
        #expect(created.fraudStatus != .accepted)
        #expect(created.authorizedPaymentMethod?["type"] == .string("sandbox_method"))
    }

    @Test("customer token answer: token_id alone, and every documented field with unknown ones")
    func customerToken() throws {
        #expect(try decode(CustomerTokenResponse.self, #"{"token_id":"t-1"}"#) == CustomerTokenResponse(tokenID: "t-1"))
        let full = try decode(
            CustomerTokenResponse.self,
            #"""
            {"token_id":"t-1","billing_address":\#(Self.address),"customer":{"date_of_birth":"1987-08-15","gender":"female"},
             "payment_method_reference":"pmr","redirect_url":"https://r",\#(Self.unknownFields)}
            """#)
        #expect(full == CustomerTokenResponse(tokenID: "t-1", redirectURL: "https://r", paymentMethodReference: "pmr"))
        #expect(throws: DecodingError.self) { try decode(CustomerTokenResponse.self, "{}") }
    }

    // MARK: OM order (MerchantOrderDto: nothing required)

    @Test("OM order: {} decodes, every field absent, no captured total known")
    func orderMinimal() throws {
        let order = try decode(Order.self, "{}")
        #expect(order == Order())
        #expect(order.capturedTotal == nil && order.captures.isEmpty && order.refunds.isEmpty)
        // The fields the order rules decide with, alone.
        let rules = try decode(
            Order.self, #"{"status":"AUTHORIZED","fraud_status":"ACCEPTED","captured_amount":0,"remaining_authorized_amount":10000}"#)
        #expect(rules.orderID == nil && rules.orderAmount == nil && rules.expiresAt == nil)
        #expect(rules.capturedTotal == 0 && rules.remainingAuthorizedAmount == 10_000 && rules.status == .authorized)
    }

    @Test("OM order: the captured total is captured_amount, else the sum of the listed captures, else unknown")
    func capturedTotalFallback() throws {
        let listed = try decode(Order.self, #"{"captures":[{"capture_id":"c-1","captured_amount":2000},{"captured_amount":3000}]}"#)
        #expect(listed.capturedAmount == nil && listed.capturedTotal == 5_000)
        #expect(listed.captures.last == Capture(captureID: nil, capturedAmount: 3_000))
        let stated = try decode(Order.self, #"{"captured_amount":7000,"captures":[{"captured_amount":2000}]}"#)
        #expect(stated.capturedTotal == 7_000)
        let amountless = try decode(Order.self, #"{"captures":[{"captured_amount":2000},{"capture_id":"c-2"}]}"#)
        #expect(amountless.capturedTotal == nil)
        #expect(try decode(Order.self, #"{"captures":[]}"#).capturedTotal == nil)
    }

    @Test("OM order: every documented field, unknown fields and enum values")
    func orderMaximal() throws {
        let order = try decode(
            Order.self,
            #"""
            {"billing_address":\#(Self.address),"captured_amount":5000,
             "captures":[{"billing_address":\#(Self.address),"capture_id":"c-1","captured_amount":5000,"captured_at":"2026-01-01T10:00:00Z","description":"Shipped",
                          "klarna_reference":"K-1","order_lines":[],"reference":"ship-1","refunded_amount":1000,"shipping_address":\#(Self.address),
                          "shipping_info":[{"shipping_company":"P","shipping_method":"SandboxMethod","tracking_number":"1","tracking_uri":"https://t"}],"sandbox_unknown_field":"x"}],
             "created_at":"2025-12-31T10:00:00Z","customer":{"date_of_birth":"1987-08-15","national_identification_number":"1"},"expires_at":"2026-01-28T10:00:00Z",
             "fraud_status":"SANDBOX_FRAUD","initial_payment_method":{"type":"SANDBOX_METHOD","description":"d","number_of_installments":1},"klarna_reference":"K",
             "locale":"sv-SE","merchant_data":"md","merchant_reference1":"m1","merchant_reference2":"m2","order_amount":10000,"order_id":"o-1",
             "order_lines":[{"name":"Item","quantity":1,"total_amount":10000,"unit_price":10000}],"original_order_amount":12000,"purchase_country":"SE",
             "purchase_currency":"SEK","refunded_amount":1000,
             "refunds":[{"credit_invoice":false,"description":"Returned","order_lines":[],"reference":"rma-1","refund_id":"r-1","refunded_amount":1000,"refunded_at":"2026-01-02T10:00:00Z"}],
             "remaining_authorized_amount":5000,"selected_shipping_option":{"id":"x","shipping_method":"SandboxMethod"},"shipping_address":\#(Self.address),
             "shipping_info":[{"shipping_company":"P","shipping_method":"SandboxMethod"}],"status":"SANDBOX_ON_HOLD",\#(Self.unknownFields)}
            """#)
        #expect(order.orderID == "o-1" && order.orderAmount == 10_000 && order.originalOrderAmount == 12_000)
        #expect(order.status?.rawValue == "SANDBOX_ON_HOLD" && order.status?.isKnown == false)
        #expect(order.fraudStatus?.rawValue == "SANDBOX_FRAUD" && order.fraudStatus != .accepted)
        #expect(order.capturedTotal == 5_000 && order.remainingAuthorizedAmount == 5_000 && order.refundedAmount == 1_000)
        #expect(order.purchaseCurrency == "SEK" && order.merchantReference1 == "m1" && order.klarnaReference == "K")
        #expect(order.expiresAt == KlarnaJSON.parseDate("2026-01-28T10:00:00Z"))
        #expect(
            order.captures == [
                Capture(captureID: "c-1", capturedAmount: 5_000, capturedAt: KlarnaJSON.parseDate("2026-01-01T10:00:00Z"), reference: "ship-1")
            ])
        #expect(
            order.refunds == [
                Refund(refundID: "r-1", refundedAmount: 1_000, refundedAt: KlarnaJSON.parseDate("2026-01-02T10:00:00Z"), reference: "rma-1")
            ])
    }

    @Test("A capture's 201: the id from Capture-Id, else from Location, else none")
    func captureCreated() {
        let location = "https://api.klarna.com/ordermanagement/v1/orders/o-1/captures/c-9"
        #expect(CaptureCreated(captureIDHeader: "c-1", location: location).captureID == "c-1")
        #expect(CaptureCreated(captureIDHeader: nil, location: location) == CaptureCreated(captureID: "c-9", location: location))
        #expect(CaptureCreated(captureIDHeader: "", location: location).captureID == "c-9")
        #expect(CaptureCreated(captureIDHeader: nil, location: "https://api.klarna.com/ordermanagement/v1/orders/o-1").captureID == nil)
        #expect(CaptureCreated(captureIDHeader: nil, location: nil) == CaptureCreated(captureID: nil, location: nil))
    }

    // MARK: Klarna Network payment request (no spec: the state is what a read is for)

    @Test("Payment request: the state alone decodes (the id is the one asked for); a read without a state is refused")
    func paymentRequestMinimal() throws {
        let request = try decode(PaymentRequest.self, #"{"state":"SUBMITTED"}"#)
        #expect(request == PaymentRequest(state: .submitted))
        #expect(request.paymentRequestID == nil && request.klarnaNetworkSessionToken == nil)
        #expect(throws: DecodingError.self) { try decode(PaymentRequest.self, "{}") }
    }

    @Test("Payment request: every field seen, unknown fields, an unknown state and state reason")
    func paymentRequestMaximal() throws {
        let request = try decode(
            PaymentRequest.self,
            #"""
            {"payment_request_id":"krn:payment:eu1:request:1","state":"SANDBOX_PENDING","state_reason":"SANDBOX_REASON",
             "expires_at":"2026-01-01T03:00:00Z","state_expires_at":"2026-01-01T02:00:00Z","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:30:00Z",
             "state_context":{"klarna_network_session_token":"krn:network:eu1:session-token:1","sandbox_unknown_field":"x"},
             "payment_request":{"amount":100,"currency":"SEK"},\#(Self.unknownFields)}
            """#)
        #expect(request.paymentRequestID == "krn:payment:eu1:request:1")
        #expect(request.state.rawValue == "SANDBOX_PENDING" && !request.state.isKnown)
        #expect(request.stateReason == "SANDBOX_REASON" && request.stateExpiresAt == KlarnaJSON.parseDate("2026-01-01T02:00:00Z"))
        #expect(request.klarnaNetworkSessionToken == "krn:network:eu1:session-token:1")
    }

    // MARK: Settlements (required lists: Klarna's Settlements API reference)

    static let requiredTotals =
        #"{"commission_amount":0,"repay_amount":0,"sale_amount":10000,"holdback_amount":0,"settlement_amount":9700,"reversal_amount":0,"release_amount":0,"return_amount":0,"fee_amount":300,"charge_amount":0,"credit_amount":0,"fee_refund_amount":0,"tax_refund_amount":0,"deposit_amount":0,"opening_debt_balance_amount":0,"closing_debt_balance_amount":0}"#
    static let requiredPayout =
        #"{"totals":\#(requiredTotals),"payment_reference":"PAY-1","payout_date":"2026-01-05T07:00:00Z","currency_code":"SEK","merchant_settlement_type":"NET","merchant_id":"K1"}"#
    static let requiredTransaction =
        #"{"amount":10000,"sale_date":"2026-01-01T10:00:00Z","type":"SALE","capture_date":"2026-01-02T10:00:00Z","order_id":"o-1","currency_code":"SEK","purchase_country":"SE"}"#

    @Test("Payouts and their pages: required fields only; what is not required is absent")
    func payoutMinimal() throws {
        let payout = try decode(Payout.self, Self.requiredPayout)
        #expect(payout.paymentReference == "PAY-1" && payout.merchantSettlementType == .net && payout.merchantID == "K1")
        #expect(payout.totals.settlementAmount == 9_700 && payout.totals.feeAmount == 300)
        #expect(payout.totals.taxAmount == nil && payout.totals.feeCorrectionAmount == nil && payout.totals.commissionReversalAmount == nil)
        #expect(payout.currencyCodeOfRegistrationCountry == nil && payout.transactionsLink == nil)
        let page = try decode(PayoutPage.self, #"{"payouts":[\#(Self.requiredPayout)],"pagination":{"count":1}}"#)
        #expect(page.payouts == [payout])
        #expect(page.pagination == SettlementPagination(count: 1))
    }

    @Test("Payouts: every documented field, unknown fields and an unknown settlement type")
    func payoutMaximal() throws {
        let payout = try decode(
            Payout.self,
            #"""
            {"totals":{"commission_amount":1,"repay_amount":2,"sale_amount":3,"holdback_amount":4,"tax_amount":5,"settlement_amount":6,"fee_correction_amount":7,
                       "reversal_amount":8,"release_amount":9,"return_amount":10,"fee_amount":11,"charge_amount":12,"credit_amount":13,"fee_refund_amount":14,
                       "tax_refund_amount":15,"deposit_amount":16,"opening_debt_balance_amount":17,"closing_debt_balance_amount":18,"commission_reversal_amount":19,\#(Self.unknownFields)},
             "payment_reference":"PAY-1","payout_date":"2026-01-05T07:00:00Z","currency_code":"SEK","currency_code_of_registration_country":"EUR",
             "merchant_settlement_type":"SANDBOX_SETTLEMENT","merchant_id":"K1","transactions":"https://api.klarna.com/settlements/v1/transactions?payment_reference=PAY-1",\#(Self.unknownFields)}
            """#)
        #expect(payout.merchantSettlementType.rawValue == "SANDBOX_SETTLEMENT" && !payout.merchantSettlementType.isKnown)
        #expect(payout.currencyCodeOfRegistrationCountry == "EUR" && payout.transactionsLink?.hasSuffix("PAY-1") == true)
        #expect(
            payout.totals
                == PayoutTotals(
                    settlementAmount: 6, saleAmount: 3, returnAmount: 10, reversalAmount: 8, feeAmount: 11, taxAmount: 5, feeCorrectionAmount: 7,
                    feeRefundAmount: 14, taxRefundAmount: 15, commissionAmount: 1, commissionReversalAmount: 19, chargeAmount: 12, creditAmount: 13,
                    holdbackAmount: 4, releaseAmount: 9, repayAmount: 2, depositAmount: 16, openingDebtBalanceAmount: 17, closingDebtBalanceAmount: 18
                ))
        #expect(throws: DecodingError.self) { try decode(Payout.self, #"{"payment_reference":"PAY-1"}"#) }
    }

    @Test("Payout summary: the required fields (all of them), then with unknown fields")
    func payoutSummary() throws {
        let required =
            #""summary_total_fee_correction_amount":1,"summary_payout_date_start":"2026-01-01T00:00:00Z","summary_total_release_amount":2,"summary_settlement_currency":"SEK","summary_payout_date_end":"2026-01-31T23:59:59Z","summary_total_tax_amount":3,"summary_total_settlement_amount":4,"summary_total_holdback_amount":5,"summary_total_reversal_amount":6,"summary_total_return_amount":7,"summary_total_fee_amount":8,"summary_total_commission_amount":9,"summary_total_sale_amount":10,"summary_total_repay_amount":11"#
        let minimal = try decode([PayoutSummary].self, "[{\(required)}]")
        let maximal = try decode([PayoutSummary].self, "[{\(required),\(Self.unknownFields)}]")
        #expect(minimal == maximal)
        #expect(minimal.first?.totalSettlementAmount == 4 && minimal.first?.totalRepayAmount == 11 && minimal.first?.settlementCurrency == "SEK")
    }

    @Test("Transactions: required fields only; the ids that are not required are absent")
    func transactionMinimal() throws {
        let page = try decode(TransactionPage.self, #"{"transactions":[\#(Self.requiredTransaction)],"pagination":{"count":1}}"#)
        let row = try #require(page.transactions.first)
        #expect(row.amount == 10_000 && row.type == .sale && row.orderID == "o-1" && row.purchaseCountry == "SE" && row.currencyCode == "SEK")
        #expect(row.captureID == nil && row.refundID == nil && row.paymentReference == nil && row.detailedType == nil && row.vatAmount == nil)
        #expect(page.pagination.total == nil && page.pagination.next == nil)
    }

    @Test("Transactions: every documented field, unknown fields, an unknown type and detailed type")
    func transactionMaximal() throws {
        let row = try decode(
            SettlementTransaction.self,
            #"""
            {"amount":300,"capture_id":"c-1","merchant_reference1":"m1","sale_date":"2026-01-01T10:00:00Z","type":"SANDBOX_TYPE","capture_date":"2026-01-02T10:00:00Z",
             "payment_reference":"PAY-1","order_id":"o-1","payout":"https://api.klarna.com/settlements/v1/payouts/PAY-1","refund_id":"","short_order_id":"K",
             "merchant_reference2":"m2","currency_code":"SEK","purchase_country":"SE","vat_rate":2500,"vat_amount":75,"shipping_country":"SE",
             "initial_payment_method_type":"sandbox_method","initial_number_of_installments":3,"initial_payment_method_monthly_downpayments":12,
             "merchant_capture_reference":"ship-1","merchant_refund_reference":"rma-1","detailed_type":"SANDBOX_DETAIL",
             "tax_in_currency_of_registration_country":7,"currency_code_of_registration_country":"EUR","klarna_comment":"c",
             "reversal_reference":"krn:klarna:eu1:dispute:fraud:1","merchant_id":"K1","shipping_address_country":"SE",\#(Self.unknownFields)}
            """#)
        #expect(row.type.rawValue == "SANDBOX_TYPE" && !row.type.isKnown)
        #expect(row.detailedType?.rawValue == "SANDBOX_DETAIL" && row.detailedType?.isKnown == false)
        #expect(row.captureID == "c-1" && row.refundID == nil && row.shortOrderID == "K" && row.payoutLink?.hasSuffix("PAY-1") == true)
        #expect(row.vatAmount == 75 && row.vatRate == 2_500 && row.taxInCurrencyOfRegistrationCountry == 7 && row.klarnaComment == "c")
        #expect(row.initialNumberOfInstallments == 3 && row.initialPaymentMethodMonthlyDownpayments == 12 && row.merchantID == "K1")
        #expect(throws: DecodingError.self) { try decode(SettlementTransaction.self, #"{"type":"SALE"}"#) }
    }
}
