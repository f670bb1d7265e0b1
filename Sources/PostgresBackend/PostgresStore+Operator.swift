import Foundation
import PostgresNIO
import ReconcilerCore
import ReconcilerStore

/// Reading for people, operator requests and holds, retention and the state numbers: the same answers as the SQLite
/// store gives, from the whole cluster's state.
extension PostgresStore {
    /// With the step's other inputs: a step asks for them all at once (``stepInputs(for:)``), and nothing else
    /// asks on the hot path.
    public func operatorControls(for key: WorkKey) async throws -> OperatorControls {
        try await stepInputs(for: key).controls
    }

    /// A pending request from the columns ``stepInputs(for:)`` reads beside the hold;
    /// nil for the row of nulls that stands for none.
    static func pendingRequest(
        _ id: Int64?, _ workKey: String?, _ action: String?, _ orderID: String?, _ by: String?, _ at: Date?, _ state: String?, _ note: String?
    ) -> OperatorRequest? {
        guard let id, let workKey = workKey.flatMap(WorkKey.init), let action = action.flatMap(OperatorAction.init), let by, let at else {
            return nil
        }
        return OperatorRequest(
            id: id, key: workKey, action: action, orderID: orderID, requestedBy: by, requestedAt: at,
            state: state.flatMap(OperatorRequest.State.init) ?? .pending, note: note)
    }

    public func submit(_ requests: [OperatorRequest], delivered: Bool, at: Date) async throws -> [Int64] {
        let ids: [Int64] = try await transaction { [self] db in
            var ids: [Int64] = []
            for request in requests {
                let id = try await rows(
                    db,
                    """
                    INSERT INTO operator_requests (work_key, action, order_id, requested_by, requested_at)
                    VALUES (\(request.key.description), \(request.action.rawValue), \(request.orderID), \(request.requestedBy), \(at)) RETURNING id
                    """
                )[0].decode(Int64.self)
                ids.append(id)
                let (session, order) = try await owners(db, request.key)
                let what = request.action.word + (request.orderID.map { " --order-id \($0)" } ?? "")
                try await insertEvent(
                    db, NewEvent(hppSessionID: session, orderID: order, DomainEvent(.operatorRequest, "\(what) requested by \(request.requestedBy)")),
                    detail: try json(["operator_request": "\(id)"]), at: at)
                try await wake(db, request.key, delivered: delivered)
            }
            return ids
        }
        if !ids.isEmpty { await announceWork() }
        return ids
    }

    public func operatorRequests(_ ids: [Int64]) async throws -> [OperatorRequest] {
        guard !ids.isEmpty else { return [] }
        let found = try await rows(
            "SELECT id, work_key, action, order_id, requested_by, requested_at, state, note FROM operator_requests WHERE id = ANY(\(ids))"
        ).compactMap(Self.request)
        // In the order asked for, as the SQLite store answers.
        return ids.compactMap { id in found.first { $0.id == id } }
    }

    /// The ids a key's events are filed under.
    private func owners(_ db: PostgresConnection, _ key: WorkKey) async throws -> (session: String?, order: String?) {
        switch key {
        case .session(let id): return (id, nil)
        case .order(let id): return (try await rows(db, "SELECT hpp_session_id FROM orders WHERE order_id = \(id)").first?.decode(String?.self), id)
        case .paymentRequest: return (nil, nil)
        }
    }

    private static func request(_ row: PostgresRow) throws -> OperatorRequest? {
        let (id, key, action, orderID, by, at, state, note) = try row.decode((Int64, String, String, String?, String, Date, String, String?).self)
        guard let key = WorkKey(key), let action = OperatorAction(rawValue: action) else { return nil }
        return OperatorRequest(
            id: id, key: key, action: action, orderID: orderID, requestedBy: by, requestedAt: at,
            state: OperatorRequest.State(rawValue: state) ?? .pending,
            note: note)
    }

    // MARK: Reading for people

