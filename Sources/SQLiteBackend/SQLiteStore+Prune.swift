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
                db, "payment_requests", key: "payment_request_id", where: "next_due IS NULL AND updated_at < ?1", before, limit: limit, delete: delete
            )
            // Dedupe records: a repeat of a delivery this old is not a retry any more.
            counts.deliveries = try batch(db, "deliveries", key: "dedupe_key", where: "received_at < ?1", before, limit: limit, delete: delete)
        }
        if let before = cutoffs.eventsBefore {
            counts.events = try batch(db, "events", key: "id", where: "at < ?1", before, limit: limit, delete: delete)
        }
        if let before = cutoffs.rejectionsBefore {
            counts.rejections = try batch(db, "rejections", key: "id", where: "at < ?1", before, limit: limit, delete: delete)
        }
        if let before = cutoffs.unknownNotificationsBefore {
            counts.unknownNotifications = try batch(
                db, "deliveries", key: "dedupe_key", where: "\(unknownNotification) AND received_at < ?1", before, limit: limit, delete: delete)
        }
        if let cap = cutoffs.unverifiedRowCap {
            // Of what the age rules leave (`?1`: their cutoff, if any), the newest `cap` stay.
            counts.rejections += try remove(
                db, "rejections", key: "id", chosen: "SELECT id FROM rejections WHERE (?1 IS NULL OR at >= ?1) ORDER BY id DESC",
                cutoffs.rejectionsBefore, offset: cap, limit: limit, delete: delete)
            counts.unknownNotifications += try remove(
                db, "deliveries", key: "dedupe_key",
                chosen: """
                    SELECT dedupe_key FROM deliveries WHERE \(unknownNotification) AND (?1 IS NULL OR received_at >= ?1)
                    ORDER BY received_at DESC, dedupe_key DESC
                    """,
                cutoffs.unknownNotificationsBefore, offset: cap, limit: limit, delete: delete)
        }
        return counts
    }

    /// A `deliveries` row that records an OM notification for an order this store does not know: its order id is its
    /// dedupe key (`om-notification:ORDER_ID:EVENT_TYPE`) less the prefix and the event type (letters and `_`, which
    /// `rtrim` takes off up to the last colon). The key range lets SQLite find them by the primary key's index.
    static let unknownNotification: String = {
        let prefix = RetentionPolicy.omNotificationKeyPrefix
        let eventType = "'ABCDEFGHIJKLMNOPQRSTUVWXYZ_'"
        let withoutEventType = "rtrim(deliveries.dedupe_key, \(eventType))"
        return """
            deliveries.kind = '\(RetentionPolicy.omNotificationKind)'
            AND deliveries.dedupe_key >= '\(prefix)' AND deliveries.dedupe_key < '\(prefix.dropLast());'
            AND NOT EXISTS (SELECT 1 FROM orders o
                            WHERE o.order_id = substr(\(withoutEventType), \(prefix.count + 1), length(\(withoutEventType)) - \(prefix.count + 1)))
            """
    }()

    /// Deletes (or counts) up to `limit` rows of `table` matching `condition` (`?1` is `before`); `limit` -1 is all.
    private static func batch(
        _ db: SQLiteConnection, _ table: String, key: String, where condition: String, _ before: Date, limit: Int, delete: Bool
    ) throws -> Int {
        try remove(db, table, key: key, chosen: "SELECT \(key) FROM \(table) WHERE \(condition)", before, offset: 0, limit: limit, delete: delete)
    }

    /// Deletes (or counts) up to `limit` rows of `table` (-1: all) whose `key` the query `chosen` selects after its
    /// first `offset` rows; `?1` in `chosen` is `date`.
    private static func remove(
        _ db: SQLiteConnection, _ table: String, key: String, chosen: String, _ date: Date?, offset: Int, limit: Int, delete: Bool
    ) throws -> Int {
        let arguments = [SQLValue(date), .integer(Int64(limit)), .integer(Int64(offset))]
        let selected = "\(chosen) LIMIT ?2 OFFSET ?3"
        guard delete else { return try db.query("SELECT COUNT(*) FROM (\(selected))", arguments).first?.int(0) ?? 0 }
        try db.query("DELETE FROM \(table) WHERE \(key) IN (\(selected))", arguments)
        return db.changes
    }
}
