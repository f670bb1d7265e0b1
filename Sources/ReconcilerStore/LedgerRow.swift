import Foundation
import ReconcilerCore

/// A capture or refund as one row of the settlement ledger, the same in every store: keyed by its order, its kind and
/// its core key (``CaptureKey/captureID``, ``RefundKey/refundID``), so an id-less entry keeps the key the matcher
/// knows it by (`~<amount>@<unix seconds>`).
public struct LedgerRow: Sendable {
    public enum Entry: String, Sendable {
        case capture, refund
    }

    public var orderID: String
    public var entry: Entry
    /// The entry's core key.
    public var key: String
    /// The id as given (nil, or blank, when none was).
    public var klarnaID: String?
    public var amount: Int
    public var currency: String?
    public var at: Date
    public var source: LedgerSource
    public var settledBy: SettledLineKey?

    public init(_ capture: LedgerCapture) {
        orderID = capture.orderID
        entry = .capture
        key = capture.key.captureID
        klarnaID = capture.captureID
        amount = capture.amount
        currency = capture.currency
        at = capture.capturedAt
        source = capture.source
        settledBy = capture.settledBy
    }

    public init(_ refund: LedgerRefund) {
        orderID = refund.orderID
        entry = .refund
        key = refund.key.refundID
        klarnaID = refund.refundID
        amount = refund.amount
        currency = nil
        at = refund.at
        source = refund.source
        settledBy = refund.settledBy
    }

    public init(_ drift: DriftEntry.Entry) {
        switch drift {
        case .capture(let capture): self.init(capture)
        case .refund(let refund): self.init(refund)
        }
    }

    /// A row as a store reads it back; nil for an entry kind this binary does not know.
    public init?(
        orderID: String, entry: String, key: String, klarnaID: String?, amount: Int, currency: String?, at: Date, source: String,
        settledReference: String?, settledOrdinal: Int?
    ) {
        guard let entry = Entry(rawValue: entry) else { return nil }
        self.orderID = orderID
        self.entry = entry
        self.key = key
        self.klarnaID = klarnaID
        self.amount = amount
        self.currency = currency
        self.at = at
        // Only the stores write it, from LedgerSource's own values.
        self.source = LedgerSource(rawValue: source) ?? .observed
        settledBy = settledReference.map { SettledLineKey(paymentReference: $0, ordinal: settledOrdinal ?? 0) }
    }

    public var capture: LedgerCapture {
        LedgerCapture(
            orderID: orderID, captureID: klarnaID, amount: amount, currency: currency, capturedAt: at, source: source, settledBy: settledBy)
    }

    public var refund: LedgerRefund {
        LedgerRefund(orderID: orderID, refundID: klarnaID, amount: amount, at: at, source: source, settledBy: settledBy)
    }

    /// Adds the entry to its order's captures or refunds.
    public func add(to order: inout LedgerOrder) {
        switch entry {
        case .capture: order.captures.append(capture)
        case .refund: order.refunds.append(refund)
        }
    }
}

/// A ledger row a payout settled, and the line that did.
public struct LedgerSettlement: Sendable {
    public var orderID: String
    public var entry: LedgerRow.Entry
    public var key: String
    public var line: SettledLineKey

    /// The captures and refunds `reconciliation` settled, sorted by row: two transactions that settle the same rows
    /// (two payouts naming one capture) lock them in the same order, so neither waits for the other in a deadlock.
    public static func all(in reconciliation: PayoutReconciliation) -> [LedgerSettlement] {
        let captures = reconciliation.settledCaptures.map {
            LedgerSettlement(orderID: $0.key.orderID, entry: .capture, key: $0.key.captureID, line: $0.value)
        }
        let refunds = reconciliation.settledRefunds.map {
            LedgerSettlement(orderID: $0.key.orderID, entry: .refund, key: $0.key.refundID, line: $0.value)
        }
        return (captures + refunds).sorted {
            ($0.orderID, $0.entry.rawValue, $0.key) < ($1.orderID, $1.entry.rawValue, $1.key)
        }
    }
}

/// A payout matched against a ledger that has changed since: a capture or refund it settles was settled meanwhile by
/// another payout (another daemon recorded it). Nothing of the payout is written; matching it again against the
/// ledger as it is now finds the duplicate settlement.
public struct StaleSettlementMatch: Error, CustomStringConvertible {
    public var paymentReference: String
    public var settles: String

    public init(paymentReference: String, settles: String) {
        self.paymentReference = paymentReference
        self.settles = settles
    }

    public var description: String {
        "payout \(paymentReference) was matched while another payout settled \(settles): it is matched again"
    }
}
