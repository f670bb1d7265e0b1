import Foundation
import ReconcilerCore
import ReconcilerStore

extension SQLiteStore {
    public func prune(_ cutoffs: PruneCutoffs, limit: Int, dryRun: Bool) async throws -> PruneCounts {
        if dryRun { return try await read { db in try Self.prune(db, cutoffs, limit: -1, delete: false) } }
        return try await write { db in try Self.prune(db, cutoffs, limit: limit, delete: true) }
    }

    private static func prune(_ db: SQLiteConnection, _ cutoffs: PruneCutoffs, limit: Int, delete: Bool) throws -> PruneCounts {
        var counts = PruneCounts()
        let unsettled = RetentionPolicy.unsettledIntentStates.map { "'\($0.rawValue)'" }.joined(separator: ", ")
        if let before = cutoffs.closedPaymentsBefore {
            // A session no longer due, whose order (if any) is no longer due either, both unchanged since the
            // cutoff, every outcome delivered, no side effect unsettled.
            let payments = try db.query(
                """
                SELECT s.hpp_session_id, s.order_id FROM sessions s
                WHERE s.next_due IS NULL AND s.updated_at < ?1
                  AND NOT EXISTS (SELECT 1 FROM orders o WHERE (o.order_id = s.order_id OR o.hpp_session_id = s.hpp_session_id)
                                  AND (o.next_due IS NOT NULL OR o.updated_at >= ?1))
                  AND NOT EXISTS (SELECT 1 FROM outcomes u WHERE (u.hpp_session_id = s.hpp_session_id OR u.order_id = s.order_id)
                                  AND (u.outbox_written = 0 OR u.notified = 0))
                  AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.subject IN (s.hpp_session_id, s.order_id) AND i.state IN (\(unsettled)))
                LIMIT ?2
                """, [SQLValue(before), .integer(Int64(limit))])
            counts.payments = payments.count
            if delete {
                for row in payments {
                    let session = SQLValue(row.string(0)), order = SQLValue(row.string(1))
                    try db.query("DELETE FROM events WHERE hpp_session_id = ?1 OR order_id = ?2", [session, order])
                    try db.query("DELETE FROM outcomes WHERE hpp_session_id = ?1 OR order_id = ?2", [session, order])
                    try db.query("DELETE FROM intents WHERE subject IN (?1, ?2)", [session, order])
                    try db.query("DELETE FROM capture_requests WHERE order_id = ?1", [order])
                    try db.query("DELETE FROM orders WHERE order_id = ?1 OR hpp_session_id = ?2", [order, session])
                    try db.query("DELETE FROM sessions WHERE hpp_session_id = ?1", [session])
                }
            }
            counts.paymentRequests = try batch(
                db, "payment_requests", key: "payment_request_id", where: "next_due IS NULL AND updated_at < ?1", before, limit: limit, delete: delete)
            // Dedupe records: a repeat of a delivery this old is not a retry any more.
            counts.deliveries = try batch(db, "deliveries", key: "dedupe_key", where: "received_at < ?1", before, limit: limit, delete: delete)
        }
        if let before = cutoffs.eventsBefore {
            counts.events = try batch(db, "events", key: "id", where: "at < ?1", before, limit: limit, delete: delete)
        }
        if let before = cutoffs.rejectionsBefore {
            counts.rejections = try batch(db, "rejections", key: "id", where: "at < ?1", before, limit: limit, delete: delete)
        }
        return counts
    }

    /// Deletes (or counts) up to `limit` rows of `table` matching `condition`; `limit` -1 is all of them.
    private static func batch(
        _ db: SQLiteConnection, _ table: String, key: String, where condition: String, _ before: Date, limit: Int, delete: Bool
    ) throws -> Int {
        let arguments = [SQLValue(before), .integer(Int64(limit))]
        guard delete else {
            return try db.query("SELECT COUNT(*) FROM (SELECT 1 FROM \(table) WHERE \(condition) LIMIT ?2)", arguments).first?.int(0) ?? 0
        }
        try db.query("DELETE FROM \(table) WHERE \(key) IN (SELECT \(key) FROM \(table) WHERE \(condition) LIMIT ?2)", arguments)
        return db.changes
    }
}
