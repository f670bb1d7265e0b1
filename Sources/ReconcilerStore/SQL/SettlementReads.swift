import Foundation
import ReconcilerCore

extension LedgerRow {
    /// The ledger's columns, in the order ``init(row:)`` reads them.
    static let columns: Statement = "order_id, entry, entry_key, klarna_id, amount, currency, at, source, settled_reference, settled_ordinal"

    /// The row, unless the ledger has its order, kind and key already; returns a row only when it inserted one.
    public var insert: Statement {
        """
        INSERT INTO ledger (order_id, entry, entry_key, klarna_id, amount, currency, at, source)
        VALUES (\(orderID), \(entry.rawValue), \(key), \(klarnaID), \(amount), \(currency), \(at), \(source.rawValue))
        ON CONFLICT (order_id, entry, entry_key) DO NOTHING RETURNING 1
        """
    }

    /// A row of ``columns`` as both stores read it back; nil for an entry kind this binary does not know.
    init?(row: any StatementRow) {
        guard let orderID = row.string(0), let entry = row.string(1), let key = row.string(2), let at = row.date(6) else { return nil }
        self.init(
            orderID: orderID, entry: entry, key: key, klarnaID: row.string(3), amount: row.int(4) ?? 0, currency: row.string(5), at: at,
            source: row.string(7) ?? "", settledReference: row.string(8), settledOrdinal: row.int(9))
    }
}

/// The settlement ledger's reads, written once for both stores.
extension SettlementStore where Self: StatementRunner {
    public func recordedPayouts(among references: [String]) async throws -> Set<String> {
        // One list parameter, looked up by primary key, whatever its length.
        Set(try await rows(of: "SELECT payment_reference FROM payouts WHERE payment_reference \(anyOf: references)").compactMap { $0.string(0) })
    }

    public func unsettledCaptures(account: AccountID, capturedFrom: Date, capturedBefore: Date, limit: Int) async throws -> [LedgerCapture] {
        try await rows(
            of: """
                SELECT \(LedgerRow.columns) FROM ledger
                WHERE entry = \(LedgerRow.Entry.capture.rawValue) AND settled_reference IS NULL AND flagged_at IS NULL
                  AND at >= \(capturedFrom) AND at <= \(capturedBefore) AND \(Self.ledgerOf(account))
                ORDER BY at, order_id, entry_key LIMIT \(limit)
                """
        ).compactMap { LedgerRow(row: $0)?.capture }
    }

    public func settlementHealth(account: AccountID) async throws -> SettlementHealth {
        let id = account.rawValue
        let row = try await rows(
            of: """
                SELECT (SELECT count(*) FROM ledger WHERE flagged_at IS NOT NULL AND settled_reference IS NULL AND \(Self.ledgerOf(account))),
                  (SELECT count(*) FROM payouts WHERE account = \(id)), (SELECT max(payout_date) FROM payouts WHERE account = \(id)),
                  (SELECT min(payout_date) FROM payouts WHERE account = \(id))
                """
        ).first
        return SettlementHealth(
            unsettledFlagged: row?.int(0) ?? 0, payouts: row?.int(1) ?? 0, newestPayoutDate: row?.date(2), oldestPayoutDate: row?.date(3))
    }

    /// Whether the ledger row's order (`ledger.order_id`) is not tracked under another account than `account`: a
    /// pruned order's rows are every account's.
    static func ledgerOf(_ account: AccountID) -> Statement {
        "NOT EXISTS (SELECT 1 FROM orders o WHERE o.order_id = ledger.order_id AND o.account <> \(account.rawValue))"
    }
}

/// The settlement reports' reads, written once for both stores.
extension SettlementReports where Self: StatementRunner {
    public func payouts(since: Date?, paymentReference: String?, account: AccountID?) async throws -> [PayoutReconciliation] {
        return try await rows(
            of: """
                SELECT data, account FROM payouts
                WHERE (\(since) IS NULL OR payout_date >= \(since)) AND (\(paymentReference) IS NULL OR payment_reference = \(paymentReference))
                  AND (\(account?.rawValue) IS NULL OR account = \(account?.rawValue))
                ORDER BY payout_date, payment_reference
                """
        ).map { row in
            var payout = try row.decoded(PayoutReconciliation.self)
            payout.account = AccountID(rawValue: row.string(1) ?? "") ?? .default
            return payout
        }
    }
}

extension WorkQueue where Self: StatementRunner {
    public func keysWithPendingOperatorRequests() async throws -> [WorkKey] {
        try await rows(of: "SELECT work_key FROM operator_requests WHERE state = 'pending' GROUP BY work_key ORDER BY work_key\(Statement.byteOrder)")
            .compactMap {
                $0.string(0).flatMap(WorkKey.init)
            }
    }
}

extension IngestStore where Self: StatementRunner {
    public func sessionAccount(hppSessionID: String?, kpSessionID: String?) async throws -> AccountID? {
        try await rows(
            of: """
                SELECT account FROM sessions WHERE hpp_session_id = \(hppSessionID) OR (\(hppSessionID) IS NULL AND kp_session_id = \(kpSessionID))
                LIMIT 1
                """
        ).first.map { AccountID(rawValue: $0.string(0) ?? "") ?? .default }
    }
}
