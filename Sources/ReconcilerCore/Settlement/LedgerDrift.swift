import Foundation

/// What a read of an order at Klarna shows was moved on it: OM's `captures[]` and `refunds[]`.
public struct OrderMovements: Sendable, Equatable {
    /// One capture or refund: Klarna's id, its amount (minor units) and when it was made, as far as Klarna says.
    public struct Movement: Sendable, Equatable {
        public var id: String?
        public var amount: Int
        public var at: Date?

        public init(id: String?, amount: Int, at: Date?) {
            self.id = id
            self.amount = amount
            self.at = at
        }
    }

    public var orderID: String
    public var currency: String?
    public var captures: [Movement]
    public var refunds: [Movement]

    public init(orderID: String, currency: String?, captures: [Movement], refunds: [Movement]) {
        self.orderID = orderID
        self.currency = currency
        self.captures = captures
        self.refunds = refunds
    }
}

/// Captures and refunds on Klarna's order that the ledger lacks: done outside the daemon (the Merchant Portal,
/// another integration on the merchant id). They enter the ledger as ``LedgerSource/observed``, each with a
/// `settlement_drift` outcome; nothing is "fixed".
///
/// A movement is in the ledger when an entry has its id; else an entry without an id and of its amount stands for
/// it (each such entry for one movement only). A movement without an amount is nothing to record.
public struct LedgerDrift: Sendable, Equatable {
    public var captures: [LedgerCapture]
    public var refunds: [LedgerRefund]

    /// `read`: the order as Klarna shows it; `readAt`: when, the time of a movement Klarna gave none for.
    public init(read: OrderMovements, ledger: LedgerOrder, readAt: Date) {
        let currency = read.currency ?? ledger.currency
        captures = Self.lacking(read.captures, known: ledger.captures.map { (id: $0.captureID, amount: $0.amount) }).map {
            LedgerCapture(
                orderID: ledger.orderID, captureID: $0.id, amount: $0.amount, currency: currency, capturedAt: $0.at ?? readAt,
                source: .observed)
        }
        refunds = Self.lacking(read.refunds, known: ledger.refunds.map { (id: $0.refundID, amount: $0.amount) }).map {
            LedgerRefund(orderID: ledger.orderID, refundID: $0.id, amount: $0.amount, at: $0.at ?? readAt, source: .observed)
        }
    }

    public var isEmpty: Bool { captures.isEmpty && refunds.isEmpty }

    /// The movements `known` (the ledger's ids and amounts) does not account for, in Klarna's order.
    static func lacking(_ movements: [OrderMovements.Movement], known: [(id: String?, amount: Int)]) -> [OrderMovements.Movement] {
        let ids = Set(known.compactMap { SettledLine.given($0.id) })
        var withoutID = known.filter { SettledLine.given($0.id) == nil }.map(\.amount)
        var seen: Set<String> = []
        var lacking: [OrderMovements.Movement] = []
        for movement in movements where movement.amount > 0 {
            if let id = SettledLine.given(movement.id) {
                if ids.contains(id) || !seen.insert(id).inserted { continue }
            }
            if let index = withoutID.firstIndex(of: movement.amount) {
                withoutID.remove(at: index)
                continue
            }
            lacking.append(movement)
        }
        return lacking
    }
}

extension Outcome {
    /// A capture seen on a read of its order that the ledger lacked. `paymentReference`: the payout whose line made
    /// the daemon read the order.
    public init(observed capture: LedgerCapture, of order: LedgerOrder, paymentReference: String?) {
        let id = SettledLine.given(capture.captureID)
        let currency = capture.currency ?? order.currency
        let what = Self.movement("capture", id: id, amount: capture.amount, currency: currency, at: capture.capturedAt)
        self.init(
            kind: .settlementDrift,
            reason: "\(what) on order \(order.orderID) is not the daemon's: captured outside it (Merchant Portal?); recorded as observed",
            orderID: order.orderID, merchantReference: order.merchantReference, amount: capture.amount, currency: currency,
            captureID: id, paymentReference: paymentReference, finding: .unknownCapture)
    }

    /// A refund seen on a read of its order that the ledger lacked.
    public init(observed refund: LedgerRefund, of order: LedgerOrder, currency: String?, paymentReference: String?) {
        let id = SettledLine.given(refund.refundID)
        let currency = currency ?? order.currency
        let what = Self.movement("refund", id: id, amount: refund.amount, currency: currency, at: refund.at)
        self.init(
            kind: .settlementDrift,
            reason: "\(what) on order \(order.orderID) is not the daemon's: refunded outside it (Merchant Portal?); recorded as observed",
            orderID: order.orderID, merchantReference: order.merchantReference, amount: refund.amount, currency: currency,
            paymentReference: paymentReference, finding: .unknownRefund, refundID: id)
    }

    /// `capture c-1 of 10000 SEK made 2027-01-01T10:00:00Z`.
    private static func movement(_ noun: String, id: String?, amount: Int, currency: String?, at: Date) -> String {
        let currency = currency.map { " \($0)" } ?? ""
        return "\(noun) \(id ?? "without an id") of \(amount)\(currency) made \(at.formatted(Date.ISO8601FormatStyle()))"
    }
}

extension PayoutReconciliation {
    /// Orders the ledger knows whose SALE or RETURN here settles a capture or refund the ledger does not: the orders
    /// to read at Klarna for drift, each once, by their first such line.
    public var driftOrderIDs: [String] {
        var seen: Set<String> = []
        return lines.compactMap { line in
            guard let reason = line.match.unmatchedReason, reason == .captureUnknown || reason == .refundUnknown,
                let orderID = line.line.orderIDGiven, seen.insert(orderID).inserted
            else { return nil }
            return orderID
        }
    }
}
