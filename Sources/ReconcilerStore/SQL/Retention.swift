import Foundation
import ReconcilerCore

/// Retention and the unknown notifications it keeps for a while, written once.
extension PruningStore where Self: StatementRunner {
    /// A dry run counts everything; a batch deletes at most `limit` of each kind (every one for a negative limit).
    public func prune(_ cutoffs: PruneCutoffs, limit: Int, dryRun: Bool) async throws -> PruneCounts {
        let cap: Int? = dryRun || limit < 0 ? nil : limit
        var parts: [(count: WritableKeyPath<PruneCounts, Int>, transaction: Transaction<Int>)] = []
        func add(_ count: WritableKeyPath<PruneCounts, Int>, _ transaction: Transaction<Int>) { parts.append((count, transaction)) }
        if let before = cutoffs.closedPaymentsBefore {
            add(\.payments, Self.closedPayments(before: before, cap: cap, dryRun: dryRun))
            add(
                \.paymentRequests,
                Self.batch("payment_requests", key: "payment_request_id", "next_due IS NULL AND updated_at < \(before)", cap, dryRun))
            // Dedupe records: a repeat of a delivery this old is not a retry any more.
            add(\.deliveries, Self.batch("deliveries", key: "dedupe_key", "received_at < \(before)", cap, dryRun))
        }
        if let before = cutoffs.eventsBefore { add(\.events, Self.batch("events", key: "id", "at < \(before)", cap, dryRun)) }
        if let before = cutoffs.rejectionsBefore { add(\.rejections, Self.batch("rejections", key: "id", "at < \(before)", cap, dryRun)) }
        if let before = cutoffs.unknownNotificationsBefore {
            add(
                \.unknownNotifications,
                Self.batch("deliveries", key: "dedupe_key", "\(RetentionStatements.unknownNotification) AND received_at < \(before)", cap, dryRun))
        }
        if let keep = cutoffs.unverifiedRowCap {
            // Of what the age rules leave (rows from their cutoff on, if any), the newest `keep` stay.
            let rejectionsFrom = cutoffs.rejectionsBefore, notificationsFrom = cutoffs.unknownNotificationsBefore
            add(
                \.rejections,
                Self.batch(
                    "rejections", key: "id", "(\(rejectionsFrom) IS NULL OR at >= \(rejectionsFrom))", cap, dryRun, beyond: keep,
                    newestFirst: "id DESC"))
            add(
                \.unknownNotifications,
                Self.batch(
                    "deliveries", key: "dedupe_key",
                    "\(RetentionStatements.unknownNotification) AND (\(notificationsFrom) IS NULL OR received_at >= \(notificationsFrom))",
                    cap, dryRun, beyond: keep, newestFirst: "received_at DESC, dedupe_key DESC"))
        }
        let counted = try await transact(Transaction(each: parts.map(\.transaction)))
        var counts = PruneCounts()
        for (part, count) in zip(parts, counted) { counts[keyPath: part.count] += count }
        return counts
    }

    /// A session no longer due, whose order (if any) is no longer due either, both unchanged since the cutoff, every
    /// outcome delivered, no side effect unsettled: deleted with everything of it. A payment a daemon works on now is
    /// skipped (PostgreSQL: its row is locked).
    private static func closedPayments(before: Date, cap: Int?, dryRun: Bool) -> Transaction<Int> {
        let unsettled = RetentionPolicy.unsettledIntentStates.map(\.rawValue)
        let limit: Statement = cap.map { "LIMIT \($0)" } ?? ""
        let lock: Statement = dryRun ? "" : "\(sqlite: "", postgres: "FOR UPDATE OF s SKIP LOCKED")"
        return .read(
            """
            SELECT s.hpp_session_id, s.order_id FROM sessions s
            WHERE s.next_due IS NULL AND s.updated_at < \(before)
              AND NOT EXISTS (SELECT 1 FROM orders o WHERE (o.order_id = s.order_id OR o.hpp_session_id = s.hpp_session_id)
                              AND (o.next_due IS NOT NULL OR o.updated_at >= \(before)))
              AND NOT EXISTS (SELECT 1 FROM outcomes u WHERE (u.hpp_session_id = s.hpp_session_id OR u.order_id = s.order_id)
                              AND (u.outbox_written = \(literal: false) OR u.notified = \(literal: false)))
              AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.subject IN (s.hpp_session_id, s.order_id) AND i.state \(anyOf: unsettled))
            \(limit) \(lock)
            """
        ) { payments in
            guard !dryRun else { return .answer(payments.count) }
            let deletes = payments.flatMap { row -> [Statement] in
                let session = row.string(0), order = row.string(1)
                return [
                    "DELETE FROM events WHERE hpp_session_id = \(session) OR order_id = \(order)",
                    "DELETE FROM outcomes WHERE hpp_session_id = \(session) OR order_id = \(order)",
                    "DELETE FROM intents WHERE subject IN (\(session), \(order))",
                    "DELETE FROM capture_requests WHERE order_id = \(order)",
                    "DELETE FROM orders WHERE order_id = \(order) OR hpp_session_id = \(session)",
                    "DELETE FROM sessions WHERE hpp_session_id = \(session)",
                ]
            }
            return .write(deletes, answering: payments.count)
        }
    }

