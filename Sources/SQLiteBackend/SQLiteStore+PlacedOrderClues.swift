import Foundation
import ReconcilerCore
import ReconcilerStore

/// Where Klarna may name an order it placed while the daemon lost the answer: reads only, filtered by what the store
/// knows (tracked orders); what counts as a match is ``PlacedOrderSearch``'s.
extension SQLiteStore {
    public func untrackedNotifiedOrders(since: Date, limit: Int) async throws -> [String] {
        try await read { db in
            try db.query(
                "SELECT dedupe_key FROM deliveries WHERE \(Self.unknownNotification) AND received_at >= ? ORDER BY received_at DESC LIMIT ?",
                [SQLValue(since), SQLValue(limit)]
            ).compactMap { $0.string(0).flatMap { RetentionPolicy.notifiedOrderID(dedupeKey: $0) } }
        }
    }

    public func settlementLines(merchantReference: String, account: AccountID, limit: Int) async throws -> [SettledLine] {
        try await read { db in
            try db.query(
                """
                SELECT l.data FROM settlement_lines l JOIN payouts p ON p.payment_reference = l.payment_reference
                WHERE json_extract(l.data, '$.line.merchantReference') = ? AND p.account = ? ORDER BY p.payout_date DESC, l.ordinal LIMIT ?
                """, [.text(merchantReference), .text(account.rawValue), SQLValue(limit)]
            ).map { try self.decode(LineReconciliation.self, $0.string(0)).line }
        }
    }
}