    public func timeline(for id: String) async throws -> PaymentTimeline {
        let sessions = try await rows(
            "SELECT data FROM sessions WHERE hpp_session_id = \(id) OR kp_session_id = \(id) OR order_id = \(id) OR merchant_reference = \(id)"
        ).map { try decode(TrackedSession.self, $0) }
        var orderIDs = Set(sessions.compactMap(\.orderID))
        orderIDs.formUnion(
            try await rows("SELECT order_id FROM orders WHERE order_id = \(id) OR merchant_reference = \(id)").map { try $0.decode(String.self) })
        let orders = try await rows("SELECT data FROM orders WHERE order_id = ANY(\(Array(orderIDs))) ORDER BY order_id COLLATE \"C\"").map {
            try decode(TrackedOrder.self, $0)
        }
        let sessionIDs = Array(Set(sessions.map(\.hppSessionID)).union(orders.compactMap(\.hppSessionID)))
        let orderList = Array(orderIDs)
        let events = try await rows(
            """
            SELECT id, at, hpp_session_id, order_id, kind, message, detail FROM events
            WHERE hpp_session_id = ANY(\(sessionIDs)) OR (order_id = ANY(\(orderList)) AND hpp_session_id IS NULL) ORDER BY id
            """
        ).map { row in
            let (eventID, at, hpp, order, kind, message, detail) = try row.decode((Int64, Date, String?, String?, String, String, String?).self)
            return RecordedEvent(
                id: eventID, at: at, hppSessionID: hpp, orderID: order, kind: kind, message: message,
                detail: try detail.map { try decode([String: String].self, text: $0) } ?? [:])
        }
        let outcomes = try await rows(
            """
            SELECT id, at, data, outbox_written, notified, notify_attempts, notify_next FROM outcomes
            WHERE hpp_session_id = ANY(\(sessionIDs)) OR (order_id = ANY(\(orderList)) AND hpp_session_id IS NULL) ORDER BY id
            """
        ).map(outcome)
        let intents = try await rows("SELECT data FROM intents WHERE subject = ANY(\(sessionIDs + orderList)) ORDER BY created_at")
            .map { try decode(Intent.self, $0) }
        return PaymentTimeline(sessions: sessions, orders: orders, intents: intents, events: events, outcomes: outcomes)
    }

    public func list(phase: String?, account: AccountID?, limit: Int) async throws -> StoreListing {
        if phase == "held" { return try await listHeld(limit: limit).of(account) }
        let named = account?.rawValue
        let sessions = try await rows(
            """
            SELECT data FROM sessions WHERE (\(phase)::text IS NULL OR phase = \(phase) OR outcome = \(phase))
              AND (\(named)::text IS NULL OR account = \(named)) ORDER BY updated_at DESC LIMIT \(limit)
            """)
        let orders = try await rows(
            """
            SELECT data FROM orders WHERE (\(phase)::text IS NULL OR phase = \(phase) OR outcome = \(phase))
              AND (\(named)::text IS NULL OR account = \(named)) ORDER BY updated_at DESC LIMIT \(limit)
            """)
        // The filters as columns of `p`, which the shared condition names.
        let intents = try await rows(
            """
            WITH p AS (SELECT \(phase)::text AS phase, \(named)::text AS named)
            SELECT data FROM intents, p WHERE (p.phase IS NULL OR state = p.phase OR kind = p.phase)
              AND (p.named IS NULL OR \(unescaped: SharedSQL.intentOfAccount("p.named")))
            ORDER BY updated_at DESC LIMIT \(limit)
            """)
        return StoreListing(
            sessions: try sessions.map { try decode(TrackedSession.self, $0) }, orders: try orders.map { try decode(TrackedOrder.self, $0) },
            intents: try intents.map { try decode(Intent.self, $0) })
    }

    /// `list --state held`: the held sessions and orders, newest hold first.
    private func listHeld(limit: Int) async throws -> StoreListing {
        // The newest `limit` holds, sessions and orders together.
        let held = try await rows(
            """
            SELECT s.data, o.data FROM (SELECT work_key, held_at FROM holds ORDER BY held_at DESC LIMIT \(limit)) h
            LEFT JOIN sessions s ON h.work_key = 'session:' || s.hpp_session_id
            LEFT JOIN orders o ON h.work_key = 'order:' || o.order_id
            ORDER BY h.held_at DESC
            """
        ).map { try $0.decode((String?, String?).self) }
        return StoreListing(
            sessions: try held.compactMap(\.0).map { try decode(TrackedSession.self, text: $0) },
            orders: try held.compactMap(\.1).map { try decode(TrackedOrder.self, text: $0) })
    }

