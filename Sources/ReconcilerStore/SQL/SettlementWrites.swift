import Foundation
import ReconcilerCore

/// The settlement ledger's writes and its read by order, written once. Two daemons recording one payout at once
/// (PostgreSQL): the second's insert of the payout waits for the first's commit, finds its row and writes nothing. A
/// row is settled, flagged or added only where that has not happened yet, checked again after waiting for a concurrent
/// writer's row lock, so each finding's outcome is written once.
extension SettlementStore where Self: StatementRunner {
    public func ledger(orderIDs: [String], account: AccountID) async throws -> [String: LedgerOrder] {
        var orders: [String: LedgerOrder] = [:]
        // Another account's order is not this account's to match.
        var others: Set<String> = []
        for row in try await rows(
            of: """
                SELECT order_id, merchant_reference, \(json: "data", StoredJSON.orderCurrency), account FROM orders
                WHERE order_id \(anyOf: orderIDs)
                """)
        {
            guard let orderID = row.string(0) else { continue }
            guard row.string(3) == account.rawValue else {
                others.insert(orderID)
                continue
            }
            orders[orderID] = LedgerOrder(orderID: orderID, merchantReference: row.string(1), currency: row.string(2))
        }
        // An order pruned since keeps its ledger rows: answered from them alone.
        for row in try await rows(of: "SELECT \(LedgerRow.columns) FROM ledger WHERE order_id \(anyOf: orderIDs) ORDER BY at, entry_key") {
            guard let entry = LedgerRow(row: row), !others.contains(entry.orderID) else { continue }
            entry.add(to: &orders[entry.orderID, default: LedgerOrder(orderID: entry.orderID)])
        }
        for (orderID, lost) in try await lostDisputes(of: Array(orders.keys)) { orders[orderID]?.lostDisputes = lost }
        return orders
    }

    public func record(_ reconciliation: PayoutReconciliation, outcomes: [Outcome], at: Date) async throws -> Bool {
        let payout = reconciliation.payout
        let reference = payout.paymentReference
        let rows = try reconciliation.lines.map { line -> Statement in
            "(\(reference), \(line.line.ordinal), \(line.line.orderIDGiven), \(try StoredJSON.encode(line)))"
        }
        // In statements of 256 lines, then of the halves down to one for the rest: 1,024 values at most (within both
        // stores' limits on parameters), and no more than nine texts for a driver to prepare and keep, whatever the
        // payout's size.
        var inserts: [Statement] = []
        var rest = rows[...]
        var size = 256
        while !rest.isEmpty {
            while size > rest.count { size /= 2 }
            inserts.append(
                "INSERT INTO settlement_lines (payment_reference, ordinal, order_id, data) VALUES \(Statement.joined(Array(rest.prefix(size))))")
            rest = rest.dropFirst(size)
        }
        let lines = inserts
        let settles = LedgerSettlement.all(in: reconciliation).map { settlement -> Transaction<Void> in
            let row: Statement = "order_id = \(settlement.orderID) AND entry = \(settlement.entry.rawValue) AND entry_key = \(settlement.key)"
            return .read(
                """
                UPDATE ledger SET settled_reference = \(settlement.line.paymentReference), settled_ordinal = \(settlement.line.ordinal)
                WHERE \(row) AND settled_reference IS NULL RETURNING 1
                """
            ) { changed in
                guard changed.isEmpty else { return .answer(()) }
                // Unsettled when matched, settled since by another daemon's payout: the match is stale (rolled back).
                return .read("SELECT 1 FROM ledger WHERE \(row) AND settled_reference IS NOT NULL") { stale in
                    guard stale.isEmpty else {
                        throw StaleSettlementMatch(paymentReference: reference, settles: "\(settlement.orderID)/\(settlement.key)")
                    }
                    return .answer(())
                }
            }
        }
        let recordOutcomes = try outcomes.map { try WorkWrites.outcome($0, at: at) }
        return try await transact(
            .read(
                """
                INSERT INTO payouts (payment_reference, payout_date, currency, recorded_at, finding_count, data, account)
                VALUES (\(reference), \(payout.payoutDate), \(payout.currency), \(at), \(reconciliation.findings.count),
                  \(try StoredJSON.encode(reconciliation)), \(reconciliation.account.rawValue))
                ON CONFLICT (payment_reference) DO NOTHING RETURNING 1
                """
            ) { fresh in
                // Recorded already: the payout stays as it is and nothing else is written.
                guard !fresh.isEmpty else { return .answer(false) }
                return .run(lines) { _ in Transaction(each: settles).then { _ in .write(recordOutcomes, answering: true) } }
            })
    }

    public func recordDrift(_ entries: [DriftEntry], at: Date) async throws -> Int {
        let drift = try entries.map { (LedgerRow($0.entry).insert, try WorkWrites.outcome($0.outcome, at: at)) }
        return try await transact(Self.each(drift))
    }

    public func flagUnsettled(_ flags: [UnsettledFlag], at: Date) async throws -> Int {
        let flags = try flags.map { flag -> (Statement, Statement) in
            let flagging: Statement = """
                UPDATE ledger SET flagged_at = \(at)
                WHERE order_id = \(flag.key.orderID) AND entry = 'capture' AND entry_key = \(flag.key.captureID)
                  AND flagged_at IS NULL AND settled_reference IS NULL
                RETURNING 1
                """
            return (flagging, try WorkWrites.outcome(flag.outcome, at: at))
        }
        return try await transact(Self.each(flags))
    }

    /// Each change, and its outcome only where it changed a row; how many did.
    private static func each(_ changes: [(change: Statement, outcome: Statement)]) -> Transaction<Int> {
        Transaction<[Int]>(each: changes.map { change, outcome in .read(change) { $0.isEmpty ? .answer(0) : .write([outcome], answering: 1) } })
            .then { .answer($0.reduce(0, +)) }
    }
}
