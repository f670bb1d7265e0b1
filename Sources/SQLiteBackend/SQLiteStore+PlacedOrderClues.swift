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
}