    public func summary(now: Date) async throws -> StatusSummary {
        func counts(_ query: PostgresQuery) async throws -> [String: Int] {
            Dictionary(uniqueKeysWithValues: try await rows(query).map { try $0.decode((String, Int).self) })
        }
        var summary = StatusSummary(
            sessionsByPhase: try await counts("SELECT phase, count(*) FROM sessions GROUP BY phase"),
            ordersByPhase: try await counts("SELECT phase, count(*) FROM orders GROUP BY phase"),
            intentsByState: try await counts("SELECT state, count(*) FROM intents GROUP BY state"),
            outcomesByKind: try await counts("SELECT kind, count(*) FROM outcomes GROUP BY kind"))
        if let oldest = try await rows(
            """
            SELECT id, since FROM (
              SELECT hpp_session_id AS id, tracked_at AS since FROM sessions WHERE next_due IS NOT NULL
              UNION ALL SELECT order_id, created_at FROM orders WHERE next_due IS NOT NULL) open ORDER BY since LIMIT 1
            """
        ).first {
            (summary.oldestOpenID, summary.oldestOpenSince) = try oldest.decode((String?, Date?).self)
        }
        if let deadline = try await rows(
            """
            SELECT what, deadline FROM (
              SELECT 'session ' || hpp_session_id AS what, deadline FROM sessions WHERE next_due IS NOT NULL AND deadline IS NOT NULL
              UNION ALL SELECT 'order ' || order_id, deadline FROM orders WHERE next_due IS NOT NULL AND deadline IS NOT NULL) open
            ORDER BY deadline LIMIT 1
            """
        ).first {
            (summary.nextDeadlineWhat, summary.nextDeadline) = try deadline.decode((String?, Date?).self)
        }
        summary.nextDueAt = try await rows("SELECT least((SELECT min(next_due) FROM sessions), (SELECT min(next_due) FROM orders))")
            .first?.decode(Date?.self)
        // Held work is not backlog: nothing runs it until it is released.
        summary.backlog = try await rows(
            """
            SELECT (SELECT count(*) FROM sessions WHERE next_due <= \(now) AND 'session:' || hpp_session_id NOT IN (SELECT work_key FROM holds))
              + (SELECT count(*) FROM orders WHERE next_due <= \(now) AND 'order:' || order_id NOT IN (SELECT work_key FROM holds))
            """)[0].decode(Int.self)
        summary.held = try await rows("SELECT count(*) FROM holds")[0].decode(Int.self)
        summary.addAccountCounts(
            try await rows(PostgresQuery(unsafeSQL: SharedSQL.countsByAccount)).map { row in
                let (unit, account, phase, count) = try row.decode((String, String, String, Int).self)
                return (unit, account, phase, count)
            })
        summary.undeliveredOutcomes = try await rows("SELECT count(*) FROM outcomes WHERE NOT outbox_written")[0].decode(Int.self)
        summary.rejectionsLastDay = try await rows("SELECT count(*) FROM rejections WHERE at >= \(now.addingTimeInterval(-86_400))")[0].decode(
            Int.self)
        if let last = try await rows("SELECT at, source, status, error, detail FROM rejections ORDER BY id DESC LIMIT 1").first {
            let (at, source, status, error, detail) = try last.decode((Date, String, Int, String, String).self)
            summary.lastRejection = "\(at.formatted(.iso8601)) \(source) \(status) \(error): \(detail)"
        }
        let live = try await liveStatus()
        summary.lastKlarnaSuccess = live.lastKlarnaSuccess
        summary.lastKlarnaError = live.lastKlarnaError
        summary.lastKlarnaErrorDetail = live.lastKlarnaErrorDetail
        return summary
    }

    // MARK: State numbers for /metrics

