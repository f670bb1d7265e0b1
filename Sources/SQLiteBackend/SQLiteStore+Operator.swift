import Foundation
import ReconcilerCore
import ReconcilerStore

/// Operator requests and holds: the command line and the socket record requests; the engine reads them before it
/// works on a key and answers them in that step's commit.
extension SQLiteStore {
    public func operatorControls(for key: WorkKey) async throws -> OperatorControls {
        try await read { db in
            let held = try db.query("SELECT 1 FROM holds WHERE work_key = ?", [.text(key.description)]).first != nil
            let pending = try db.query(
                "SELECT id, work_key, action, order_id, requested_by, requested_at, state, note FROM operator_requests WHERE work_key = ? AND state = 'pending' ORDER BY id",
                [.text(key.description)]
            ).compactMap(Self.request)
            return OperatorControls(held: held, pending: pending)
        }
    }

    public func intents(subject: String) async throws -> [Intent] {
        try await read { db in
            try db.query("SELECT data FROM intents WHERE subject = ? ORDER BY created_at", [.text(subject)]).map {
                try self.decode(Intent.self, $0.string(0))
            }
        }
    }

    public func submit(_ requests: [OperatorRequest], delivered: Bool, at: Date) async throws -> [Int64] {
        try await write { db in
            var ids: [Int64] = []
            for request in requests {
                let id =
                    try db.query(
                        "INSERT INTO operator_requests (work_key, action, order_id, requested_by, requested_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
                        [
                            .text(request.key.description), .text(request.action.rawValue), SQLValue(request.orderID), .text(request.requestedBy),
                            SQLValue(at),
                        ]
                    ).first?.int64(0) ?? 0
                ids.append(id)
                let (session, order) = try self.owners(db, request.key)
                let what = request.action.word + (request.orderID.map { " --order-id \($0)" } ?? "")
                try self.insertEvent(
                    db,
                    NewEvent(
                        hppSessionID: session, orderID: order, DomainEvent(.operatorRequest, "\(what) requested by \(request.requestedBy)"),
                        detail: ["operator_request": "\(id)"]), at: at)
                try db.query(
                    "INSERT INTO wakeups (work_key, delivered) VALUES (?, ?)", [.text(request.key.description), .integer(delivered ? 1 : 0)])
            }
            return ids
        }
    }

    public func operatorRequests(_ ids: [Int64]) async throws -> [OperatorRequest] {
        try await read { db in
            try ids.compactMap { id in
                try db.query(
                    "SELECT id, work_key, action, order_id, requested_by, requested_at, state, note FROM operator_requests WHERE id = ?",
                    [.integer(id)]
                ).first.flatMap(Self.request)
            }
        }
    }

    /// `list --state held`: the held sessions and orders, newest hold first.
    func listHeld(account: AccountID?, limit: Int) async throws -> StoreListing {
        try await read { db in
            let keys = try db.query("SELECT work_key FROM holds ORDER BY held_at DESC LIMIT ?", [SQLValue(limit)]).compactMap {
                $0.string(0).flatMap(WorkKey.init)
            }
            var listing = StoreListing(sessions: [], orders: [], intents: [])
            for key in keys {
                switch key {
                case .session(let id):
                    listing.sessions += try db.query("SELECT data FROM sessions WHERE hpp_session_id = ?", [.text(id)]).map {
                        try self.decode(TrackedSession.self, $0.string(0))
                    }
                case .order(let id):
                    listing.orders += try db.query("SELECT data FROM orders WHERE order_id = ?", [.text(id)]).map {
                        try self.decode(TrackedOrder.self, $0.string(0))
                    }
                case .paymentRequest:
                    break
                }
            }
            return listing.of(account)
        }
    }

    /// The ids a key's events are filed under.
    private func owners(_ db: SQLiteConnection, _ key: WorkKey) throws -> (session: String?, order: String?) {
        switch key {
        case .session(let id): return (id, nil)
        case .order(let id): return (try db.query("SELECT hpp_session_id FROM orders WHERE order_id = ?", [.text(id)]).first?.string(0), id)
        case .paymentRequest: return (nil, nil)
        }
    }

    private static func request(_ row: SQLRow) -> OperatorRequest? {
        guard let id = row.int64(0), let key = row.string(1).flatMap(WorkKey.init), let action = row.string(2).flatMap(OperatorAction.init) else {
            return nil
        }
        return OperatorRequest(
            id: id, key: key, action: action, orderID: row.string(3), requestedBy: row.string(4) ?? "", requestedAt: row.date(5) ?? Date(),
            state: row.string(6).flatMap(OperatorRequest.State.init) ?? .pending, note: row.string(7))
    }
}
