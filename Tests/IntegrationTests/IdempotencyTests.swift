import Foundation
import KlarnaAPI
import KlarnaSandbox
import ReconcilerCore
import Testing

/// The sandbox's `Klarna-Idempotency-Key` semantics, as a client sees them over the wire.
@Suite struct IdempotencyTests {
    @Test func sameKeyCapturesOnceAndAnswersTheSame() async throws {
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder(amount: 20_000)
            let request = CaptureRequest(capturedAmount: 20_000)
            let first = try await h.client.createCapture(orderID: orderID, request: request, idempotencyKey: "capture-1")
            let second = try await h.client.createCapture(orderID: orderID, request: request, idempotencyKey: "capture-1")
            #expect(first == second)
            let captures = h.sandbox.effects(kind: .captured)
            #expect(captures.count == 1)
            #expect(captures.first?.amount == 20_000)
            #expect(captures.first?.orderId == orderID)
            #expect(h.sandbox.requests(route: "om.create_capture").map(\.replayed) == [false, true])
        }
    }

    @Test func onlyTheKeyMattersNotTheBody() async throws {
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder(amount: 20_000)
            _ = try await h.client.createCapture(orderID: orderID, request: CaptureRequest(capturedAmount: 1_000), idempotencyKey: "k")
            _ = try await h.client.createCapture(orderID: orderID, request: CaptureRequest(capturedAmount: 9_000), idempotencyKey: "k")
            #expect(h.sandbox.effects(kind: .captured).map(\.amount) == [1_000])
            #expect(try await h.client.readOrder(id: orderID).capturedAmount == 1_000)
        }
    }

    @Test func differentKeysAreDifferentCaptures() async throws {
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder(amount: 20_000)
            _ = try await h.client.createCapture(orderID: orderID, request: CaptureRequest(capturedAmount: 1_000), idempotencyKey: "a")
            _ = try await h.client.createCapture(orderID: orderID, request: CaptureRequest(capturedAmount: 1_000), idempotencyKey: "b")
            #expect(h.sandbox.effects(kind: .captured).count == 2)
        }
    }

    @Test func aLostAnswerRetriedWithTheSameKeyStillCapturesOnce() async throws {
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder(amount: 20_000)
            h.sandbox.addFault(SandboxFault(route: "om.create_capture", kind: .reset, afterEffect: true))
            let lost = await #expect(throws: KlarnaAPIError.self) {
                try await h.client.createCapture(orderID: orderID, request: CaptureRequest(capturedAmount: 20_000), idempotencyKey: "retry-me")
            }
            #expect(lost?.outcomeUnknown == true)
            #expect(lost?.retryDisposition == .retry(notBefore: nil))
            let retried = try await h.client.createCapture(
                orderID: orderID, request: CaptureRequest(capturedAmount: 20_000), idempotencyKey: "retry-me")
            let effects = h.sandbox.effects(kind: .captured)
            #expect(effects.count == 1)
            #expect(effects.first?.captureId == retried.captureID)
        }
    }

    @Test func concurrentDuplicatesWithOneKeyCaptureOnce() async throws {
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder(amount: 20_000)
            let client = h.client
            let ids = try await withThrowingTaskGroup(of: String?.self) { group in
                for _ in 0..<16 {
                    group.addTask {
                        try await client.createCapture(orderID: orderID, request: CaptureRequest(capturedAmount: 20_000), idempotencyKey: "burst")
                            .captureID
                    }
                }
                return try await group.reduce(into: Set<String?>()) { $0.insert($1) }
            }
            #expect(ids.count == 1)
            #expect(h.sandbox.effects(kind: .captured).count == 1)
        }
    }

    @Test func aKeyIsHonouredFor24HoursOnly() async throws {
        let clock = ManualClock()
        try await SandboxHarness.with(clock: clock) { h in
            let orderID = try await h.placedOrder(amount: 20_000)
            _ = try await h.client.createCapture(orderID: orderID, request: CaptureRequest(capturedAmount: 1_000), idempotencyKey: "day")
            clock.advance(by: .seconds(23 * 3_600))
            _ = try await h.client.createCapture(orderID: orderID, request: CaptureRequest(capturedAmount: 1_000), idempotencyKey: "day")
            #expect(h.sandbox.effects(kind: .captured).count == 1)
            clock.advance(by: .seconds(2 * 3_600))
            _ = try await h.client.createCapture(orderID: orderID, request: CaptureRequest(capturedAmount: 1_000), idempotencyKey: "day")
            #expect(h.sandbox.effects(kind: .captured).count == 2)
        }
    }

    @Test func errorsAreReplayedToo() async throws {
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder(amount: 20_000)
            for _ in 0..<2 {
                let error = await #expect(throws: KlarnaAPIError.self) {
                    try await h.client.createCapture(orderID: orderID, request: CaptureRequest(capturedAmount: 99_999), idempotencyKey: "too-much")
                }
                #expect(error?.errorCode == "CAPTURE_NOT_ALLOWED")
            }
            #expect(h.sandbox.requests(route: "om.create_capture").map(\.replayed) == [false, true])
        }
    }

    @Test func cancelAndExtendHonourTheirKeys() async throws {
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder()
            try await h.client.extendAuthorizationTime(orderID: orderID, idempotencyKey: "ext")
            try await h.client.extendAuthorizationTime(orderID: orderID, idempotencyKey: "ext")
            try await h.client.cancelOrder(orderID: orderID, idempotencyKey: "cancel")
            // Without the key a second cancel is refused; with it, the first answer comes back.
            try await h.client.cancelOrder(orderID: orderID, idempotencyKey: "cancel")
            #expect(h.sandbox.effects(kind: .authorizationExtended).count == 1)
            #expect(h.sandbox.effects(kind: .orderCancelled).count == 1)
        }
    }

    @Test func createOrderIsNotIdempotentAsKlarnaDocumentsNone() async throws {
        try await SandboxHarness.with { h in
            let (created, token) = try await h.authorizedSession()
            let order = try CreateOrderRequest(session: try await h.client.readPaymentSession(id: created.kpSessionId))
            _ = try await h.client.createOrder(authorizationToken: token, order: order, idempotencyKey: "place")
            let error = await #expect(throws: KlarnaAPIError.self) {
                try await h.client.createOrder(authorizationToken: token, order: order, idempotencyKey: "place")
            }
            #expect(error?.status == 404)
            #expect(error?.errorCode == "SESSION_COMPLETED")
            #expect(h.sandbox.effects(kind: .orderPlaced).count == 1)
        }
    }
}
