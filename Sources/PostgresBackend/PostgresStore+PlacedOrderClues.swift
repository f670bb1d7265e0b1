import Foundation
import PostgresNIO
import ReconcilerCore
import ReconcilerStore

/// Where Klarna may name an order it placed while the daemon lost the answer: reads only, filtered by what the store
/// knows (tracked orders); what counts as a match is ``PlacedOrderSearch``'s.
extension PostgresStore {
    public func untrackedNotifiedOrders(since: Date, limit: Int) async throws -> [String] {
        try await rows(
            "SELECT dedupe_key FROM deliveries WHERE \(unescaped: Self.unknownNotification) AND received_at >= \(since) ORDER BY received_at DESC LIMIT \(limit)"
        ).compactMap { RetentionPolicy.notifiedOrderID(dedupeKey: try $0.decode(String.self)) }
    }
}
