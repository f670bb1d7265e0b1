import Foundation
import ReconcilerCore
import ReconcilerStore

/// The settlement ledger, the payouts recorded and their lines (migration 9). One daemon writes the file, so a payout
/// recorded twice can only be a repeat of this daemon's own sync: the payout's primary key tells.
extension SQLiteStore {
    /// The ledger's columns, in the order ``ledgerRow(_:)`` reads them.
    private static let ledgerColumns =
        "order_id, entry, entry_key, klarna_id, amount, currency, at, source, settled_reference, settled_ordinal"

    private static func ledgerRow(_ row: SQLRow) -> LedgerRow? {
        guard let orderID = row.string(0), let entry = row.string(1), let key = row.string(2), let at = row.date(6) else { return nil }
        return LedgerRow(
            orderID: orderID, entry: entry, key: key, klarnaID: row.string(3), amount: row.int(4) ?? 0, currency: row.string(5), at: at,
            source: row.string(7) ?? "", settledReference: row.string(8), settledOrdinal: row.int(9))
    }

    /// Inserts `row` unless its key is in the ledger already; returns whether it was new.
    @discardableResult
    func insertLedger(_ db: SQLiteConnection, _ row: LedgerRow) throws -> Bool {
        try !db.query(
            """
            INSERT INTO ledger (order_id, entry, entry_key, klarna_id, amount, currency, at, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (order_id, entry, entry_key) DO NOTHING RETURNING 1
            """,
            [
                .text(row.orderID), .text(row.entry.rawValue), .text(row.key), SQLValue(row.klarnaID), SQLValue(row.amount), SQLValue(row.currency),
                SQLValue(row.at), .text(row.source.rawValue),
            ]
        ).isEmpty
    }

    // MARK: SettlementStore

    /// By primary key, one order at a time: the orders of one payout, whatever the ledger's size.
    public func ledger(orderIDs: [String], account: AccountID) async throws -> [String: LedgerOrder] {
        var orders = try await ledgerEntries(orderIDs: orderIDs, account: account)
        for (orderID, lost) in try await lostDisputes(of: Array(orders.keys)) { orders[orderID]?.lostDisputes = lost }
        return orders
    }

    private func ledgerEntries(orderIDs: [String], account: AccountID) async throws -> [String: LedgerOrder] {
        try await read { db in
            var orders: [String: LedgerOrder] = [:]
            for orderID in Set(orderIDs) {
                let known = try db.query(
                    "SELECT merchant_reference, json_extract(data, '$.currency'), account FROM orders WHERE order_id = ?", [.text(orderID)]
                ).first
                // Another account's order is not this account's to match.
                if let known, known.string(2) != account.rawValue { continue }
                let entries = try db.query(
                    "SELECT \(Self.ledgerColumns) FROM ledger WHERE order_id = ? ORDER BY at, entry_key", [.text(orderID)]
                ).compactMap(Self.ledgerRow)
                guard known != nil || !entries.isEmpty else { continue }
                var order = LedgerOrder(orderID: orderID, merchantReference: known?.string(0), currency: known?.string(1))
                for entry in entries { entry.add(to: &order) }
                orders[orderID] = order
            }
            return orders
        }
    }

    public func record(_ reconciliation: PayoutReconciliation, outcomes: [Outcome], at: Date) async throws -> Bool {
        let payout = reconciliation.payout
        let data = try json(reconciliation)
        let lines = try reconciliation.lines.map { ($0.line, try json($0)) }
        let outcomes = try outcomes.map { ($0, try json($0)) }
        let settled = LedgerSettlement.all(in: reconciliation)
        return try await write { db in
            // Recorded already: the payout stays as it is and nothing else is written.
            let fresh = try !db.query(
                """
                INSERT INTO payouts (payment_reference, payout_date, currency, recorded_at, finding_count, data, account)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (payment_reference) DO NOTHING RETURNING 1
                """,
                [
                    .text(payout.paymentReference), SQLValue(payout.payoutDate), .text(payout.currency), SQLValue(at),
                    SQLValue(reconciliation.findings.count), .text(data), .text(reconciliation.account.rawValue),
                ]
            ).isEmpty
            guard fresh else { return false }
            for (line, data) in lines {
                try db.query(
                    "INSERT INTO settlement_lines (payment_reference, ordinal, order_id, data) VALUES (?, ?, ?, ?)",
                    [.text(payout.paymentReference), SQLValue(line.ordinal), SQLValue(line.orderIDGiven), .text(data)])
            }
            for settlement in settled {
                let row: [SQLValue] = [.text(settlement.orderID), .text(settlement.entry.rawValue), .text(settlement.key)]
                let changed = try !db.query(
                    """
                    UPDATE ledger SET settled_reference = ?, settled_ordinal = ?
                    WHERE order_id = ? AND entry = ? AND entry_key = ? AND settled_reference IS NULL
                    RETURNING 1
                    """,
                    [.text(settlement.line.paymentReference), SQLValue(settlement.line.ordinal)] + row
                ).isEmpty
                // Unsettled when matched, settled now: the match is stale (the whole transaction is rolled back).
                if !changed,
                    try !db.query(
                        "SELECT 1 FROM ledger WHERE order_id = ? AND entry = ? AND entry_key = ? AND settled_reference IS NOT NULL", row
                    ).isEmpty
                {
                    throw StaleSettlementMatch(paymentReference: payout.paymentReference, settles: "\(settlement.orderID)/\(settlement.key)")
                }
            }
            for (outcome, data) in outcomes { try self.insertOutcome(db, outcome, data: data, at: at) }
            return true
        }
    }

    public func recordDrift(_ entries: [DriftEntry], at: Date) async throws -> Int {
        let drift = try entries.map { (LedgerRow($0.entry), $0.outcome, try json($0.outcome)) }
        return try await write { db in
            var recorded = 0
            for (row, outcome, data) in drift {
                guard try self.insertLedger(db, row) else { continue }
                try self.insertOutcome(db, outcome, data: data, at: at)
                recorded += 1
            }
            return recorded
        }
    }

    public func flagUnsettled(_ flags: [UnsettledFlag], at: Date) async throws -> Int {
        let flags = try flags.map { ($0.key, $0.outcome, try json($0.outcome)) }
        return try await write { db in
            var flagged = 0
            for (key, outcome, data) in flags {
                let changed = try !db.query(
                    """
                    UPDATE ledger SET flagged_at = ?
                    WHERE order_id = ? AND entry = 'capture' AND entry_key = ? AND flagged_at IS NULL AND settled_reference IS NULL
                    RETURNING 1
                    """,
                    [SQLValue(at), .text(key.orderID), .text(key.captureID)]
                ).isEmpty
                guard changed else { continue }
                try self.insertOutcome(db, outcome, data: data, at: at)
                flagged += 1
            }
            return flagged
        }
    }

    // MARK: SettlementReports

}
