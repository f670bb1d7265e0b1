import Foundation
import Testing
@testable import ReconcilerCore

@Suite("Finding the order Klarna placed after an unclear create-order")
struct PlacedOrderSearchTests {
    typealias Clue = PlacedOrderSearch.Clue
    let searched = "OM notification or settlement SALE"
    let sale = PlacedOrderSearch.Source.settlementSale(SettledLineKey(paymentReference: "PAY-1", ordinal: 3))

    func verdict(hpp: String? = nil, _ clues: [Clue], reference: String? = "shop-7", currency: String? = "EUR") -> PlacedOrderSearch.Verdict {
        PlacedOrderSearch.verdict(hppOrderID: hpp, clues: clues, merchantReference: reference, currency: currency, searched: searched)
    }

    @Test("The HPP session's order_id decides alone: it names this payment's order, whatever else is found")
    func hppDecides() {
        let other = Clue(orderID: "o-other", source: .omNotification, merchantReference: "shop-7", currency: "EUR")
        #expect(
            verdict(hpp: "o-hpp", [other], reference: nil)
                == .found(orderID: "o-hpp", how: "named by the HPP session's order_id", sources: [.hostedPaymentPage]))
        // An empty order_id names nothing.
        guard case .notFound = verdict(hpp: "", [], reference: nil) else { Issue.record("an empty order_id linked an order"); return }
    }

    @Test("One order carrying the payment's merchant reference is linked, named by a notification, a SALE, or both")
    func oneCandidate() {
        let notified = Clue(orderID: "o-1", source: .omNotification, merchantReference: "shop-7", currency: "EUR")
        let settled = Clue(orderID: "o-1", source: sale, merchantReference: "shop-7", currency: "EUR")
        let unrelated = Clue(orderID: "o-2", source: .omNotification, merchantReference: "shop-8", currency: "EUR")
        #expect(
            verdict([unrelated, notified])
                == .found(
                    orderID: "o-1", how: "named by an OM notification for an order this daemon did not know with merchant reference shop-7",
                    sources: [.omNotification]))
        #expect(
            verdict([settled])
                == .found(orderID: "o-1", how: "named by settlement line PAY-1#3 (a SALE) with merchant reference shop-7", sources: [sale]))
        guard case .found(let orderID, let how, let sources) = verdict([notified, settled]) else { Issue.record("not linked"); return }
        #expect(orderID == "o-1" && sources == [.omNotification, sale])
        #expect(how.contains(" and settlement line PAY-1#3"))
    }

    @Test("Two orders with the payment's reference, or none, or a payment without a reference: nothing is linked, and the reason says why")
    func nothingOrTooMuch() {
        let first = Clue(orderID: "o-1", source: .omNotification, merchantReference: "shop-7", currency: "EUR")
        let second = Clue(orderID: "o-2", source: sale, merchantReference: "shop-7", currency: "EUR")
        #expect(
            verdict([first, second])
                == .notFound("2 orders carry merchant reference shop-7 (o-1, o-2): which one Klarna placed for this payment is not known"))
        #expect(verdict([]) == .notFound("nothing names it: the HPP session gives no order_id, and no \(searched) carries merchant reference shop-7"))
        #expect(
            verdict([first], reference: nil)
                == .notFound(
                    "the HPP session names no order_id, and the payment has no merchant reference that an OM notification or a settlement line could be matched by"
                ))
    }

    @Test("A candidate in another currency, or whose reference Klarna left out, is not this payment's order")
    func mismatches() {
        let sek = Clue(orderID: "o-1", source: .omNotification, merchantReference: "shop-7", currency: "SEK")
        let anonymous = Clue(orderID: "o-2", source: .omNotification, merchantReference: nil, currency: "EUR")
        guard case .notFound = verdict([sek, anonymous]) else { Issue.record("a mismatched order was linked"); return }
        // A currency either side left out does not rule a candidate out.
        guard case .found("o-3", _, _) = verdict([Clue(orderID: "o-3", source: .omNotification, merchantReference: "shop-7", currency: nil)]) else {
            Issue.record("not linked without Klarna's currency"); return
        }
        guard case .found = verdict([sek], currency: nil) else { Issue.record("not linked without a payment currency"); return }
    }

    @Test("An OM notification's dedupe key gives its order id back")
    func notificationKey() {
        #expect(RetentionPolicy.notifiedOrderID(dedupeKey: "om-notification:3eaeb557-5e30:FRAUD_RISK_ACCEPTED") == "3eaeb557-5e30")
        #expect(RetentionPolicy.notifiedOrderID(dedupeKey: "om-notification:a:b:FRAUD_RISK_STOPPED") == "a:b")
        #expect(RetentionPolicy.notifiedOrderID(dedupeKey: "om-notification::FRAUD_RISK_STOPPED") == nil)
        #expect(RetentionPolicy.notifiedOrderID(dedupeKey: "hpp:s-1:COMPLETED") == nil)
    }
}
