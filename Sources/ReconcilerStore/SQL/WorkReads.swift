import Foundation
import ReconcilerCore

/// A step's reads and the wakeups, written once; a store shared by several daemons keeps its hot reads prepared.
extension WorkStore where Self: StatementRunner {
    public func session(_ hppSessionID: String) async throws -> TrackedSession? {
        try await rows(of: "SELECT data FROM sessions WHERE hpp_session_id = \(hppSessionID)").first?.decoded(TrackedSession.self)
    }

    public func order(_ orderID: String) async throws -> TrackedOrder? {
        try await rows(of: "SELECT data FROM orders WHERE order_id = \(orderID)").first?.decoded(TrackedOrder.self)
    }

    public func paymentRequest(_ id: String) async throws -> TrackedPaymentRequest? {
        try await rows(of: "SELECT data FROM payment_requests WHERE payment_request_id = \(id)").first?.decoded(TrackedPaymentRequest.self)
    }

    public func intent(_ key: String) async throws -> Intent? {
        try await rows(of: "SELECT data FROM intents WHERE key = \(key)").first?.decoded(Intent.self)
    }

    public func intents(subject: String) async throws -> [Intent] {
        try await rows(of: "SELECT data FROM intents WHERE subject = \(subject) ORDER BY created_at").map { try $0.decoded(Intent.self) }
    }

    /// The hold and the pending requests in one read: a row of the hold beside each request, or beside nulls.
    public func operatorControls(for key: WorkKey) async throws -> OperatorControls {
        let rows = try await rows(
            of: """
                SELECT h.held, r.id, r.work_key, r.action, r.order_id, r.requested_by, r.requested_at, r.state, r.note
                FROM (SELECT EXISTS (SELECT 1 FROM holds WHERE work_key = \(key.description)) AS held) h
                LEFT JOIN operator_requests r ON r.work_key = \(key.description) AND r.state = 'pending'
                ORDER BY r.id
                """)
        return OperatorControls(held: rows.first?.bool(0) ?? false, pending: rows.compactMap { OperatorRequest(row: $0, from: 1) })
    }
}

extension WorkQueue where Self: StatementRunner {
    /// Takes every wakeup row there is. Not by sequence: with concurrent writers, identity values commit out of
    /// order, and a row numbered below one already taken may still be on its way. `sequence` only grows.
    public func wakeups(after sequence: Int64, includingDelivered: Bool) async throws -> (keys: [WorkKey], last: Int64) {
        let taken = try await transact(
            .read("DELETE FROM wakeups RETURNING id, work_key, delivered") { rows in
                .answer(rows.compactMap { row in row.int64(0).map { ($0, row.string(1) ?? "", row.bool(2) ?? false) } })
            })
        guard !taken.isEmpty else { return ([], sequence) }
        let keys = taken.sorted { $0.0 < $1.0 }.filter { includingDelivered || !$0.2 }.compactMap { WorkKey($0.1) }
        return (keys, max(sequence, taken.map(\.0).max() ?? sequence))
    }
}
