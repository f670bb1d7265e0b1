import Foundation
import ReconcilerCore
import ReconcilerStore

/// Disputes, their hints and the operators' actions (migration 11). Writes are conditional on the revision read, as
/// on PostgreSQL, though one daemon writes this file: a command's request and the daemon's write may still cross.
extension SQLiteStore {
    // MARK: DisputeStore

    public func record(_ write: DisputeWrite, at: Date) async throws -> Bool {
        let revision = write.revision
        let dispute = write.written
        let data = try json(dispute)
        let outcomes = try write.outcomes.map { ($0, try json($0)) }
        let events = write.events
        return try await self.write { db in
            let values: [SQLValue] = [
                .text(dispute.id), SQLValue(dispute.orderID), .text(dispute.state.rawValue), .integer(dispute.isOpen ? 1 : 0),
                SQLValue(dispute.deadline), SQLValue(write.nextLookAt), SQLValue(dispute.updatedAt), SQLValue(revision),
                .text(dispute.apiVersion), .text(data), SQLValue(write.raw), .text(dispute.account.rawValue),
            ]
            let written: Bool
            if let expected = write.expectedRevision {
                written = try !db.query(
                    """
                    UPDATE disputes SET order_id = ?2, state = ?3, is_open = ?4, deadline = ?5, next_look = ?6, klarna_updated_at = ?7,
                      revision = ?8, api_version = ?9, data = ?10, raw = coalesce(?11, raw), account = ?12
                    WHERE dispute_id = ?1 AND revision = ?13 RETURNING 1
                    """, values + [SQLValue(expected)]
                ).isEmpty
            } else {
                written = try !db.query(
                    """
                    INSERT INTO disputes (
                      dispute_id, order_id, state, is_open, deadline, next_look, klarna_updated_at, revision, api_version, data, raw, account)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (dispute_id) DO NOTHING RETURNING 1
                    """, values
                ).isEmpty
            }
            guard written else { return false }
            try db.query(
                "DELETE FROM dispute_hints WHERE dispute_id = ? AND hinted_at <= ?", [.text(dispute.id), SQLValue(write.readStartedAt)])
            for (outcome, data) in outcomes { try self.insertOutcome(db, outcome, data: data, at: at) }
            if !dispute.orphan, let orderID = dispute.orderID {
                for event in events {
                    try self.insertEvent(db, NewEvent(hppSessionID: nil, orderID: orderID, event, detail: ["dispute_id": dispute.id]), at: at)
                }
            }
            return true
        }
    }

    public func update(_ write: DisputeActionWrite, at: Date) async throws -> Bool {
        let action = write.written
        let data = try json(action)
        let outcome = try write.outcome.map { ($0, try json($0)) }
        let event = write.event
        return try await self.write { db in
            let written = try !db.query(
                "UPDATE dispute_actions SET state = ?, next_at = ?, revision = ?, data = ? WHERE id = ? AND revision = ? RETURNING 1",
                [
                    .text(action.state.rawValue), SQLValue(action.isFinished ? nil : action.nextAt), SQLValue(action.revision), .text(data),
                    .integer(action.id), SQLValue(write.expectedRevision),
                ]
            ).isEmpty
            guard written else { return false }
            if let (outcome, data) = outcome { try self.insertOutcome(db, outcome, data: data, at: at) }
            if let event, let orderID = action.orderID {
                try self.insertEvent(db, NewEvent(hppSessionID: nil, orderID: orderID, event, detail: ["dispute_id": action.disputeID]), at: at)
            }
            return true
        }
    }

    // MARK: DisputeReports

    public func request(_ action: DisputeAction, at: Date) async throws -> DisputeActionRequest {
        try await write { db in
            guard let dispute = try db.query("SELECT order_id FROM disputes WHERE dispute_id = ?", [.text(action.disputeID)]).first else {
                throw DisputeActionProblem("dispute \(action.disputeID) is not known to this daemon (see klarna-reconciler disputes)")
            }
            if let row = try db.query(
                "SELECT data, revision, id FROM dispute_actions WHERE dispute_id = ? AND next_at IS NOT NULL ORDER BY id LIMIT 1",
                [.text(action.disputeID)]
            ).first {
                return .existing(try DisputeRow.action(row).redacted)
            }
            var recorded = action
            recorded.orderID = action.orderID ?? dispute.string(0)
            let id = try db.query(
                "INSERT INTO dispute_actions (dispute_id, kind, state, next_at, revision, data) VALUES (?, ?, ?, ?, 0, ?) RETURNING id",
                [
                    .text(action.disputeID), .text(action.kind.rawValue), .text(action.state.rawValue), SQLValue(action.nextAt),
                    .text(try self.json(recorded)),
                ]
            ).first?.int(0)
            recorded.id = Int64(id ?? 0)
            return .recorded(recorded.redacted)
        }
    }

}
