import Foundation
import PostgresNIO
import ReconcilerCore
import ReconcilerStore

/// Disputes, their hints and the operators' actions (schema step 8), shared by every daemon. Each write is conditional
/// on the revision its writer read: of two daemons applying one change, the second's write finds the revision moved
/// (after waiting for the first's row lock) and writes nothing, so each outcome is written once.
extension PostgresStore {
    // MARK: DisputeStore

    public func dispute(_ id: String) async throws -> TrackedDispute? {
        try await rows("SELECT data, revision FROM disputes WHERE dispute_id = \(id)").first.map(dispute)
    }

    private func dispute(_ row: PostgresRow) throws -> TrackedDispute {
        let (data, revision) = try row.decode((String, Int).self)
        var dispute = try decode(TrackedDispute.self, text: data)
        dispute.revision = revision
        return dispute
    }

    public func trackedOrders(among orderIDs: [String], account: AccountID) async throws -> Set<String> {
        try await Set(
            rows("SELECT order_id FROM orders WHERE order_id = ANY(\(orderIDs)) AND account = \(account.rawValue)").map { try $0.decode(String.self) }
        )
    }

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

    public func disputeHints(account: AccountID, limit: Int) async throws -> [String] {
        try await rows(
            "SELECT dispute_id FROM dispute_hints WHERE account = \(account.rawValue) ORDER BY hinted_at, dispute_id LIMIT \(limit)"
        ).map { try $0.decode(String.self) }
    }

    public func forgetDisputeHints(_ ids: [String]) async throws {
        try await rows("DELETE FROM dispute_hints WHERE dispute_id = ANY(\(ids))")
    }

    public func disputesToLook(account: AccountID, at now: Date, limit: Int) async throws -> [TrackedDispute] {
        try await rows(
            """
            SELECT data, revision FROM disputes
            WHERE is_open = 1 AND next_look IS NOT NULL AND next_look <= \(now) AND account = \(account.rawValue)
            ORDER BY next_look LIMIT \(limit)
            """
        ).map(dispute)
    }

    public func dueDisputeActions(account: AccountID, at now: Date, limit: Int) async throws -> [DisputeAction] {
        try await rows(
            """
            SELECT data, revision, id FROM dispute_actions
            WHERE next_at IS NOT NULL AND next_at <= \(now) AND dispute_id IN (SELECT dispute_id FROM disputes WHERE account = \(account.rawValue))
            ORDER BY next_at, id LIMIT \(limit)
            """
        ).map(action)
    }

    private func action(_ row: PostgresRow) throws -> DisputeAction {
        let (data, revision, id) = try row.decode((String, Int, Int64).self)
        var action = try decode(DisputeAction.self, text: data)
        action.revision = revision
        action.id = id
        return action
    }

    public func nextDisputeLook(account: AccountID) async throws -> Date? {
        try await rows(
            """
            SELECT least((SELECT min(next_look) FROM disputes WHERE is_open = 1 AND account = \(account.rawValue)),
              (SELECT min(next_at) FROM dispute_actions
               WHERE next_at IS NOT NULL AND dispute_id IN (SELECT dispute_id FROM disputes WHERE account = \(account.rawValue))))
            """
        ).first?.decode(Date?.self)
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

    public func disputeHealth(account: AccountID) async throws -> DisputeHealth {
        var health = DisputeHealth()
        let id = account.rawValue
        for row in try await rows("SELECT state, count(*)::bigint FROM disputes WHERE is_open = 1 AND account = \(id) GROUP BY state") {
            let (state, count) = try row.decode((String, Int).self)
            health.openByState[state] = count
        }
        for row in try await rows("SELECT data FROM disputes WHERE is_open = 1 AND account = \(id) AND data LIKE '%ON_DISPUTE%'") {
            let dispute = try decode(TrackedDispute.self, row)
            health.heldByCurrency[dispute.currency ?? "?", default: 0] += dispute.heldAmount
        }
        let (deadline, listed) = try await rows(
            """
            SELECT (SELECT min(deadline) FROM disputes WHERE is_open = 1 AND account = \(id)),
              (SELECT listed_through FROM dispute_account_lists WHERE account = \(id))
            """
        )[0].decode((Date?, Date?).self)
        health.nextDeadline = deadline
        health.listedThrough = listed
        return health
    }

    public func listed(through: Date, account: AccountID) async throws {
        try await rows(
            """
            INSERT INTO dispute_account_lists (account, listed_through) VALUES (\(account.rawValue), \(through))
            ON CONFLICT (account) DO UPDATE SET listed_through = excluded.listed_through
            WHERE dispute_account_lists.listed_through < excluded.listed_through
            """)
    }

    // MARK: DisputeReports

    public func disputes(openOnly: Bool, dueBefore: Date?, account: AccountID?) async throws -> [TrackedDispute] {
        try await rows(
            """
            SELECT data, revision FROM disputes
            WHERE (NOT \(openOnly) OR is_open = 1) AND (\(dueBefore)::timestamptz IS NULL OR (deadline IS NOT NULL AND deadline < \(dueBefore)))
              AND (\(account?.rawValue)::text IS NULL OR account = \(account?.rawValue))
            ORDER BY deadline IS NULL, deadline, klarna_updated_at DESC, dispute_id
            """
        ).map(dispute)
    }

    public func disputes(orderIDs: [String]) async throws -> [TrackedDispute] {
        try await rows("SELECT data, revision FROM disputes WHERE order_id = ANY(\(orderIDs))").map(dispute)
            .sorted { ($0.firstSeenAt, $0.id) < ($1.firstSeenAt, $1.id) }
    }

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
                return .existing(try self.action(row).redacted)
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

    public func disputeAction(_ id: Int64) async throws -> DisputeAction? {
        try await rows("SELECT data, revision, id FROM dispute_actions WHERE id = \(id)").first.map(action)
    }

    public func disputeActions(disputeIDs: [String]) async throws -> [DisputeAction] {
        try await rows("SELECT data, revision, id FROM dispute_actions WHERE dispute_id = ANY(\(disputeIDs)) ORDER BY id").map {
            try action($0).redacted
        }
    }
}
