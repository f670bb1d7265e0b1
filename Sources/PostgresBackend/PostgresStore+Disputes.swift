import Foundation
import PostgresNIO
import ReconcilerCore
import ReconcilerStore

/// Disputes, their hints and the operators' actions (schema step 8), shared by every daemon. Each write is conditional
/// on the revision its writer read: of two daemons applying one change, the second's write finds the revision moved
/// (after waiting for the first's row lock) and writes nothing, so each outcome is written once.
extension PostgresStore {
    // MARK: DisputeStore

    public func record(_ write: DisputeWrite, at: Date) async throws -> Bool {
        let revision = write.revision
        let dispute = write.written
        let data = try json(dispute)
        let outcomes = try write.outcomes.map { ($0, try json($0)) }
        let events = write.events
        let detail = try json(["dispute_id": dispute.id])
        return try await transaction { [self] db in
            let written: Bool
            if let expected = write.expectedRevision {
                written = try await !rows(
                    db,
                    """
                    UPDATE disputes SET order_id = \(dispute.orderID), state = \(dispute.state.rawValue), is_open = \(dispute.isOpen ? 1 : 0),
                      deadline = \(dispute.deadline), next_look = \(write.nextLookAt), klarna_updated_at = \(dispute.updatedAt),
                      revision = \(revision), api_version = \(dispute.apiVersion), data = \(data), raw = coalesce(\(write.raw), raw),
                      account = \(dispute.account.rawValue)
                    WHERE dispute_id = \(dispute.id) AND revision = \(expected) RETURNING 1
                    """
                ).isEmpty
            } else {
                written = try await !rows(
                    db,
                    """
                    INSERT INTO disputes (
                      dispute_id, order_id, state, is_open, deadline, next_look, klarna_updated_at, revision, api_version, data, raw, account)
                    VALUES (\(dispute.id), \(dispute.orderID), \(dispute.state.rawValue), \(dispute.isOpen ? 1 : 0), \(dispute.deadline),
                      \(write.nextLookAt), \(dispute.updatedAt), \(revision), \(dispute.apiVersion), \(data), \(write.raw), \(dispute.account.rawValue))
                    ON CONFLICT (dispute_id) DO NOTHING RETURNING 1
                    """
                ).isEmpty
            }
            guard written else { return false }
            _ = try await rows(db, "DELETE FROM dispute_hints WHERE dispute_id = \(dispute.id) AND hinted_at <= \(write.readStartedAt)")
            for (outcome, data) in outcomes { try await insertOutcome(db, outcome, data: data, at: at) }
            if !dispute.orphan, let orderID = dispute.orderID {
                for event in events {
                    try await insertEvent(db, NewEvent(hppSessionID: nil, orderID: orderID, event), detail: detail, at: at)
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
        let detail = try json(["dispute_id": action.disputeID])
        let nextAt = action.isFinished ? nil : action.nextAt
        return try await transaction { [self] db in
            let written = try await !rows(
                db,
                """
                UPDATE dispute_actions SET state = \(action.state.rawValue), next_at = \(nextAt), revision = \(action.revision), data = \(data)
                WHERE id = \(action.id) AND revision = \(write.expectedRevision) RETURNING 1
                """
            ).isEmpty
            guard written else { return false }
            if let (outcome, data) = outcome { try await insertOutcome(db, outcome, data: data, at: at) }
            if let event, let orderID = action.orderID {
                try await insertEvent(db, NewEvent(hppSessionID: nil, orderID: orderID, event), detail: detail, at: at)
            }
            return true
        }
    }

    // MARK: DisputeReports

    public func request(_ action: DisputeAction, at: Date) async throws -> DisputeActionRequest {
        try await transaction { [self] db in
            // The dispute's row, locked: two requests for one dispute at once are decided one after the other.
            guard let dispute = try await rows(db, "SELECT order_id FROM disputes WHERE dispute_id = \(action.disputeID) FOR UPDATE").first else {
                throw DisputeActionProblem("dispute \(action.disputeID) is not known to this daemon (see klarna-reconciler disputes)")
            }
            if let row = try await rows(
                db,
                "SELECT data, revision, id FROM dispute_actions WHERE dispute_id = \(action.disputeID) AND next_at IS NOT NULL ORDER BY id LIMIT 1"
            ).first {
                return .existing(try DisputeRow.action(PostgresStatementRow(row: row)).redacted)
            }
            var recorded = action
            recorded.orderID = try action.orderID ?? dispute.decode(String?.self)
            let data = try json(recorded)
            let id = try await rows(
                db,
                """
                INSERT INTO dispute_actions (dispute_id, kind, state, next_at, revision, data)
                VALUES (\(action.disputeID), \(action.kind.rawValue), \(action.state.rawValue), \(action.nextAt), 0, \(data)) RETURNING id
                """
            )[0].decode(Int64.self)
            recorded.id = id
            return .recorded(recorded.redacted)
        }
    }

}
