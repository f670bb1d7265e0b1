import Foundation
import PostgresNIO
import ReconcilerCore
import ReconcilerStore

/// The settlement ledger, the payouts recorded and their lines (schema step 4), shared by every daemon. Two daemons
/// recording one payout at once: the second's insert of the payout waits for the first's commit, finds its row and
/// writes nothing. A row is settled, flagged or added only where that has not happened yet, checked again after
/// waiting for a concurrent writer's row lock, so each finding's outcome is written once.
extension PostgresStore {
    /// The ledger's columns, in the order ``ledgerRow(_:)`` reads them.
    private static let ledgerColumns =
        "order_id, entry, entry_key, klarna_id, amount, currency, at, source, settled_reference, settled_ordinal"

    private static func ledgerRow(_ row: PostgresRow) throws -> LedgerRow? {
        let (orderID, entry, key, klarnaID, amount, currency, at, source, reference, ordinal) =
            try row.decode((String, String, String, String?, Int, String?, Date, String, String?, Int?).self)
        return LedgerRow(
            orderID: orderID, entry: entry, key: key, klarnaID: klarnaID, amount: amount, currency: currency, at: at, source: source,
            settledReference: reference, settledOrdinal: ordinal)
    }

    /// Inserts `row` unless its key is in the ledger already; returns whether it was new.
    @discardableResult
    func insertLedger(_ db: PostgresConnection, _ row: LedgerRow) async throws -> Bool {
        try await !rows(
            db,
            """
            INSERT INTO ledger (order_id, entry, entry_key, klarna_id, amount, currency, at, source)
            VALUES (\(row.orderID), \(row.entry.rawValue), \(row.key), \(row.klarnaID), \(row.amount), \(row.currency), \(row.at),
              \(row.source.rawValue))
            ON CONFLICT (order_id, entry, entry_key) DO NOTHING RETURNING 1
            """
        ).isEmpty
    }

    // MARK: SettlementStore

    public func ledger(orderIDs: [String], account: AccountID) async throws -> [String: LedgerOrder] {
        var orders: [String: LedgerOrder] = [:]
        // Another account's order is not this account's to match.
        var others: Set<String> = []
        for row in try await rows(
            "SELECT order_id, merchant_reference, data::jsonb ->> 'currency', account FROM orders WHERE order_id = ANY(\(orderIDs))")
        {
            let (orderID, reference, currency, owner) = try row.decode((String, String?, String?, String).self)
            guard owner == account.rawValue else {
                others.insert(orderID)
                continue
            }
            orders[orderID] = LedgerOrder(orderID: orderID, merchantReference: reference, currency: currency)
        }
        for row in try await rows(
            "SELECT \(unescaped: Self.ledgerColumns) FROM ledger WHERE order_id = ANY(\(orderIDs)) ORDER BY at, entry_key")
        {
            guard let entry = try Self.ledgerRow(row), !others.contains(entry.orderID) else { continue }
            entry.add(to: &orders[entry.orderID, default: LedgerOrder(orderID: entry.orderID)])
        }
        for (orderID, lost) in try await lostDisputes(of: orderIDs) { orders[orderID]?.lostDisputes = lost }
        return orders
    }

    public func record(_ reconciliation: PayoutReconciliation, outcomes: [Outcome], at: Date) async throws -> Bool {
        let payout = reconciliation.payout
        let data = try json(reconciliation)
        let ordinals = reconciliation.lines.map(\.line.ordinal)
        // Empty for a line without an order id (an array of optionals cannot be bound), NULL again in the row.
        let lineOrders = reconciliation.lines.map { $0.line.orderIDGiven ?? "" }
        let lineData = try reconciliation.lines.map { try json($0) }
        let outcomes = try outcomes.map { ($0, try json($0)) }
        let settled = LedgerSettlement.all(in: reconciliation)
        return try await transaction { [self] db in
            let fresh = try await !rows(
                db,
                """
                INSERT INTO payouts (payment_reference, payout_date, currency, recorded_at, finding_count, data, account)
                VALUES (\(payout.paymentReference), \(payout.payoutDate), \(payout.currency), \(at), \(reconciliation.findings.count), \(data),
                  \(reconciliation.account.rawValue))
                ON CONFLICT (payment_reference) DO NOTHING RETURNING 1
                """
            ).isEmpty
            // Recorded already: the payout stays as it is and nothing else is written.
            guard fresh else { return false }
            try await db.rows(
                """
                INSERT INTO settlement_lines (payment_reference, ordinal, order_id, data)
                SELECT \(payout.paymentReference), given.ordinal, nullif(given.order_id, ''), given.data
                FROM unnest(\(ordinals)::bigint[], \(lineOrders)::text[], \(lineData)::text[]) AS given(ordinal, order_id, data)
                """, logger: logger)
            for settlement in settled {
                let changed = try await !rows(
                    db,
                    """
                    UPDATE ledger SET settled_reference = \(settlement.line.paymentReference), settled_ordinal = \(settlement.line.ordinal)
                    WHERE order_id = \(settlement.orderID) AND entry = \(settlement.entry.rawValue) AND entry_key = \(settlement.key)
                      AND settled_reference IS NULL
                    RETURNING 1
                    """
                ).isEmpty
                // Unsettled when matched, settled now by another daemon's payout: the match is stale (rolled back).
                if !changed,
                    try await !rows(
                        db,
                        """
                        SELECT 1 FROM ledger WHERE order_id = \(settlement.orderID) AND entry = \(settlement.entry.rawValue)
                          AND entry_key = \(settlement.key) AND settled_reference IS NOT NULL
                        """
                    ).isEmpty
                {
                    throw StaleSettlementMatch(paymentReference: payout.paymentReference, settles: "\(settlement.orderID)/\(settlement.key)")
                }
            }
            for (outcome, data) in outcomes { try await insertOutcome(db, outcome, data: data, at: at) }
            return true
        }
    }

    public func recordDrift(_ entries: [DriftEntry], at: Date) async throws -> Int {
        let drift = try entries.map { (LedgerRow($0.entry), $0.outcome, try json($0.outcome)) }
        return try await transaction { [self] db in
            var recorded = 0
            for (row, outcome, data) in drift {
                guard try await insertLedger(db, row) else { continue }
                try await insertOutcome(db, outcome, data: data, at: at)
                recorded += 1
            }
            return recorded
        }
    }

    public func flagUnsettled(_ flags: [UnsettledFlag], at: Date) async throws -> Int {
        let flags = try flags.map { ($0.key, $0.outcome, try json($0.outcome)) }
        return try await transaction { [self] db in
            var flagged = 0
            for (key, outcome, data) in flags {
                let changed = try await !rows(
                    db,
                    """
                    UPDATE ledger SET flagged_at = \(at)
                    WHERE order_id = \(key.orderID) AND entry = 'capture' AND entry_key = \(key.captureID)
                      AND flagged_at IS NULL AND settled_reference IS NULL
                    RETURNING 1
                    """
                ).isEmpty
                guard changed else { continue }
                try await insertOutcome(db, outcome, data: data, at: at)
                flagged += 1
            }
            return flagged
        }
    }

    // MARK: SettlementReports

}