    public func stateSnapshot() async throws -> StateSnapshot {
        var snapshot = StateSnapshot()
        func open(_ table: String, since: String) async throws -> [String: Int] {
            var counts: [String: Int] = [:]
            for row in try await rows(
                "SELECT phase, count(*), min(\(unescaped: since)), min(deadline) FROM \(unescaped: table) WHERE next_due IS NOT NULL GROUP BY phase")
            {
                let (phase, count, oldest, deadline) = try row.decode((String, Int, Date?, Date?).self)
                counts[phase] = count
                if let oldest { snapshot.oldestOpenSince = min(snapshot.oldestOpenSince ?? oldest, oldest) }
                if let deadline { snapshot.nextDeadline = min(snapshot.nextDeadline ?? deadline, deadline) }
            }
            return counts
        }
        snapshot.openSessionsByPhase = try await open("sessions", since: "tracked_at")
        snapshot.openOrdersByPhase = try await open("orders", since: "created_at")
        snapshot.unfinishedIntentsByState = Dictionary(
            uniqueKeysWithValues: try await rows(
                "SELECT state, count(*) FROM intents WHERE state IN ('intended', 'sent', 'ambiguous') GROUP BY state"
            )
            .map { try $0.decode((String, Int).self) })
        let (outbox, notify, held) = try await rows(
            """
            SELECT (SELECT count(*) FROM outcomes WHERE NOT outbox_written), (SELECT count(*) FROM outcomes WHERE NOT notified),
              (SELECT count(*) FROM holds)
            """)[0].decode((Int, Int, Int).self)
        snapshot.outboxBacklog = outbox
        snapshot.notifyBacklog = notify
        snapshot.held = held
        return snapshot
    }

    // MARK: Retention

    public func prune(_ cutoffs: PruneCutoffs, limit: Int, dryRun: Bool) async throws -> PruneCounts {
        // A dry run counts everything; a batch deletes at most `limit` of each kind.
        let cap: Int? = dryRun || limit < 0 ? nil : limit
        return try await transaction { [self] db in
            var counts = PruneCounts()
            let unsettled = RetentionPolicy.unsettledIntentStates.map(\.rawValue)
            if let before = cutoffs.closedPaymentsBefore {
                // A session no longer due, whose order (if any) is no longer due either, both unchanged since the
                // cutoff, every outcome delivered, no side effect unsettled.
                let payments = try await rows(
                    db,
                    """
                    SELECT s.hpp_session_id, s.order_id FROM sessions s
                    WHERE s.next_due IS NULL AND s.updated_at < \(before)
                      AND NOT EXISTS (SELECT 1 FROM orders o WHERE (o.order_id = s.order_id OR o.hpp_session_id = s.hpp_session_id)
                                      AND (o.next_due IS NOT NULL OR o.updated_at >= \(before)))
                      AND NOT EXISTS (SELECT 1 FROM outcomes u WHERE (u.hpp_session_id = s.hpp_session_id OR u.order_id = s.order_id)
                                      AND (NOT u.outbox_written OR NOT u.notified))
                      AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.subject IN (s.hpp_session_id, s.order_id) AND i.state = ANY(\(unsettled)))
                    LIMIT \(cap)
                    \(unescaped: dryRun ? "" : "FOR UPDATE OF s SKIP LOCKED")
                    """
                ).map { try $0.decode((String, String?).self) }
                counts.payments = payments.count
                if !dryRun {
                    for (session, order) in payments {
                        try await db.rows("DELETE FROM events WHERE hpp_session_id = \(session) OR order_id = \(order)", logger: logger)
                        try await db.rows("DELETE FROM outcomes WHERE hpp_session_id = \(session) OR order_id = \(order)", logger: logger)
                        try await db.rows("DELETE FROM intents WHERE subject IN (\(session), \(order))", logger: logger)
                        try await db.rows("DELETE FROM capture_requests WHERE order_id = \(order)", logger: logger)
                        try await db.rows("DELETE FROM orders WHERE order_id = \(order) OR hpp_session_id = \(session)", logger: logger)
                        try await db.rows("DELETE FROM sessions WHERE hpp_session_id = \(session)", logger: logger)
                    }
                }
                counts.paymentRequests = try await batch(
                    db, "payment_requests", key: "payment_request_id", where: "next_due IS NULL AND updated_at <", before, cap: cap, dryRun: dryRun)
                // Dedupe records: a repeat of a delivery this old is not a retry any more.
                counts.deliveries = try await batch(db, "deliveries", key: "dedupe_key", where: "received_at <", before, cap: cap, dryRun: dryRun)
            }
            if let before = cutoffs.eventsBefore {
                counts.events = try await batch(db, "events", key: "id", where: "at <", before, cap: cap, dryRun: dryRun)
            }
            if let before = cutoffs.rejectionsBefore {
                counts.rejections = try await batch(db, "rejections", key: "id", where: "at <", before, cap: cap, dryRun: dryRun)
            }
            if let before = cutoffs.unknownNotificationsBefore {
                counts.unknownNotifications = try await batch(
                    db, "deliveries", key: "dedupe_key", where: "\(Self.unknownNotification) AND received_at <", before, cap: cap, dryRun: dryRun)
            }
            if let keep = cutoffs.unverifiedRowCap {
                // Of what the age rules leave (rows from their cutoff on, if any), the newest `keep` stay.
                counts.rejections += try await beyond(
                    db, "rejections", key: "id", where: "TRUE", at: "at", from: cutoffs.rejectionsBefore, newestFirst: "id DESC",
                    keep: keep, cap: cap, dryRun: dryRun)
                counts.unknownNotifications += try await beyond(
                    db, "deliveries", key: "dedupe_key", where: Self.unknownNotification, at: "received_at", from: cutoffs.unknownNotificationsBefore,
                    newestFirst: "received_at DESC, dedupe_key DESC", keep: keep, cap: cap, dryRun: dryRun)
            }
            return counts
        }
    }

