import Foundation
import ReconcilerCore

extension OperatorRequest {
    /// The request columns, in the order ``init(row:)`` reads them.
    static let columns: Statement = "id, work_key, action, order_id, requested_by, requested_at, state, note"

    /// A row of ``columns`` from its column `first` on; nil for a key or an action this binary does not know (or a row
    /// of nulls: none).
    init?(row: any StatementRow, from first: Int = 0) {
        guard let id = row.int64(first), let key = row.string(first + 1).flatMap(WorkKey.init),
            let action = row.string(first + 2).flatMap(OperatorAction.init)
        else { return nil }
        self.init(
            id: id, key: key, action: action, orderID: row.string(first + 3), requestedBy: row.string(first + 4) ?? "",
            requestedAt: row.date(first + 5) ?? Date(), state: row.string(first + 6).flatMap(OperatorRequest.State.init) ?? .pending,
            note: row.string(first + 7))
    }
}

/// Operator requests, written once: the command line and the sockets record them, the engine answers them in a
/// step's commit.
extension OperatorStore where Self: StatementRunner {
    public func submit(_ requests: [OperatorRequest], delivered: Bool, at: Date) async throws -> [Int64] {
        let holder = leaseHolder
        let ids = try await transact(Transaction(each: requests.map { Self.submission($0, delivered: delivered, holder: holder, at: at) }))
        if !ids.isEmpty { await announceWork() }
        return ids
    }

    /// A request's row, an event naming its id on the key's session or order, and a wakeup.
    private static func submission(_ request: OperatorRequest, delivered: Bool, holder: String?, at: Date) -> Transaction<Int64> {
        let key = request.key.description
        return .read(
            """
            INSERT INTO operator_requests (work_key, action, order_id, requested_by, requested_at)
            VALUES (\(key), \(request.action.rawValue), \(request.orderID), \(request.requestedBy), \(at)) RETURNING id
            """
        ) { rows in
            guard let id = rows.first?.int64(0) else { throw MissingRow(what: "the new operator request's id") }
            let what = request.action.word + (request.orderID.map { " --order-id \($0)" } ?? "")
            let detail = try StoredJSON.encode(["operator_request": "\(id)"])
            // The ids a key's events are filed under: an order's events also under its session.
            let (session, order): (Statement, Statement) =
                switch request.key {
                case .session(let id): ("\(id)", "NULL")
                case .order(let id): ("(SELECT hpp_session_id FROM orders WHERE order_id = \(id))", "\(id)")
                case .paymentRequest, .customerToken: ("NULL", "NULL")
                }
            return .write(
                [
                    """
                    INSERT INTO events (at, hpp_session_id, order_id, kind, message, detail)
                    VALUES (\(at), \(session), \(order), \(EventKind.operatorRequest.rawValue), \("\(what) requested by \(request.requestedBy)"), \(detail))
                    """,
                    WorkWrites.wakeup(request.key, delivered: delivered, holder: holder),
                ], answering: id)
        }
    }

    public func operatorRequests(_ ids: [Int64]) async throws -> [OperatorRequest] {
        guard !ids.isEmpty else { return [] }
        let found = try await rows(of: "SELECT \(OperatorRequest.columns) FROM operator_requests WHERE id \(anyOf: ids)").compactMap {
            OperatorRequest(row: $0)
        }
        // In the order asked for.
        return ids.compactMap { id in found.first { $0.id == id } }
    }

    public func timeline(for id: String) async throws -> PaymentTimeline {
        let sessions = try await rows(
            of: "SELECT data FROM sessions WHERE hpp_session_id = \(id) OR kp_session_id = \(id) OR order_id = \(id) OR merchant_reference = \(id)"
        ).map { try $0.decoded(TrackedSession.self) }
        let named = try await rows(of: "SELECT order_id FROM orders WHERE order_id = \(id) OR merchant_reference = \(id)").compactMap { $0.string(0) }
        let orderIDs = Array(Set(sessions.compactMap(\.orderID)).union(named))
        let orders = try await rows(
            of: "SELECT data FROM orders WHERE order_id \(anyOf: orderIDs) ORDER BY order_id\(Statement.byteOrder)"
        ).map { try $0.decoded(TrackedOrder.self) }
        let sessionIDs = Array(Set(sessions.map(\.hppSessionID)).union(orders.compactMap(\.hppSessionID)))
        // An order's own rows are those not filed under its session.
        let of: Statement = "hpp_session_id \(anyOf: sessionIDs) OR (order_id \(anyOf: orderIDs) AND hpp_session_id IS NULL)"
        let events = try await rows(of: "SELECT \(RecordedEvent.columns) FROM events WHERE \(of) ORDER BY id").map(RecordedEvent.init(row:))
        let outcomes = try await rows(of: "SELECT \(StoredOutcome.columns) FROM outcomes WHERE \(of) ORDER BY id").map(StoredOutcome.init(row:))
        // A charge's order: the charge too (its subject is the token, its result the order).
        let intents = try await rows(
            of: """
                SELECT data FROM intents WHERE subject \(anyOf: sessionIDs + orderIDs)
                  OR (kind = 'charge' AND \(json: "data", StoredJSON.intentResult) \(anyOf: orderIDs))
                ORDER BY created_at
                """
        ).map { try $0.decoded(Intent.self) }
        return PaymentTimeline(sessions: sessions, orders: orders, intents: intents, events: events, outcomes: outcomes)
    }

