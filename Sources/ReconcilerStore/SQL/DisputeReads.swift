import Foundation
import ReconcilerCore

/// The disputes' reads, written once for both stores (``Statement``): what the dispute service looks at next and what
/// `status` reports of an account's disputes.
extension DisputeStore where Self: StatementRunner {
    public func dispute(_ id: String) async throws -> TrackedDispute? {
        try await rows(of: "SELECT data, revision FROM disputes WHERE dispute_id = \(id)").first.map(DisputeRow.dispute)
    }

    public func trackedOrders(among orderIDs: [String], account: AccountID) async throws -> Set<String> {
        Set(
            try await rows(of: "SELECT order_id FROM orders WHERE order_id \(anyOf: orderIDs) AND account = \(account.rawValue)")
                .compactMap { $0.string(0) })
    }

    public func disputeHints(account: AccountID, limit: Int) async throws -> [String] {
        try await rows(
            of: "SELECT dispute_id FROM dispute_hints WHERE account = \(account.rawValue) ORDER BY hinted_at, dispute_id LIMIT \(limit)"
        ).compactMap { $0.string(0) }
    }

    public func forgetDisputeHints(_ ids: [String]) async throws {
        _ = try await rows(writtenBy: "DELETE FROM dispute_hints WHERE dispute_id \(anyOf: ids)")
    }

    /// Never moves the account's list back.
    public func listed(through: Date, account: AccountID) async throws {
        _ = try await rows(
            writtenBy: """
                INSERT INTO dispute_account_lists (account, listed_through) VALUES (\(account.rawValue), \(through))
                ON CONFLICT (account) DO UPDATE SET listed_through = excluded.listed_through
                WHERE dispute_account_lists.listed_through < excluded.listed_through
                """)
    }

    public func disputesToLook(account: AccountID, at now: Date, limit: Int) async throws -> [TrackedDispute] {
        try await rows(
            of: """
                SELECT data, revision FROM disputes
                WHERE is_open = 1 AND next_look IS NOT NULL AND next_look <= \(now) AND account = \(account.rawValue)
                ORDER BY next_look, dispute_id LIMIT \(limit)
                """
        ).map(DisputeRow.dispute)
    }

    public func dueDisputeActions(account: AccountID, at now: Date, limit: Int) async throws -> [DisputeAction] {
        try await rows(
            of: """
                SELECT data, revision, id FROM dispute_actions
                WHERE next_at IS NOT NULL AND next_at <= \(now)
                  AND dispute_id IN (SELECT dispute_id FROM disputes WHERE account = \(account.rawValue))
                ORDER BY next_at, id LIMIT \(limit)
                """
        ).map(DisputeRow.action)
    }

    public func nextDisputeLook(account: AccountID) async throws -> Date? {
        try await rows(
            of: """
                SELECT min(t) FROM (
                  SELECT min(next_look) AS t FROM disputes WHERE is_open = 1 AND account = \(account.rawValue)
                  UNION ALL SELECT min(next_at) FROM dispute_actions
                  WHERE next_at IS NOT NULL AND dispute_id IN (SELECT dispute_id FROM disputes WHERE account = \(account.rawValue))) AS looks
                """
        ).first?.date(0)
    }

    public func disputeHealth(account: AccountID) async throws -> DisputeHealth {
        var health = DisputeHealth()
        let id = account.rawValue
        for row in try await rows(of: "SELECT state, count(*) FROM disputes WHERE is_open = 1 AND account = \(id) GROUP BY state ORDER BY state") {
            health.openByState[row.string(0) ?? "?"] = row.int(1) ?? 0
        }
        // Held amounts: only a dispute whose hold policy holds money (its JSON names ON_DISPUTE_…) can hold any.
        for row in try await rows(
            of: "SELECT data, revision FROM disputes WHERE is_open = 1 AND account = \(id) AND data LIKE '%ON_DISPUTE%' ORDER BY dispute_id")
        {
            let dispute = try DisputeRow.dispute(row)
            health.heldByCurrency[dispute.currency ?? "?", default: 0] += dispute.heldAmount
        }
        let row = try await rows(
            of: """
                SELECT (SELECT min(deadline) FROM disputes WHERE is_open = 1 AND account = \(id)),
                  (SELECT listed_through FROM dispute_account_lists WHERE account = \(id))
                """
        ).first
        health.nextDeadline = row?.date(0)
        health.listedThrough = row?.date(1)
        return health
    }
}

/// The operators' reads of disputes and their actions, written once for both stores.
extension DisputeReports where Self: StatementRunner {
    public func disputes(orderIDs: [String]) async throws -> [TrackedDispute] {
        try await rows(of: "SELECT data, revision FROM disputes WHERE order_id \(anyOf: orderIDs)").map(DisputeRow.dispute)
            .sorted { ($0.firstSeenAt, $0.id) < ($1.firstSeenAt, $1.id) }
    }

    public func disputeAction(_ id: Int64) async throws -> DisputeAction? {
        try await rows(of: "SELECT data, revision, id FROM dispute_actions WHERE id = \(id)").first.map(DisputeRow.action)
    }

    public func disputeActions(disputeIDs: [String]) async throws -> [DisputeAction] {
        try await rows(of: "SELECT data, revision, id FROM dispute_actions WHERE dispute_id \(anyOf: disputeIDs) ORDER BY id").map {
            try DisputeRow.action($0).redacted
        }
    }
}

/// A dispute's or an action's row as both stores' statements read it: its JSON, its revision (and an action's id).
public enum DisputeRow {
    public static func dispute(_ row: any StatementRow) throws -> TrackedDispute {
        var dispute = try row.decoded(TrackedDispute.self)
        dispute.revision = row.int(1) ?? 0
        return dispute
    }

    public static func action(_ row: any StatementRow) throws -> DisputeAction {
        var action = try row.decoded(DisputeAction.self)
        action.revision = row.int(1) ?? 0
        action.id = Int64(row.int(2) ?? 0)
        return action
    }
}