    /// Deletes (or counts) up to `cap` rows of `table` where `condition` holds; with `beyond`, only those past the
    /// newest `beyond` of them in `newestFirst` order.
    private static func batch(
        _ table: String, key: String, _ condition: Statement, _ cap: Int?, _ dryRun: Bool, beyond keep: Int? = nil, newestFirst: String? = nil
    ) -> Transaction<Int> {
        let (table, key) = (Statement(stringLiteral: table), Statement(stringLiteral: key))
        let order: Statement = newestFirst.map { "ORDER BY \(Statement(stringLiteral: $0))" } ?? ""
        // SQLite takes an OFFSET only after a LIMIT (-1: none).
        let limit: Statement = cap.map { "LIMIT \($0)" } ?? (keep == nil ? "" : "\(sqlite: "LIMIT -1", postgres: "")")
        let offset: Statement = keep.map { "OFFSET \($0)" } ?? ""
        let chosen: Statement = "SELECT \(key) FROM \(table) WHERE \(condition) \(order) \(limit) \(offset)"
        if dryRun { return .read("SELECT count(*) FROM (\(chosen)) chosen") { .answer($0.first?.int(0) ?? 0) } }
        return .read("DELETE FROM \(table) WHERE \(key) IN (\(chosen)) RETURNING 1") { .answer($0.count) }
    }

}

enum RetentionStatements {
    /// A `deliveries` row that records an OM notification for an order this store does not know: its order id is its
    /// dedupe key (`om-notification:ORDER_ID:EVENT_TYPE`) less the prefix and the event type (letters and `_`, which
    /// `rtrim` takes off up to the last colon). The key range lets SQLite find them by the primary key's index; it is
    /// compared byte by byte on PostgreSQL too, whose default collation may ignore punctuation.
    static var unknownNotification: Statement {
        let prefix = RetentionPolicy.omNotificationKeyPrefix
        let withoutEventType: Statement = "rtrim(deliveries.dedupe_key, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ_')"
        let bytes = Statement.byteOrder
        return """
            deliveries.kind = \(RetentionPolicy.omNotificationKind)
            AND deliveries.dedupe_key\(bytes) >= \(prefix) AND deliveries.dedupe_key\(bytes) < \(String(prefix.dropLast()) + ";")
            AND NOT EXISTS (SELECT 1 FROM orders o
                            WHERE o.order_id = substr(\(withoutEventType), \(literal: prefix.count + 1), length(\(withoutEventType)) - \(literal: prefix.count + 1)))
            """
    }
}

extension WorkStore where Self: StatementRunner {
    /// Where Klarna may name an order it placed while the daemon lost the answer: filtered by what the store knows
    /// (tracked orders); what counts as a match is ``PlacedOrderSearch``'s.
    public func untrackedNotifiedOrders(since: Date, limit: Int) async throws -> [String] {
        try await rows(
            of: """
                SELECT dedupe_key FROM deliveries
                WHERE \(RetentionStatements.unknownNotification) AND received_at >= \(since) ORDER BY received_at DESC LIMIT \(limit)
                """
        ).compactMap { $0.string(0).flatMap { RetentionPolicy.notifiedOrderID(dedupeKey: $0) } }
    }
}
