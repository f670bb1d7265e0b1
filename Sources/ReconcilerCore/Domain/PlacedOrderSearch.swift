import Foundation

/// Klarna placed an order the daemon never heard the id of: a create-order ended unclear and, after its settle period
/// (``CreateOrderSettle``), the KP session reads `complete`. Klarna has no lookup of an order by authorization token
/// or KP session, so before asking an operator the daemon looks where Klarna names orders:
///
/// 1. the HPP session's `order_id` (Klarna gives it in the PLACE_ORDER and CAPTURE_ORDER modes; it names this
///    payment's order by construction, so it decides alone);
/// 2. OM notifications (`merchant_urls.notification`, pending orders) received for orders the daemon does not track,
///    each read from OM for its `merchant_reference1` and currency;
/// 3. recorded settlement lines: a SALE carrying the payment's merchant reference (a capture made outside the daemon).
///
/// Sources 2 and 3 name an order by the shop's merchant reference only, so they are used only when the payment has
/// one, and only when exactly one order carries it (one order may be named by both). Orders another payment of this
/// daemon already tracks are not candidates (the engine leaves them out). Several candidates, or none, leave the
/// payment to an operator, with the reason and the command that repairs it.
public enum PlacedOrderSearch {
    /// Where a candidate order was named.
    public enum Source: Sendable, Equatable, CustomStringConvertible {
        case hostedPaymentPage
        case omNotification
        case settlementSale(SettledLineKey)

        public var description: String {
            switch self {
            case .hostedPaymentPage: "the HPP session's order_id"
            case .omNotification: "an OM notification for an order this daemon did not know"
            case .settlementSale(let line): "settlement line \(line) (a SALE)"
            }
        }

        /// The word in the `linked` event's detail.
        public var word: String {
            switch self {
            case .hostedPaymentPage: "hpp_session"
            case .omNotification: "om_notification"
            case .settlementSale: "settlement_sale"
            }
        }
    }

    /// An order some source names, with what Klarna says of it there.
    public struct Clue: Sendable, Equatable {
        public var orderID: String
        public var source: Source
        /// `merchant_reference1` where Klarna gave it; a clue without one matches no payment.
        public var merchantReference: String?
        public var currency: String?

        public init(orderID: String, source: Source, merchantReference: String?, currency: String?) {
            self.orderID = orderID
            self.source = source
            self.merchantReference = merchantReference
            self.currency = currency
        }
    }

    public enum Verdict: Sendable, Equatable {
        /// The order is this payment's: link it; `how` says where it was named, for the event.
        case found(orderID: String, how: String, sources: [Source])
        /// No single order: the operator's reason (the caller adds the repairing command).
        case notFound(String)
    }

    /// The verdict for a payment with `merchantReference` in `currency`, given the HPP session's `order_id` and the
    /// clues the other sources gave. `searched` says what was looked through, for the reason when nothing matched.
    public static func verdict(
        hppOrderID: String?, clues: [Clue], merchantReference: String?, currency: String?, searched: String
    ) -> Verdict {
        if let hppOrderID, !hppOrderID.isEmpty {
            return .found(orderID: hppOrderID, how: "named by \(Source.hostedPaymentPage)", sources: [.hostedPaymentPage])
        }
        guard let merchantReference, !merchantReference.isEmpty else {
            return .notFound(
                "the HPP session names no order_id, and the payment has no merchant reference that an OM notification or a settlement line could be matched by"
            )
        }
        let matching = clues.filter { clue in
            clue.merchantReference == merchantReference && (currency == nil || clue.currency == nil || clue.currency == currency)
        }
        var orderIDs: [String] = []
        for clue in matching where !orderIDs.contains(clue.orderID) { orderIDs.append(clue.orderID) }
        switch orderIDs.count {
        case 0:
            return .notFound(
                "nothing names it: the HPP session gives no order_id, and no \(searched) carries merchant reference \(merchantReference)")
        case 1:
            let sources = matching.map(\.source)
            return .found(
                orderID: orderIDs[0],
                how: "named by " + sources.map(\.description).joined(separator: " and ") + " with merchant reference \(merchantReference)",
                sources: sources)
        default:
            return .notFound(
                "\(orderIDs.count) orders carry merchant reference \(merchantReference) (\(orderIDs.joined(separator: ", "))): which one Klarna placed for this payment is not known"
            )
        }
    }
}
