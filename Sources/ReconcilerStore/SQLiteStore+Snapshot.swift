import Foundation
import ReconcilerCore

extension SQLiteStore: StateSnapshotSource {
    /// Counts over open work only (the `next_due` partial indexes) and the undelivered outcomes' partial index: the
    /// cost follows what is open, not the history the store keeps.
    public func stateSnapshot() async throws -> StateSnapshot {
        try await read { db in
            func counts(_ sql: String) throws -> [String: Int] {
                Dictionary(uniqueKeysWithValues: try db.query(sql).map { ($0.string(0) ?? "?", $0.int(1) ?? 0) })
            }
            var snapshot = StateSnapshot()
            snapshot.openSessionsByPhase = try counts("SELECT phase, COUNT(*) FROM sessions WHERE next_due IS NOT NULL GROUP BY phase")
            snapshot.openOrdersByPhase = try counts("SELECT phase, COUNT(*) FROM orders WHERE next_due IS NOT NULL GROUP BY phase")
            snapshot.unfinishedIntentsByState = try counts("SELECT state, COUNT(*) FROM intents WHERE state IN ('intended', 'sent', 'ambiguous') GROUP BY state")
            snapshot.outboxBacklog = try db.query("SELECT COUNT(*) FROM outcomes WHERE outbox_written = 0").first?.int(0) ?? 0
            snapshot.notifyBacklog = try db.query("SELECT COUNT(*) FROM outcomes WHERE notified = 0").first?.int(0) ?? 0
            snapshot.held = try db.query("SELECT COUNT(*) FROM holds").first?.int(0) ?? 0
            let open = try db.query(
                """
                SELECT MIN(since), MIN(deadline) FROM (
                  SELECT MIN(tracked_at) AS since, MIN(deadline) AS deadline FROM sessions WHERE next_due IS NOT NULL
                  UNION ALL SELECT MIN(created_at), MIN(deadline) FROM orders WHERE next_due IS NOT NULL)
                """).first
            snapshot.oldestOpenSince = open?.date(0)
            snapshot.nextDeadline = open?.date(1)
            return snapshot
        }
    }
}
