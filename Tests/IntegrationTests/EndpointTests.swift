import Foundation
import KlarnaAPI
import KlarnaSandbox
import ReconcilerCore
import Testing

/// Every endpoint of the client, over real sockets against the sandbox, on its success path.
@Suite struct EndpointTests {
    @Test func hppSessionFollowsItsScheduleAndShowsTheAuthorizationToken() async throws {
        let clock = ManualClock()
        try await SandboxHarness.with(clock: clock) { h in
            let created = try h.sandbox.createSession(
                SessionSpec(
                    orderAmount: 12_345,
                    schedule: [
                        ScheduleStep(afterSeconds: 10, status: "IN_PROGRESS"), ScheduleStep(afterSeconds: 20, status: "COMPLETED"),
                    ]))
            var session = try await h.client.readHPPSession(id: created.hppSessionId)
            #expect(session.status == .waiting)
            #expect(session.authorizationToken == nil)
            #expect(session.expiresAt == created.expiresAt)
            clock.advance(by: .seconds(15))
            session = try await h.client.readHPPSession(id: created.hppSessionId)
            #expect(session.status == .inProgress)
            clock.advance(by: .seconds(10))
            session = try await h.client.readHPPSession(id: created.hppSessionId)
            #expect(session.status == .completed)
            #expect(session.authorizationToken != nil)
            #expect(session.orderID == nil)
        }
    }

    @Test func hppSessionInPlaceOrderModeCarriesTheOrderID() async throws {
        try await SandboxHarness.with { h in
            let created = try h.sandbox.createSession(SessionSpec(placeOrderMode: "PLACE_ORDER"))
            try h.sandbox.setHPPStatus(created.hppSessionId, "COMPLETED")
            let session = try await h.client.readHPPSession(id: created.hppSessionId)
            let orderID = try #require(session.orderID)
            #expect(session.klarnaReference?.count == 8)
            #expect(session.authorizationToken == nil)
            let order = try await h.client.readOrder(id: orderID)
            #expect(order.status == .authorized)
            // HPP placed the order itself: no merchant-side order placement happened.
            #expect(h.sandbox.effects(kind: .orderPlaced).isEmpty)
        }
    }

    @Test func unknownHPPStatusDecodesAndIsNotFinal() async throws {
        try await SandboxHarness.with { h in
            let created = try h.sandbox.createSession()
            try h.sandbox.setHPPStatus(created.hppSessionId, "TIMEOUT")
            let session = try await h.client.readHPPSession(id: created.hppSessionId)
            #expect(session.status?.rawValue == "TIMEOUT")
            #expect(session.status?.isKnown == false)
        }
    }

    @Test func disablingASessionMakesItDisabledAndACompletedOneCannotBe() async throws {
        try await SandboxHarness.with { h in
            let open = try h.sandbox.createSession()
            try await h.client.disableHPPSession(id: open.hppSessionId)
            #expect(try await h.client.readHPPSession(id: open.hppSessionId).status == .disabled)
            #expect(h.sandbox.effects(kind: .hppDisabled).map(\.hppSessionId) == [open.hppSessionId])

            let (completed, _) = try await h.authorizedSession()
            let error = await #expect(throws: KlarnaAPIError.self) { try await h.client.disableHPPSession(id: completed.hppSessionId) }
            #expect(error?.status == 400)
            #expect(error?.errorMessages == ["HPP session has already been successfully completed."])
            #expect(error?.retryDisposition == .doNotRetry)
        }
    }

    @Test func paymentSessionReturnsWhatTheConsumerAuthorized() async throws {
        try await SandboxHarness.with { h in
            let lines = [
                SandboxOrderLine(name: "Shoes", quantity: 2, unitPrice: 5_000, totalAmount: 10_000, taxRate: 2_500, totalTaxAmount: 2_000),
                SandboxOrderLine(name: "Socks", quantity: 1, unitPrice: 995, totalAmount: 995),
            ]
            let created = try h.sandbox.createSession(
                SessionSpec(
                    orderTaxAmount: 2_000, purchaseCurrency: "EUR", purchaseCountry: "DE", locale: "de-DE", orderLines: lines,
                    merchantReference: "order-4711"))
            let session = try await h.client.readPaymentSession(id: created.kpSessionId)
            #expect(session.status == .incomplete)
            #expect(session.orderAmount == 10_995)
            #expect(session.orderTaxAmount == 2_000)
            #expect(session.purchaseCurrency == "EUR")
            #expect(session.orderLines.map(\.name) == ["Shoes", "Socks"])
            #expect(session.orderLines[0].unitPrice == 5_000)
            #expect(session.merchantReference1 == "order-4711")
            #expect(session.intent == .buy)
        }
    }