    /// A `deliveries` row that records an OM notification for an order this store does not know: its order id is its
    /// dedupe key (`om-notification:ORDER_ID:EVENT_TYPE`) less the prefix and the event type (letters and `_`).
    static let unknownNotification = """
        kind = '\(RetentionPolicy.omNotificationKind)' AND NOT EXISTS (
          SELECT 1 FROM orders o WHERE o.order_id = substring(deliveries.dedupe_key FROM '^\(RetentionPolicy.omNotificationKeyPrefix)(.*):[A-Z_]+$'))
        """

    /// Deletes (or counts) up to `cap` rows of `table` matching `condition` whose `at` column is from `from` on (any,
    /// for `nil`), past the newest `keep` of them in `newestFirst` order.
    private func beyond(
        _ db: PostgresConnection, _ table: String, key: String, where condition: String, at column: String, from: Date?, newestFirst: String,
        keep: Int, cap: Int?, dryRun: Bool
    ) async throws -> Int {
        if dryRun {
            return try await rows(
                db,
                """
                SELECT count(*) FROM (
                  SELECT 1 FROM \(unescaped: table) WHERE \(unescaped: condition) AND (\(from)::timestamptz IS NULL OR \(unescaped: column) >= \(from))
                  ORDER BY \(unescaped: newestFirst) OFFSET \(keep)) chosen
                """
            )[0].decode(Int.self)
        }
        return try await rows(
            db,
            """
            DELETE FROM \(unescaped: table) WHERE \(unescaped: key) IN (
              SELECT \(unescaped: key) FROM \(unescaped: table) WHERE \(unescaped: condition) AND (\(from)::timestamptz IS NULL OR \(unescaped: column) >= \(from))
              ORDER BY \(unescaped: newestFirst) OFFSET \(keep) LIMIT \(cap)) RETURNING 1
            """
        ).count
    }

    /// Deletes (or counts) up to `cap` rows of `table` whose condition, completed by `before`, holds.
    private func batch(
        _ db: PostgresConnection, _ table: String, key: String, where condition: String, _ before: Date, cap: Int?, dryRun: Bool
    ) async throws -> Int {
        if dryRun {
            return try await rows(
                db, "SELECT count(*) FROM (SELECT 1 FROM \(unescaped: table) WHERE \(unescaped: condition) \(before) LIMIT \(cap)) chosen"
            )[0].decode(Int.self)
        }
        return try await rows(
            db,
            """
            DELETE FROM \(unescaped: table) WHERE \(unescaped: key) IN (
              SELECT \(unescaped: key) FROM \(unescaped: table) WHERE \(unescaped: condition) \(before) LIMIT \(cap)) RETURNING 1
            """
        ).count
    }
}
