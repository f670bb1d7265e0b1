import Foundation
import ReconcilerCore

// Settlement reconciliation's two roles: the daemon's settlement service (sync, match, flag) and the operator's
// reports (`klarna-reconciler settlements`, `show`). The ledger is what the shop did: the captures the daemon
// confirmed (written with the step that confirmed them, ``Change/ledgerCaptures``) and the captures and refunds seen
// on an order read that the daemon did not make (drift, ``SettlementStore/recordDrift(_:at:)``).

/// A capture or refund seen on a read of an order that the ledger does not hold: done outside the daemon. Recorded
/// with its outcome, once.
public struct DriftEntry: Sendable, Equatable {
    public enum Entry: Sendable, Equatable {
        case capture(LedgerCapture)
        case refund(LedgerRefund)
    }

    public var entry: Entry
    /// Written in the same transaction as the entry, and only when the entry is new.
    public var outcome: Outcome

    public init(_ entry: Entry, outcome: Outcome) {
        self.entry = entry
        self.outcome = outcome
    }
}

/// An overdue capture to flag, with its outcome.
public struct UnsettledFlag: Sendable, Equatable {
    public var key: CaptureKey
    /// Written in the same transaction as the flag, and only when the capture was not flagged or settled yet.
    public var outcome: Outcome

    public init(key: CaptureKey, outcome: Outcome) {
        self.key = key
        self.outcome = outcome
    }
}

/// What the settlement service needs.
public protocol SettlementStore: Sendable {
    /// Which of `references` are recorded already.
    func recordedPayouts(among references: [String]) async throws -> Set<String>
    /// What the shop knows of these orders in `account`: captures (the daemon's and observed ones), observed refunds,
    /// each with the line that settled it. An order id the store never tracked, or tracks under another account, is
    /// absent from the answer (an orphan's); one whose payment retention pruned since is answered from its ledger
    /// rows alone (no merchant reference or currency).
    func ledger(orderIDs: [String], account: AccountID) async throws -> [String: LedgerOrder]
    /// Records one payout's reconciliation, under its ``PayoutReconciliation/account``, in one transaction: the payout, its lines, `settledBy` on the captures
    /// and refunds it settled (only where none is recorded: a later SALE for a settled capture is a duplicate, not
    /// its new settlement) and `outcomes`. A payout recorded already (another daemon, a sync before a restart) is
    /// left as it is, nothing is written and the answer is false.
    func record(_ reconciliation: PayoutReconciliation, outcomes: [Outcome], at: Date) async throws -> Bool
    /// Records the entries not in the ledger yet, each with its outcome, in one transaction; returns how many were new.
    func recordDrift(_ entries: [DriftEntry], at: Date) async throws -> Int
    /// Captures of `account` neither settled nor flagged, captured from `capturedFrom` up to and including
    /// `capturedBefore`, oldest first, at most `limit`. A capture whose order was pruned is every account's.
    func unsettledCaptures(account: AccountID, capturedFrom: Date, capturedBefore: Date, limit: Int) async throws -> [LedgerCapture]
    /// Flags the captures not flagged or settled yet, each with its outcome, in one transaction; returns how many.
    func flagUnsettled(_ flags: [UnsettledFlag], at: Date) async throws -> Int
    /// The numbers `/metrics` shows for `account`: its captures flagged unsettled and still unsettled, and its payouts.
    func settlementHealth(account: AccountID) async throws -> SettlementHealth
    /// Which of `orderIDs` an operator holds: a held payment makes no Klarna call, a settlement read included.
    func heldOrders(among orderIDs: [String]) async throws -> Set<String>
}

extension SettlementStore where Self: OperatorStore {
    public func heldOrders(among orderIDs: [String]) async throws -> Set<String> {
        let held = try await holds(orderIDs.map { WorkKey.order($0) })
        return Set(orderIDs.filter { held[.order($0)] != nil })
    }
}

/// What `/metrics` and `status` show of settlements.
public struct SettlementHealth: Sendable, Equatable {
    /// Captures flagged as not settled in time that no payout has settled since.
    public var unsettledFlagged: Int
    /// Payouts recorded.
    public var payouts: Int
    public var newestPayoutDate: Date?
    /// The oldest payout recorded: captures from then on can only have been settled by payouts the syncs listed.
    public var oldestPayoutDate: Date?

    public init(unsettledFlagged: Int, payouts: Int, newestPayoutDate: Date?, oldestPayoutDate: Date? = nil) {
        self.unsettledFlagged = unsettledFlagged
        self.payouts = payouts
        self.newestPayoutDate = newestPayoutDate
        self.oldestPayoutDate = oldestPayoutDate
    }
}

/// What the operator commands read: the payouts recorded, and the settlement lines of a payment.
public protocol SettlementReports: Sendable {
    /// Recorded payouts with `payoutDate` at or after `since` (all when nil), or the one `paymentReference` names, of
    /// `account` (every account's when nil), oldest first.
    func payouts(since: Date?, paymentReference: String?, account: AccountID?) async throws -> [PayoutReconciliation]
    /// Every recorded settlement line that names one of `orderIDs`, by payout date then ordinal.
    func settlementLines(orderIDs: [String]) async throws -> [LineReconciliation]
}
