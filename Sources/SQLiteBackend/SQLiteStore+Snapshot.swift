import Foundation
import ReconcilerCore
import ReconcilerStore

extension SQLiteStore {
    /// Counts over open work only (partial indexes on `next_due IS NOT NULL`) and the undelivered outcomes' partial
    /// index: the cost follows what is open, not the history the store keeps.
    public func stateSnapshot() async throws -> StateSnapshot {
        try await read { db in
            func counts(_ sql: String) throws -> [String: Int] {
                Dictionary(uniqueKeysWithValues: try db.query(sql).map { ($0.string(0) ?? "?", $0.int(1) ?? 0) })
            }
            var snapshot = StateSnapshot()
            // One scan of each covering partial index (migration 8) gives the counts by phase, the oldest and the
            // next deadline together; the rows' JSON is never read.
            func open(_ table: String, _ index: String, since: String) throws -> [String: Int] {
                var counts: [String: Int] = [:]
                for row in try db.query(
                    "SELECT phase, COUNT(*), MIN(\(since)), MIN(deadline) FROM \(table) INDEXED BY \(index) WHERE next_due IS NOT NULL GROUP BY phase"
                ) {
                    counts[row.string(0) ?? "?"] = row.int(1) ?? 0
                    if let oldest = row.date(2) { snapshot.oldestOpenSince = min(snapshot.oldestOpenSince ?? oldest, oldest) }
                    if let deadline = row.date(3) { snapshot.nextDeadline = min(snapshot.nextDeadline ?? deadline, deadline) }
                }
                return counts
            }
            snapshot.openSessionsByPhase = try open("sessions", "sessions_open", since: "tracked_at")
            snapshot.openOrdersByPhase = try open("orders", "orders_open", since: "created_at")
            snapshot.unfinishedIntentsByState = try counts(
                "SELECT state, COUNT(*) FROM intents WHERE state IN ('intended', 'sent', 'ambiguous') GROUP BY state")
            snapshot.outboxBacklog = try db.query("SELECT COUNT(*) FROM outcomes WHERE outbox_written = 0").first?.int(0) ?? 0
            snapshot.notifyBacklog = try db.query("SELECT COUNT(*) FROM outcomes WHERE notified = 0").first?.int(0) ?? 0
            snapshot.held = try db.query("SELECT COUNT(*) FROM holds").first?.int(0) ?? 0
            return snapshot
        }
    }
}