    public func list(phase: String?, account: AccountID?, limit: Int) async throws -> StoreListing {
        if phase == "held" { return try await listHeld(limit: limit).of(account) }
        let named = account?.rawValue
        let unit: Statement = "(\(phase) IS NULL OR phase = \(phase) OR outcome = \(phase)) AND (\(named) IS NULL OR account = \(named))"
        let sessions = try await rows(of: "SELECT data FROM sessions WHERE \(unit) ORDER BY updated_at DESC LIMIT \(limit)")
        let orders = try await rows(of: "SELECT data FROM orders WHERE \(unit) ORDER BY updated_at DESC LIMIT \(limit)")
        let intents = try await rows(
            of: """
                SELECT data FROM intents
                WHERE (\(phase) IS NULL OR state = \(phase) OR kind = \(phase))
                  AND (\(named) IS NULL OR subject IN (SELECT hpp_session_id FROM sessions WHERE account = \(named))
                    OR subject IN (SELECT order_id FROM orders WHERE account = \(named)))
                ORDER BY updated_at DESC LIMIT \(limit)
                """)
        return StoreListing(
            sessions: try sessions.map { try $0.decoded(TrackedSession.self) }, orders: try orders.map { try $0.decoded(TrackedOrder.self) },
            intents: try intents.map { try $0.decoded(Intent.self) })
    }

    /// `list --state held`: the newest `limit` holds, sessions and orders together, newest hold first.
    private func listHeld(limit: Int) async throws -> StoreListing {
        let held = try await rows(
            of: """
                SELECT s.data, o.data FROM (SELECT work_key, held_at FROM holds ORDER BY held_at DESC LIMIT \(limit)) h
                LEFT JOIN sessions s ON h.work_key = 'session:' || s.hpp_session_id
                LEFT JOIN orders o ON h.work_key = 'order:' || o.order_id
                ORDER BY h.held_at DESC
                """)
        return StoreListing(
            sessions: try held.compactMap { $0.string(0) }.map { try StoredJSON.decode(TrackedSession.self, $0) },
            orders: try held.compactMap { $0.string(1) }.map { try StoredJSON.decode(TrackedOrder.self, $0) })
    }

}

