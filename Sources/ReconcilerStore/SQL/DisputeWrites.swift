import Foundation
import ReconcilerCore

/// Disputes' and their actions' writes, written once. Each write is conditional on the revision its writer read: of
/// two daemons applying one change, the second's write finds the revision moved (after waiting for the first's row
/// lock, on PostgreSQL) and writes nothing, so each outcome is written once.
extension DisputeStore where Self: StatementRunner {
    public func record(_ write: DisputeWrite, at: Date) async throws -> Bool {
        let dispute = write.written
        let data = try StoredJSON.encode(dispute)
        let written: Statement =
            if let expected = write.expectedRevision {
                """
                UPDATE disputes SET order_id = \(dispute.orderID), state = \(dispute.state.rawValue), is_open = \(dispute.isOpen ? 1 : 0),
                  deadline = \(dispute.deadline), next_look = \(write.nextLookAt), klarna_updated_at = \(dispute.updatedAt),
                  revision = \(write.revision), api_version = \(dispute.apiVersion), data = \(data), raw = coalesce(\(write.raw), raw),
                  account = \(dispute.account.rawValue)
                WHERE dispute_id = \(dispute.id) AND revision = \(expected) RETURNING 1
                """
            } else {
                """
                INSERT INTO disputes (
                  dispute_id, order_id, state, is_open, deadline, next_look, klarna_updated_at, revision, api_version, data, raw, account)
                VALUES (\(dispute.id), \(dispute.orderID), \(dispute.state.rawValue), \(dispute.isOpen ? 1 : 0), \(dispute.deadline),
                  \(write.nextLookAt), \(dispute.updatedAt), \(write.revision), \(dispute.apiVersion), \(data), \(write.raw), \(dispute.account.rawValue))
                ON CONFLICT (dispute_id) DO NOTHING RETURNING 1
                """
            }
        var then: [Statement] = ["DELETE FROM dispute_hints WHERE dispute_id = \(dispute.id) AND hinted_at <= \(write.readStartedAt)"]
        then += try write.outcomes.map { try WorkWrites.outcome($0, at: at) }
        if !dispute.orphan, let orderID = dispute.orderID {
            then += try write.events.map {
                try WorkWrites.event(NewEvent(hppSessionID: nil, orderID: orderID, $0, detail: ["dispute_id": dispute.id]), at: at)
            }
        }
        return try await transact(.read(written) { [then] in $0.isEmpty ? .answer(false) : .write(then, answering: true) })
    }

    public func update(_ write: DisputeActionWrite, at: Date) async throws -> Bool {
        let action = write.written
        var then = try write.outcome.map { [try WorkWrites.outcome($0, at: at)] } ?? []
        if let event = write.event, let orderID = action.orderID {
            then.append(try WorkWrites.event(NewEvent(hppSessionID: nil, orderID: orderID, event, detail: ["dispute_id": action.disputeID]), at: at))
        }
        let written: Statement = """
            UPDATE dispute_actions SET state = \(action.state.rawValue), next_at = \(action.isFinished ? nil : action.nextAt),
              revision = \(action.revision), data = \(try StoredJSON.encode(action))
            WHERE id = \(action.id) AND revision = \(write.expectedRevision) RETURNING 1
            """
        return try await transact(.read(written) { [then] in $0.isEmpty ? .answer(false) : .write(then, answering: true) })
    }
}

extension DisputeReports where Self: StatementRunner {
    public func request(_ action: DisputeAction, at: Date) async throws -> DisputeActionRequest {
        // The dispute's row, locked: two requests for one dispute at once are decided one after the other.
        try await transact(
            .run(
                [
                    "SELECT order_id FROM disputes WHERE dispute_id = \(action.disputeID)\(Statement.forUpdate)",
                    "SELECT data, revision, id FROM dispute_actions WHERE dispute_id = \(action.disputeID) AND next_at IS NOT NULL ORDER BY id LIMIT 1",
                ]
            ) { rows in
                guard let dispute = rows[0].first else {
                    throw DisputeActionProblem("dispute \(action.disputeID) is not known to this daemon (see klarna-reconciler disputes)")
                }
                if let row = rows[1].first { return .answer(.existing(try DisputeRow.action(row).redacted)) }
                var recorded = action
                recorded.orderID = action.orderID ?? dispute.string(0)
                return .read(
                    """
                    INSERT INTO dispute_actions (dispute_id, kind, state, next_at, revision, data)
                    VALUES (\(action.disputeID), \(action.kind.rawValue), \(action.state.rawValue), \(action.nextAt), 0, \(try StoredJSON.encode(recorded)))
                    RETURNING id
                    """
                ) { [recorded] inserted in
                    guard let id = inserted.first?.int64(0) else { throw MissingRow(what: "the new dispute action's id") }
                    var recorded = recorded
                    recorded.id = id
                    return .answer(.recorded(recorded.redacted))
                }
            })
    }
}
