import Foundation
import ReconcilerCore

extension WorkStore where Self: StatementRunner {
    /// The oldest capture request of the order still pending.
    public func oldestCaptureRequest(orderID: String) async throws -> CaptureRequestItem? {
        try await rows(
            of: "SELECT id, amount, requested_at FROM capture_requests WHERE order_id = \(orderID) AND state = 'pending' ORDER BY id LIMIT 1"
        ).first.flatMap { row in
            guard let id = row.int(0), let at = row.date(2) else { return nil }
            return CaptureRequestItem(id: Int64(id), orderID: orderID, amount: row.int(1), requestedAt: at)
        }
    }
}

extension OperatorStore where Self: StatementRunner {
    public func holds(_ keys: [WorkKey]) async throws -> [WorkKey: Hold] {
        var found: [WorkKey: Hold] = [:]
        for row in try await rows(of: "SELECT work_key, held_at, held_by FROM holds WHERE work_key \(anyOf: keys.map(\.description))") {
            guard let key = row.string(0).flatMap(WorkKey.init) else { continue }
            found[key] = Hold(since: row.date(1) ?? Date(), by: row.string(2) ?? "")
        }
        return found
    }
}

extension DisputeReports where Self: StatementRunner {
    public func disputes(openOnly: Bool, dueBefore: Date?, account: AccountID?) async throws -> [TrackedDispute] {
        try await rows(
            of: """
                SELECT data, revision FROM disputes
                WHERE (\(openOnly ? 1 : 0) = 0 OR is_open = 1) AND (\(dueBefore) IS NULL OR (deadline IS NOT NULL AND deadline < \(dueBefore)))
                  AND (\(account?.rawValue) IS NULL OR account = \(account?.rawValue))
                ORDER BY deadline IS NULL, deadline, klarna_updated_at DESC, dispute_id
                """
        ).map(DisputeRow.dispute)
    }
}
