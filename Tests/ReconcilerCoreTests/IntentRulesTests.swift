import Foundation
import ReconcilerCore
import Testing
import TestSupport

@Suite("Intent rules: resolving a lost answer, giving up")
struct IntentRulesTests {
    let expiry = Fixtures.t0.addingTimeInterval(28 * 86_400)

    func facts(_ status: OrderStatus? = .authorized, captured: Int? = 0, remaining: Int? = 10_000, expires: Date? = nil) -> OrderFacts {
        OrderFacts(status: status, capturedTotal: captured, remainingAuthorizedAmount: remaining, expiresAt: expires)
    }

    @Test(
        "Every intent kind acts on a session, on an order, refunds an order, or charges or cancels a customer token, and each maps back to its kind")
    func targets() {
        for kind in Intent.Kind.allCases {
            switch kind.target {
            case .session(let session): #expect(session.intentKind == kind)
            case .order(let order): #expect(order.intentKind == kind)
            case .refund: #expect(kind == .refund)
            case .charge: #expect(kind == .charge)
            case .cancelToken: #expect(kind == .cancelToken)
            }
        }
        #expect(SessionIntentKind.allCases.count + OrderIntentKind.allCases.count + 3 == Intent.Kind.allCases.count)
        // Klarna deduplicates exactly the Order Management writes (the order's and refunds) and the customer-token API's
        // writes (a charge by its key, a cancellation by nature).
        for kind in Intent.Kind.allCases {
            if case .session = kind.target { #expect(!kind.klarnaDeduplicates) } else { #expect(kind.klarnaDeduplicates) }
        }
    }

    @Test("A capture is done once the captured total reaches what it expects; never without an expectation")
    func captureDone() {
        #expect(OrderIntentRules.isDone(.capture, facts: facts(captured: 4_000), expectedCapturedTotal: 4_000, knownExpiry: nil))
        #expect(OrderIntentRules.isDone(.capture, facts: facts(captured: 6_000), expectedCapturedTotal: 4_000, knownExpiry: nil))
        #expect(!OrderIntentRules.isDone(.capture, facts: facts(captured: 3_999), expectedCapturedTotal: 4_000, knownExpiry: nil))
        #expect(!OrderIntentRules.isDone(.capture, facts: facts(captured: nil), expectedCapturedTotal: 4_000, knownExpiry: nil))
        #expect(!OrderIntentRules.isDone(.capture, facts: facts(captured: 10_000), expectedCapturedTotal: nil, knownExpiry: nil))
    }

    @Test("A cancel is done when the order reads CANCELLED; a release when something was captured and nothing remains")
    func cancelAndRelease() {
        #expect(OrderIntentRules.isDone(.cancelOrder, facts: facts(.cancelled), expectedCapturedTotal: nil, knownExpiry: nil))
        #expect(!OrderIntentRules.isDone(.cancelOrder, facts: facts(.authorized), expectedCapturedTotal: nil, knownExpiry: nil))
        #expect(
            !OrderIntentRules.isDone(.cancelOrder, facts: facts(OrderStatus(rawValue: "SOMETHING_NEW")), expectedCapturedTotal: nil, knownExpiry: nil)
        )
        #expect(
            OrderIntentRules.isDone(
                .releaseRemaining, facts: facts(.captured, captured: 4_000, remaining: 0), expectedCapturedTotal: nil, knownExpiry: nil))
        #expect(
            !OrderIntentRules.isDone(
                .releaseRemaining, facts: facts(.partCaptured, captured: 4_000, remaining: 6_000), expectedCapturedTotal: nil, knownExpiry: nil))
        #expect(
            !OrderIntentRules.isDone(
                .releaseRemaining, facts: facts(.cancelled, captured: 0, remaining: 0), expectedCapturedTotal: nil, knownExpiry: nil))
    }

    @Test("An extension is done when the authorization ends later than it did; a read without an expiry proves nothing")
    func extensionDone() {
        let later = expiry.addingTimeInterval(86_400)
        #expect(OrderIntentRules.isDone(.extendAuthorization, facts: facts(expires: later), expectedCapturedTotal: nil, knownExpiry: expiry))
        #expect(!OrderIntentRules.isDone(.extendAuthorization, facts: facts(expires: expiry), expectedCapturedTotal: nil, knownExpiry: expiry))
        #expect(!OrderIntentRules.isDone(.extendAuthorization, facts: facts(expires: nil), expectedCapturedTotal: nil, knownExpiry: expiry))
        #expect(OrderIntentRules.isDone(.extendAuthorization, facts: facts(expires: later), expectedCapturedTotal: nil, knownExpiry: nil))
    }

    @Test(
        "Giving up an order intent: an operator's cancel or release waits for a person, an extension or Klarna's 403 reads the order, anything else fails"
    )
    func orderGiveUp() {
        for status in [nil, 400, 403, 500] as [Int?] {
            #expect(OrderIntentRules.giveUp(.cancelOrder, status: status) == .waitForOperator)
            #expect(OrderIntentRules.giveUp(.releaseRemaining, status: status) == .waitForOperator)
            #expect(OrderIntentRules.giveUp(.extendAuthorization, status: status) == .readOrder)
        }
        #expect(OrderIntentRules.giveUp(.capture, status: 403) == .readOrder)
        #expect(OrderIntentRules.giveUp(.capture, status: 400) == .fail)
        #expect(OrderIntentRules.giveUp(.capture, status: nil) == .fail)
    }

    @Test("Giving up a session intent: 404 is an expired token, 403 REJECTED a rejection, anything else needs a person")
    func sessionGiveUp() {
        let expired = SessionIntentRules.giveUp(.placeOrder, status: 404, errorCode: "NOT_FOUND", error: "404 NOT_FOUND", retryReason: "not retried")
        #expect(expired.outcome == .expired)
        #expect(expired.reason.contains("expired or was released"))
        let rejected = SessionIntentRules.giveUp(
            .customerToken, status: 403, errorCode: "REJECTED", error: "403 REJECTED", retryReason: "not retried")
        #expect(rejected == (.rejected, "Klarna rejected the customer token (403 REJECTED)"))
        let other = SessionIntentRules.giveUp(
            .placeOrder, status: 403, errorCode: "FORBIDDEN", error: "403 FORBIDDEN", retryReason: "a 4xx is not retried")
        #expect(other == (.needsAttention, "place_order failed: 403 FORBIDDEN; a 4xx is not retried"))
        #expect(
            SessionIntentRules.giveUp(.placeOrder, status: nil, errorCode: nil, error: "timeout", retryReason: "token expires").outcome
                == .needsAttention)
    }
}