extension OperatorStore where Self: StatementRunner & StoreHealth {
    public func summary(now: Date) async throws -> StatusSummary {
        func counts(_ statement: Statement) async throws -> [String: Int] {
            Dictionary(uniqueKeysWithValues: try await rows(of: statement).map { ($0.string(0) ?? "?", $0.int(1) ?? 0) })
        }
        func count(_ statement: Statement) async throws -> Int { try await rows(of: statement).first?.int(0) ?? 0 }
        var summary = StatusSummary(
            sessionsByPhase: try await counts("SELECT phase, count(*) FROM sessions GROUP BY phase"),
            ordersByPhase: try await counts("SELECT phase, count(*) FROM orders GROUP BY phase"),
            intentsByState: try await counts("SELECT state, count(*) FROM intents GROUP BY state"),
            outcomesByKind: try await counts("SELECT kind, count(*) FROM outcomes GROUP BY kind"))
        if let oldest = try await rows(
            of: """
                SELECT id, since FROM (
                  SELECT hpp_session_id AS id, tracked_at AS since FROM sessions WHERE next_due IS NOT NULL
                  UNION ALL SELECT order_id, created_at FROM orders WHERE next_due IS NOT NULL) open ORDER BY since LIMIT 1
                """
        ).first {
            (summary.oldestOpenID, summary.oldestOpenSince) = (oldest.string(0), oldest.date(1))
        }
        if let deadline = try await rows(
            of: """
                SELECT what, deadline FROM (
                  SELECT 'session ' || hpp_session_id AS what, deadline FROM sessions WHERE next_due IS NOT NULL AND deadline IS NOT NULL
                  UNION ALL SELECT 'order ' || order_id, deadline FROM orders WHERE next_due IS NOT NULL AND deadline IS NOT NULL) open
                ORDER BY deadline LIMIT 1
                """
        ).first {
            (summary.nextDeadlineWhat, summary.nextDeadline) = (deadline.string(0), deadline.date(1))
        }
        summary.nextDueAt = try await rows(
            of: "SELECT min(due) FROM (SELECT min(next_due) AS due FROM sessions UNION ALL SELECT min(next_due) FROM orders) d"
        )
        .first?.date(0)
        // Held work is not backlog: nothing runs it until it is released.
        summary.backlog = try await count(
            """
            SELECT (SELECT count(*) FROM sessions WHERE next_due <= \(now) AND 'session:' || hpp_session_id NOT IN (SELECT work_key FROM holds))
              + (SELECT count(*) FROM orders WHERE next_due <= \(now) AND 'order:' || order_id NOT IN (SELECT work_key FROM holds))
            """)
        summary.held = try await count("SELECT count(*) FROM holds")
        summary.addAccountCounts(
            try await rows(of: Statement(stringLiteral: SharedSQL.countsByAccount)).map {
                ($0.string(0) ?? "s", $0.string(1) ?? "default", $0.string(2) ?? "?", $0.int(3) ?? 0)
            })
        summary.undeliveredOutcomes = try await count("SELECT count(*) FROM outcomes WHERE outbox_written = \(literal: false)")
        summary.rejectionsLastDay = try await count("SELECT count(*) FROM rejections WHERE at >= \(now.addingTimeInterval(-86_400))")
        if let last = try await rows(of: "SELECT at, source, status, error, detail FROM rejections ORDER BY id DESC LIMIT 1").first {
            summary.lastRejection =
                "\((last.date(0) ?? now).formatted(.iso8601)) \(last.string(1) ?? "?") \(last.int(2) ?? 0) \(last.string(3) ?? ""): \(last.string(4) ?? "")"
        }
        let live = try await liveStatus()
        summary.lastKlarnaSuccess = live.lastKlarnaSuccess
        summary.lastKlarnaError = live.lastKlarnaError
        summary.lastKlarnaErrorDetail = live.lastKlarnaErrorDetail
        return summary
    }
}

extension StoreHealth where Self: StatementRunner {
    /// Counts over open work only (partial indexes on `next_due IS NOT NULL`) and the undelivered outcomes' partial
    /// index: the cost follows what is open, not the history the store keeps.
    public func stateSnapshot() async throws -> StateSnapshot {
        var snapshot = StateSnapshot()
        // One scan of each covering partial index (SQLite's migration 8) gives the counts by phase, the oldest and the
        // next deadline together; the rows' JSON is never read.
        func open(_ table: Statement, since: Statement) async throws -> [String: Int] {
            var counts: [String: Int] = [:]
            for row in try await rows(
                of: "SELECT phase, count(*), min(\(since)), min(deadline) FROM \(table) WHERE next_due IS NOT NULL GROUP BY phase")
            {
                counts[row.string(0) ?? "?"] = row.int(1) ?? 0
                if let oldest = row.date(2) { snapshot.oldestOpenSince = min(snapshot.oldestOpenSince ?? oldest, oldest) }
                if let deadline = row.date(3) { snapshot.nextDeadline = min(snapshot.nextDeadline ?? deadline, deadline) }
            }
            return counts
        }
        snapshot.openSessionsByPhase = try await open("sessions\(sqlite: " INDEXED BY sessions_open", postgres: "")", since: "tracked_at")
        snapshot.openOrdersByPhase = try await open("orders\(sqlite: " INDEXED BY orders_open", postgres: "")", since: "created_at")
        let unfinished = try await rows(
            of: """
                SELECT state, count(*), sum(CASE WHEN kind = 'charge' THEN 1 ELSE 0 END) FROM intents
                WHERE state IN ('intended', 'sent', 'ambiguous') GROUP BY state
                """)
        snapshot.unfinishedIntentsByState = Dictionary(uniqueKeysWithValues: unfinished.map { ($0.string(0) ?? "?", $0.int(1) ?? 0) })
        snapshot.chargesWaiting = unfinished.reduce(0) { $0 + ($1.int(2) ?? 0) }
        let backlogs = try await rows(
            of: """
                SELECT (SELECT count(*) FROM outcomes WHERE outbox_written = \(literal: false)),
                  (SELECT count(*) FROM outcomes WHERE notified = \(literal: false)), (SELECT count(*) FROM holds)
                """
        ).first
        snapshot.outboxBacklog = backlogs?.int(0) ?? 0
        snapshot.notifyBacklog = backlogs?.int(1) ?? 0
        snapshot.held = backlogs?.int(2) ?? 0
        return snapshot
    }
}
