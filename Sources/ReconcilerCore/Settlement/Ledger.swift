import Foundation

/// Who moved the money on the shop's side.
public enum LedgerSource: String, Codable, Sendable, CaseIterable {
    /// The daemon captured or refunded.
    case daemon
    /// Seen on a read of the order and not done by the daemon: done outside it (the Merchant Portal, another
    /// integration on the merchant id). Drift: recorded, never "fixed".
    case observed
}

/// The key of a capture or refund the ledger holds without Klarna's id: `~<amount>@<unix seconds>`. The store keeps
/// it as the row's key, and the migrations' backfill builds the same words in SQL.
private func idlessKey(amount: Int, at: Date) -> String {
    "~\(amount)@\(Int(at.timeIntervalSince1970.rounded(.down)))"
}

/// A capture's identity on the shop's side: its order and Klarna's `capture_id`. A capture the ledger holds without
/// an id (tolerated; Klarna always gives one) is keyed by its amount and the second it was captured instead
/// (`~<amount>@<unix seconds>`), which stays the same through the store.
public struct CaptureKey: Codable, Sendable, Hashable, CustomStringConvertible {
    public var orderID: String
    public var captureID: String

    public init(orderID: String, captureID: String) {
        self.orderID = orderID
        self.captureID = captureID
    }

    public var description: String { "\(orderID)/\(captureID)" }
}

/// A refund's identity: its order and Klarna's `refund_id` (or, without one, `~<amount>@<unix seconds>`).
public struct RefundKey: Codable, Sendable, Hashable, CustomStringConvertible {
    public var orderID: String
    public var refundID: String

    public init(orderID: String, refundID: String) {
        self.orderID = orderID
        self.refundID = refundID
    }

    public var description: String { "\(orderID)/\(refundID)" }
}

/// A capture the shop knows of.
public struct LedgerCapture: Codable, Sendable, Equatable {
    public var orderID: String
    public var captureID: String?
    /// Minor units, positive.
    public var amount: Int
    /// The capture's currency when known; else the order's.
    public var currency: String?
    public var capturedAt: Date
    public var source: LedgerSource
    /// The settlement line that settled it, once one has (the store records ``PayoutReconciliation/settledCaptures``).
    /// A SALE in another payout for a capture already settled is a ``SettlementFindingKind/duplicateSettlement``.
    public var settledBy: SettledLineKey?

    public init(
        orderID: String, captureID: String?, amount: Int, currency: String? = nil, capturedAt: Date,
        source: LedgerSource, settledBy: SettledLineKey? = nil
    ) {
        self.orderID = orderID
        self.captureID = captureID
        self.amount = amount
        self.currency = currency
        self.capturedAt = capturedAt
        self.source = source
        self.settledBy = settledBy
    }

    public var key: CaptureKey {
        CaptureKey(orderID: orderID, captureID: SettledLine.given(captureID) ?? idlessKey(amount: amount, at: capturedAt))
    }
}

/// A refund the shop knows of.
public struct LedgerRefund: Codable, Sendable, Equatable {
    public var orderID: String
    public var refundID: String?
    /// Minor units, positive.
    public var amount: Int
    public var at: Date
    public var source: LedgerSource
    /// The settlement line that settled it, once one has.
    public var settledBy: SettledLineKey?

    public init(orderID: String, refundID: String?, amount: Int, at: Date, source: LedgerSource, settledBy: SettledLineKey? = nil) {
        self.orderID = orderID
        self.refundID = refundID
        self.amount = amount
        self.at = at
        self.source = source
        self.settledBy = settledBy
    }

    public var key: RefundKey {
        RefundKey(orderID: orderID, refundID: SettledLine.given(refundID) ?? idlessKey(amount: amount, at: at))
    }
}

/// An order as the ledger knows it: what was captured and refunded on it, by the daemon or seen on a read.
public struct LedgerOrder: Codable, Sendable, Equatable {
    public var orderID: String
    public var merchantReference: String?
    public var currency: String?
    public var captures: [LedgerCapture]
    public var refunds: [LedgerRefund]
    /// The order's disputes the daemon saw close lost: a REVERSAL of one of them is what the shop expects.
    public var lostDisputes: [LostDispute]

    public init(
        orderID: String, merchantReference: String? = nil, currency: String? = nil, captures: [LedgerCapture] = [],
        refunds: [LedgerRefund] = [], lostDisputes: [LostDispute] = []
    ) {
        self.orderID = orderID
        self.merchantReference = merchantReference
        self.currency = currency
        self.captures = captures
        self.refunds = refunds
        self.lostDisputes = lostDisputes
    }
}

/// A dispute the daemon saw Klarna close lost: its id and the disputed amount (in the settlement currency).
public struct LostDispute: Codable, Sendable, Equatable {
    public var id: String
    public var amount: Int?
    public var currency: String?

    public init(id: String, amount: Int?, currency: String?) {
        self.id = id
        self.amount = amount
        self.currency = currency
    }

    public init?(_ dispute: TrackedDispute) {
        guard dispute.state == .closed, dispute.outcome == "LOST" else { return nil }
        self.init(id: dispute.id, amount: dispute.amount, currency: dispute.currency)
    }
}