    @Test func createOrderPlacesExactlyOneOrderAndCompletesTheSession() async throws {
        try await SandboxHarness.with { h in
            let (created, token) = try await h.authorizedSession()
            let session = try await h.client.readPaymentSession(id: created.kpSessionId)
            let placed = try await h.client.createOrder(
                authorizationToken: token, order: CreateOrderRequest(session: session, merchantReference: "ref-1"))
            #expect(placed.fraudStatus == .accepted)
            #expect(placed.redirectURL != nil)
            #expect(try await h.client.readPaymentSession(id: created.kpSessionId).status == .complete)
            let effects = h.sandbox.effects(kind: .orderPlaced)
            #expect(effects.count == 1)
            #expect(effects.first?.orderId == placed.orderID)
            #expect(effects.first?.amount == 20_000)
        }
    }

    @Test func cancelAuthorizationReleasesTheToken() async throws {
        try await SandboxHarness.with { h in
            let (created, token) = try await h.authorizedSession()
            let session = try await h.client.readPaymentSession(id: created.kpSessionId)
            try await h.client.cancelAuthorization(authorizationToken: token)
            let error = await #expect(throws: KlarnaAPIError.self) {
                try await h.client.createOrder(authorizationToken: token, order: CreateOrderRequest(session: session))
            }
            #expect(error?.status == 404)
            #expect(error?.errorCode == "NOT_FOUND")
            #expect(h.sandbox.effects(kind: .authorizationCancelled).count == 1)
            #expect(h.sandbox.effects(kind: .orderPlaced).isEmpty)
        }
    }

    @Test func customerTokenForATokenizeSessionAndRefusedForBuy() async throws {
        try await SandboxHarness.with { h in
            let request = CustomerTokenRequest(purchaseCountry: "SE", purchaseCurrency: "SEK", locale: "sv-SE", description: "Monthly box")
            let (_, token) = try await h.authorizedSession(SessionSpec(intent: "tokenize"))
            let created = try await h.client.createCustomerToken(authorizationToken: token, request: request)
            #expect(!created.tokenID.isEmpty)
            #expect(h.sandbox.effects(kind: .customerTokenCreated).map(\.tokenId) == [created.tokenID])

            let (_, buyToken) = try await h.authorizedSession(SessionSpec(intent: "buy"))
            let error = await #expect(throws: KlarnaAPIError.self) {
                try await h.client.createCustomerToken(authorizationToken: buyToken, request: request)
            }
            #expect(error?.status == 403)
            #expect(error?.errorCode == "INVALID_OPERATION")
        }
    }

    @Test func readOrderShowsAmountsAndExpiry() async throws {
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder(amount: 31_000)
            let order = try await h.client.readOrder(id: orderID)
            #expect(order.orderID == orderID)
            #expect(order.status == .authorized)
            #expect(order.fraudStatus == .accepted)
            #expect(order.orderAmount == 31_000)
            #expect(order.capturedAmount == 0)
            #expect(order.remainingAuthorizedAmount == 31_000)
            #expect(order.expiresAt != nil)
            #expect(order.captures.isEmpty)
        }
    }

    @Test func captureAnswers201WithCaptureIdAndLocation() async throws {
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder(amount: 20_000)
            let first = try await h.client.createCapture(
                orderID: orderID, request: CaptureRequest(capturedAmount: 5_000), idempotencyKey: UUID().uuidString)
            let captureID = try #require(first.captureID)
            #expect(first.location?.hasSuffix("/ordermanagement/v1/orders/\(orderID)/captures/\(captureID)") == true)
            var order = try await h.client.readOrder(id: orderID)
            #expect(order.status == .partCaptured)
            #expect(order.capturedAmount == 5_000)
            _ = try await h.client.createCapture(orderID: orderID, request: CaptureRequest(capturedAmount: 15_000), idempotencyKey: UUID().uuidString)
            order = try await h.client.readOrder(id: orderID)
            #expect(order.status == .captured)
            #expect(order.remainingAuthorizedAmount == 0)
            #expect(order.captures.map(\.capturedAmount) == [5_000, 15_000])
        }
    }

    @Test func overCaptureIsRefusedWithCaptureNotAllowed() async throws {
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder(amount: 20_000)
            let error = await #expect(throws: KlarnaAPIError.self) {
                try await h.client.createCapture(orderID: orderID, request: CaptureRequest(capturedAmount: 20_001), idempotencyKey: "k1")
            }
            #expect(error?.status == 403)
            #expect(error?.errorCode == "CAPTURE_NOT_ALLOWED")
            #expect(error?.retryDisposition == .doNotRetry)
            #expect(error?.outcomeUnknown == false)
            #expect(error?.correlationID != nil)
            #expect(error?.correlationIDHeader != nil)
            #expect(error?.correlationID == error?.correlationIDHeader)
            #expect(h.sandbox.effects(kind: .captured).isEmpty)
        }
    }

    @Test func pendingOrderCannotBeCapturedUntilAccepted() async throws {
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder(fraud: "PENDING")
            #expect(try await h.client.readOrder(id: orderID).fraudStatus == .pending)
            await #expect(throws: KlarnaAPIError.self) {
                try await h.client.createCapture(orderID: orderID, request: CaptureRequest(capturedAmount: 1_000), idempotencyKey: "a")
            }
            try h.sandbox.setFraudStatus(orderID: orderID, "ACCEPTED")
            _ = try await h.client.createCapture(orderID: orderID, request: CaptureRequest(capturedAmount: 1_000), idempotencyKey: "b")
            #expect(h.sandbox.effects(kind: .captured).count == 1)
        }
    }

    @Test func extendAuthorizationTimeMovesTheExpiry() async throws {
        let clock = ManualClock()
        try await SandboxHarness.with(clock: clock) { h in
            let orderID = try await h.placedOrder()
            let before = try #require(try await h.client.readOrder(id: orderID).expiresAt)
            clock.advance(by: .seconds(20 * 86_400))
            try await h.client.extendAuthorizationTime(orderID: orderID, idempotencyKey: UUID().uuidString)
            let after = try #require(try await h.client.readOrder(id: orderID).expiresAt)
            #expect(after.timeIntervalSince(before) > 19 * 86_400)
            #expect(h.sandbox.effects(kind: .authorizationExtended).count == 1)
        }
    }

    @Test func cancelOrderCancelsAnUncapturedOrderOnly() async throws {
        try await SandboxHarness.with { h in
            let open = try await h.placedOrder()
            try await h.client.cancelOrder(orderID: open, idempotencyKey: UUID().uuidString)
            #expect(try await h.client.readOrder(id: open).status == .cancelled)

            let captured = try await h.placedOrder()
            _ = try await h.client.createCapture(orderID: captured, request: CaptureRequest(capturedAmount: 100), idempotencyKey: "c")
            let error = await #expect(throws: KlarnaAPIError.self) {
                try await h.client.cancelOrder(orderID: captured, idempotencyKey: UUID().uuidString)
            }
            #expect(error?.errorCode == "CANCEL_NOT_ALLOWED")
        }
    }

    @Test func paymentRequestReadShowsTheNetworkSessionToken() async throws {
        try await SandboxHarness.with { h in
            let id = h.sandbox.createPaymentRequest(state: "IN_PROGRESS")
            var request = try await h.client.readPaymentRequest(id: id)
            #expect(request.paymentRequestID == id)
            #expect(request.state == .inProgress)
            #expect(request.klarnaNetworkSessionToken == nil)
            try h.sandbox.setPaymentRequestState(id, "COMPLETED")
            request = try await h.client.readPaymentRequest(id: id)
            #expect(request.state == .completed)
            #expect(request.klarnaNetworkSessionToken?.hasPrefix("krn:") == true)

            let error = await #expect(throws: KlarnaAPIError.self) { try await h.client.readPaymentRequest(id: "krn:payment:eu1:request:nope") }
            #expect(error?.status == 404)
        }
    }

    @Test func resourceIdsCannotEscapeTheirPathSegment() async throws {
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder()
            // "../" and "?" stay inside the segment: the sandbox sees one unknown id, not another resource.
            let error = await #expect(throws: KlarnaAPIError.self) { try await h.client.readOrder(id: "x/../../\(orderID)?a=b") }
            #expect(error?.status == 404)
            #expect(h.sandbox.requests(route: "om.read_order").last?.path.contains("%2F") == true)
        }
    }
}
