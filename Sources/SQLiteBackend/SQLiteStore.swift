import Foundation
import ReconcilerCore
import ReconcilerStore

/// The embedded store: one SQLite file in WAL mode, every commit fsynced. Two connections, each on its own serial
/// queue so that blocking SQLite calls (and their fsyncs) never run on Swift's cooperative pool: writes go through
/// ``GroupCommit`` on the writer, which commits the writes that queued up meanwhile in one fsync; reads go to a
/// read-only connection, so a read never waits behind a commit's fsync (WAL lets it see the last commit meanwhile).
public final class SQLiteStore: ReconcilerStore, @unchecked Sendable {
    public let path: String
    private let reader: SQLiteConnection
    private let readQueue: DispatchQueue
    private let writes: GroupCommit
    private let encoder: JSONEncoder
    private let decoder = JSONDecoder()

    /// Opens the store at `path`, creating it and applying migrations unless `readOnly`.
    /// - Parameter busyTimeout: how long to wait for another process's write before failing (CLI vs daemon).
    /// - Parameter reserve: space on the store's filesystem given back when a write finds the disk full.
    public init(path: String, readOnly: Bool = false, busyTimeout: Duration = .seconds(5), reserve: ReserveFile? = nil) throws {
        self.path = path
        let writer = try Self.relieved(by: reserve) { try SQLiteConnection(path: path, readOnly: readOnly, busyTimeout: busyTimeout) }
        let writeQueue = DispatchQueue(label: "klarna-reconciler.store.write")
        self.writes = GroupCommit(connection: writer, queue: writeQueue, reserve: reserve)
        encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        if !readOnly {
            // The store holds authorization tokens: not for every local user (SQLite gives -wal and -shm the same mode).
            chmod(path, 0o640)
            try Self.relieved(by: reserve) { try Migrations.apply(to: writer) }
            reader = try SQLiteConnection(path: path, readOnly: true, busyTimeout: busyTimeout)
            readQueue = DispatchQueue(label: "klarna-reconciler.store.read")
        } else {
            // Read-only (the CLI): one connection, one queue.
            reader = writer
            readQueue = writeQueue
        }
        guard try Migrations.version(of: reader) == Migrations.latest else {
            throw SQLiteError(
                code: 1,
                message:
                    "store schema is version \(try Migrations.version(of: reader)), this binary expects \(Migrations.latest); run the daemon once to migrate",
                sql: nil)
        }
    }

    /// Runs `body`, and once more after `reserve` gave its space back if it found the disk full.
    private static func relieved<T>(by reserve: ReserveFile?, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as SQLiteError where error.isDiskFull && reserve?.release() == true {
            return try body()
        }
    }

    /// Passes through the writer: an empty transaction, queued behind every write before it.
    public func probeWrites() async throws {
        try await write { _ in }
    }

    /// Writes and the transactions that committed them (fewer than the writes when they were grouped).
    var writeStatistics: GroupCommit.Statistics { writes.statistics }

    /// The schema version in the file.
    public func schemaVersion() async throws -> Int { try await read { try Migrations.version(of: $0) } }

    func write<T: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws -> T) async throws -> T {
        try await writes.write(body)
    }

    func read<T: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            readQueue.async { [reader] in
                continuation.resume(with: Result { try body(reader) })
            }
        }
    }

    func json<T: Encodable>(_ value: T) throws -> String {
        String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    func decode<T: Decodable>(_ type: T.Type, _ text: String?) throws -> T {
        try decoder.decode(type, from: Data((text ?? "").utf8))
    }

    // MARK: Sessions and orders

    public func track(_ session: TrackedSession, event: DomainEvent, at: Date) async throws -> TrackResult {
        let data = try json(session)
        return try await write { db in
            if let row = try db.query("SELECT data FROM sessions WHERE hpp_session_id = ?", [.text(session.hppSessionID)]).first {
                return .existing(try self.decode(TrackedSession.self, row.string(0)))
            }
            try self.writeSession(db, session, data: data, at: at)
            try self.insertEvent(db, NewEvent(hppSessionID: session.hppSessionID, orderID: nil, event), at: at)
            try db.query("INSERT INTO wakeups (work_key) VALUES (?)", [.text(WorkKey.session(session.hppSessionID).description)])
            return .tracked(session)
        }
    }

    public func session(_ hppSessionID: String) async throws -> TrackedSession? {
        try await read { db in
            try db.query("SELECT data FROM sessions WHERE hpp_session_id = ?", [.text(hppSessionID)]).first
                .map { try self.decode(TrackedSession.self, $0.string(0)) }
        }
    }

    public func order(_ orderID: String) async throws -> TrackedOrder? {
        try await read { db in
            try db.query("SELECT data FROM orders WHERE order_id = ?", [.text(orderID)]).first
                .map { try self.decode(TrackedOrder.self, $0.string(0)) }
        }
    }

    public func paymentRequest(_ id: String) async throws -> TrackedPaymentRequest? {
        try await read { db in
            try db.query("SELECT data FROM payment_requests WHERE payment_request_id = ?", [.text(id)]).first
                .map { try self.decode(TrackedPaymentRequest.self, $0.string(0)) }
        }
    }

    public func intent(_ key: String) async throws -> Intent? {
        try await read { db in
            try db.query("SELECT data FROM intents WHERE key = ?", [.text(key)]).first.map { try self.decode(Intent.self, $0.string(0)) }
        }
    }

    /// One daemon per file (its lock): there is no lease to check.
    public func commit(_ change: Change, at: Date, fencedBy key: WorkKey?) async throws {
        guard !change.isEmpty else { return }
        let sessions = try change.sessions.map { ($0, try json($0)) }
        let orders = try change.orders.map { ($0, try json($0)) }
        let newOrders = try change.newOrders.map { ($0, try json($0)) }
        let paymentRequests = try change.paymentRequests.map { ($0, try json($0)) }
        let intents = try change.intents.map { ($0, try json($0)) }
        let outcomes = try change.outcomes.map { ($0, try json($0)) }
        let read = change.intentRead.flatMap { $0.isWritten(by: change) ? $0 : nil }
        try await write { db in
            if let read {
                let stored = try db.query("SELECT state, attempts FROM intents WHERE key = ?", [.text(read.key)]).first
                guard read.isStored(state: stored?.string(0), attempts: stored?.int(1)) else { throw IntentMoved(key: read.key) }
            }
            for (session, data) in sessions { try self.writeSession(db, session, data: data, at: at) }
            for (order, data) in newOrders { try self.writeOrder(db, order, data: data, at: at, onlyIfNew: true) }
            for (order, data) in orders { try self.writeOrder(db, order, data: data, at: at, onlyIfNew: false) }
            for (request, data) in paymentRequests { try self.writePaymentRequest(db, request, data: data, at: at) }
            for (intent, data) in intents { try self.writeIntent(db, intent, data: data, at: at) }
            for event in change.events { try self.insertEvent(db, event, at: at) }
            for (outcome, data) in outcomes { try self.insertOutcome(db, outcome, data: data, at: at) }
            for capture in change.ledgerCaptures { try self.insertLedger(db, LedgerRow(capture)) }
            for refund in change.ledgerRefunds { try self.insertLedger(db, LedgerRow(refund)) }
            for request in change.finishedCaptureRequests {
                try db.query(
                    "UPDATE capture_requests SET state = ?, note = ? WHERE id = ?",
                    [.text(request.state.rawValue), .text(request.note), .integer(request.id)])
            }
            for hold in change.holds {
                try db.query(
                    "INSERT INTO holds (work_key, held_at, held_by) VALUES (?, ?, ?) ON CONFLICT(work_key) DO NOTHING",
                    [.text(hold.key.description), SQLValue(at), .text(hold.by)])
            }
            for key in change.releases { try db.query("DELETE FROM holds WHERE work_key = ?", [.text(key.description)]) }
            for answer in change.answeredRequests {
                try db.query(
                    "UPDATE operator_requests SET state = ?, note = ?, answered_at = ? WHERE id = ?",
                    [.text(answer.state.rawValue), .text(answer.note), SQLValue(at), .integer(answer.id)])
            }
            for entry in change.health {
                try db.query(
                    "INSERT INTO health (name, at, detail) VALUES (?, ?, ?) ON CONFLICT(name) DO UPDATE SET at = excluded.at, detail = excluded.detail",
                    [.text(entry.key.rawValue), SQLValue(at), .text(entry.detail)])
            }
        }
    }

    private func writeSession(_ db: SQLiteConnection, _ session: TrackedSession, data: String, at: Date) throws {
        try db.query(
            """
            INSERT INTO sessions (hpp_session_id, kp_session_id, order_id, merchant_reference, phase, outcome, next_due, deadline, tracked_at, updated_at, data, account)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(hpp_session_id) DO UPDATE SET order_id = excluded.order_id, phase = excluded.phase, outcome = excluded.outcome,
              next_due = excluded.next_due, deadline = excluded.deadline, updated_at = excluded.updated_at, data = excluded.data
            """,
            [
                .text(session.hppSessionID), .text(session.kpSessionID), SQLValue(session.orderID), SQLValue(session.merchantReference),
                .text(session.phase.rawValue), SQLValue(session.outcome?.rawValue), SQLValue(session.isOpen ? session.nextDueAt : nil),
                SQLValue(session.deadline), SQLValue(session.trackedAt), SQLValue(at), .text(data), .text(session.account.rawValue),
            ])
    }

    private func writeOrder(_ db: SQLiteConnection, _ order: TrackedOrder, data: String, at: Date, onlyIfNew: Bool) throws {
        let conflict =
            onlyIfNew
            ? "DO NOTHING"
            : "DO UPDATE SET phase = excluded.phase, outcome = excluded.outcome, next_due = excluded.next_due, deadline = excluded.deadline, updated_at = excluded.updated_at, data = excluded.data"
        try db.query(
            """
            INSERT INTO orders (order_id, hpp_session_id, merchant_reference, phase, outcome, next_due, deadline, created_at, updated_at, data, account)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(order_id) \(conflict)
            """,
            [
                .text(order.orderID), SQLValue(order.hppSessionID), SQLValue(order.merchantReference), .text(order.phase.rawValue),
                SQLValue(order.outcome?.rawValue), SQLValue(order.isOpen ? order.nextDueAt : nil), SQLValue(order.deadline),
                SQLValue(order.createdAt), SQLValue(at), .text(data), .text(order.account.rawValue),
            ])
    }

    private func writePaymentRequest(_ db: SQLiteConnection, _ request: TrackedPaymentRequest, data: String, at: Date) throws {
        try db.query(
            """
            INSERT INTO payment_requests (payment_request_id, state, outcome, next_due, tracked_at, updated_at, data, account) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(payment_request_id) DO UPDATE SET state = excluded.state, outcome = excluded.outcome, next_due = excluded.next_due,
              updated_at = excluded.updated_at, data = excluded.data
            """,
            [
                .text(request.paymentRequestID), SQLValue(request.state?.rawValue), SQLValue(request.outcome?.rawValue),
                SQLValue(request.isOpen ? request.nextDueAt : nil), SQLValue(request.trackedAt), SQLValue(at), .text(data),
                .text(request.account.rawValue),
            ])
    }

    func insertEvent(_ db: SQLiteConnection, _ event: NewEvent, at: Date) throws {
        try db.query(
            "INSERT INTO events (at, hpp_session_id, order_id, kind, message, detail) VALUES (?, ?, ?, ?, ?, ?)",
            [
                SQLValue(at), SQLValue(event.hppSessionID), SQLValue(event.orderID), .text(event.event.kind.rawValue), .text(event.event.message),
                event.detail.isEmpty ? .null : .text(try json(event.detail)),
            ])
    }

    /// An outcome for the outbox writer and the notifier; `data` is its JSON.
    func insertOutcome(_ db: SQLiteConnection, _ outcome: Outcome, data: String, at: Date) throws {
        try db.query(
            "INSERT INTO outcomes (at, kind, hpp_session_id, order_id, data) VALUES (?, ?, ?, ?, ?)",
            [SQLValue(at), .text(outcome.kind.rawValue), SQLValue(outcome.hppSessionID), SQLValue(outcome.orderID), .text(data)])
    }

    // MARK: Scheduling

    /// A row's `account` column (a valid id: only ever written from one).
    static func account(_ text: String?) -> AccountID { text.flatMap(AccountID.init(rawValue:)) ?? .default }

    public func openWork() async throws -> [OpenWork] {
        try await read { db in
            // Dates inside `data` are Foundation's default encoding: seconds since 2001-01-01.
            func encoded(_ row: SQLRow, _ column: Int) -> Date? {
                row.double(column).map { Date(timeIntervalSinceReferenceDate: $0) }
            }
            var work: [OpenWork] = []
            for row in try db.query(
                """
                SELECT hpp_session_id, next_due, phase, deadline, tracked_at, json_extract(data, '$.lastReadAt'),
                  json_extract(data, '$.lastHintAt'), json_extract(data, '$.expiresAt'), account
                FROM sessions WHERE next_due IS NOT NULL
                """)
            {
                let phase = row.string(2).flatMap(TrackedSession.Phase.init) ?? .polling
                let poll = PollProfile(
                    trackedAt: row.date(4) ?? Date(), lastReadAt: encoded(row, 5), lastHintAt: encoded(row, 6), expiresAt: encoded(row, 7))
                work.append(
                    OpenWork(
                        key: .session(row.string(0) ?? ""), due: row.date(1)!, kind: .session(phase, poll), deadline: row.date(3),
                        account: Self.account(row.string(8))))
            }
            for row in try db.query("SELECT order_id, next_due, phase, deadline, account FROM orders WHERE next_due IS NOT NULL") {
                let phase = row.string(2).flatMap(TrackedOrder.Phase.init) ?? .checking
                work.append(
                    OpenWork(
                        key: .order(row.string(0) ?? ""), due: row.date(1)!, kind: .order(phase), deadline: row.date(3),
                        account: Self.account(row.string(4))))
            }
            for row in try db.query("SELECT payment_request_id, next_due, account FROM payment_requests WHERE next_due IS NOT NULL") {
                work.append(
                    OpenWork(
                        key: .paymentRequest(row.string(0) ?? ""), due: row.date(1)!, kind: .paymentRequest, account: Self.account(row.string(2))))
            }
            var refunds: [OpenWork] = []
            for row in try db.query(
                """
                SELECT subject, min(coalesce(next_attempt, created_at)) FROM intents
                WHERE kind = 'refund' AND state IN ('intended', 'sent', 'ambiguous') GROUP BY subject
                """)
            {
                refunds.append(OpenWork(key: .order(row.string(0) ?? ""), due: row.date(1)!, kind: .refund))
            }
            return OpenWork.merging(work, refunds: refunds)
        }
    }

    public func wakeups(after sequence: Int64, includingDelivered: Bool) async throws -> (keys: [WorkKey], last: Int64) {
        try await write { db in
            let rows = try db.query("SELECT id, work_key, delivered FROM wakeups WHERE id > ? ORDER BY id", [.integer(sequence)])
            guard let last = rows.last?.int64(0) else { return ([], sequence) }
            try db.query("DELETE FROM wakeups WHERE id <= ?", [.integer(last)])
            return (rows.filter { includingDelivered || $0.int(2) == 0 }.compactMap { $0.string(1).flatMap(WorkKey.init) }, last)
        }
    }

    public func requestCapture(orderID: String, amount: Int?, at: Date) async throws -> CaptureRequestResult {
        try await write { db in
            let order = try self.order(db, orderID)
            switch IngestPlanner.captureRequest(orderID: orderID, amount: amount, order: order, requestedBy: "the command line") {
            case .write(var writes):
                writes.delivered = false
                guard let id = try self.apply(db, writes, sessionData: nil, at: at) else {
                    preconditionFailure("a capture request's writes record one")
                }
                return .accepted(id: id)
            case .unknownOrder: return .unknownOrder
            case .refused(let why): return .refused(why)
            }
        }
    }

    /// Over the stored version unless that one counts more attempts (``Intent/attempts`` never goes back).
    private func writeIntent(_ db: SQLiteConnection, _ intent: Intent, data: String, at: Date) throws {
        try db.query(
            """
            INSERT INTO intents (key, kind, subject, state, attempts, next_attempt, created_at, updated_at, data)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(key) DO UPDATE SET state = excluded.state, attempts = excluded.attempts,
              next_attempt = excluded.next_attempt, updated_at = excluded.updated_at, data = excluded.data
            WHERE intents.attempts <= excluded.attempts
            """,
            [
                .text(intent.key), .text(intent.kind.rawValue), .text(intent.subject), .text(intent.state.rawValue),
                SQLValue(intent.attempts), SQLValue(intent.nextAttemptAt), SQLValue(intent.createdAt), SQLValue(at), .text(data),
            ])
    }

    private func order(_ db: SQLiteConnection, _ orderID: String) throws -> TrackedOrder? {
        try db.query("SELECT data FROM orders WHERE order_id = ?", [.text(orderID)]).first.map { try decode(TrackedOrder.self, $0.string(0)) }
    }

    public func ingest(_ record: IngestRecord, at: Date) async throws -> IngestResult {
        let sessionData = try sessionData(of: record)
        do {
            return try await write { db in try self.ingest(db, record, sessionData: sessionData, at: at) }
        } catch let refusal as Refusal {
            // Rolled back: a refused delivery leaves no trace but its rejection record.
            return refusal.result
        }
    }

    /// One write for all of them, each in a savepoint of its own: a refused one is undone alone, and the batch costs
    /// one commit (and shares it with whatever else the group commit holds).
    public func ingest(_ records: [IngestRecord], at: Date) async throws -> [IngestResult] {
        let prepared = try records.map { ($0, try sessionData(of: $0)) }
        return try await write { db in
            try prepared.map { record, sessionData in
                do {
                    return try db.savepoint { try self.ingest(db, record, sessionData: sessionData, at: at) }
                } catch let refusal as Refusal {
                    return refusal.result
                }
            }
        }
    }

    /// The JSON of the session `record` may start tracking, made before the write (the writer is shared).
    private func sessionData(of record: IngestRecord) throws -> String? {
        switch record.action {
        case .hintSession(_, let session?): try json(session)
        case .track(let session): try json(session)
        default: nil
        }
    }

    /// The delivery's row, then what ``IngestPlanner`` decides from what its lookup finds.
    private func ingest(_ db: SQLiteConnection, _ record: IngestRecord, sessionData: String?, at: Date) throws -> IngestResult {
        if let key = record.dedupeKey {
            if let seen = try db.query("SELECT received_at FROM deliveries WHERE dedupe_key = ?", [.text(key)]).first {
                try db.query("UPDATE deliveries SET repeats = repeats + 1 WHERE dedupe_key = ?", [.text(key)])
                return .repeated(firstSeen: seen.date(0) ?? at)
            }
            try db.query(
                "INSERT INTO deliveries (dedupe_key, kind, source, received_at, summary) VALUES (?, ?, ?, ?, ?)",
                [.text(key), .text(record.kind), .text(record.source), SQLValue(at), .text(record.summary)])
        }
        switch IngestPlanner.decide(record, found: try find(db, IngestPlanner.lookup(record)), at: at) {
        case .refuse(let answer): throw Refusal(result: answer)
        case .write(let writes, let answer):
            try apply(db, writes, sessionData: sessionData, at: at)
            return answer
        }
    }

    private func find(_ db: SQLiteConnection, _ lookup: IngestLookup) throws -> IngestFound {
        switch lookup {
        case .nothing:
            return .nothing
        case .session(let id):
            return .session(tracked: try db.query("SELECT 1 FROM sessions WHERE hpp_session_id = ?", [.text(id)]).first != nil)
        case .openSessionsOfPayment(let kpSessionID):
            return .openSessions(
                try db.query("SELECT hpp_session_id FROM sessions WHERE kp_session_id = ? AND next_due IS NOT NULL", [.text(kpSessionID)]).compactMap
                { $0.string(0) })
        case .orderSession(let orderID):
            return .orderSession(
                hppSessionID: try db.query("SELECT hpp_session_id FROM orders WHERE order_id = ?", [.text(orderID)]).first.map { $0.string(0) })
        case .order(let orderID):
            return .order(try order(db, orderID))
        case .paymentRequest(let id):
            return .paymentRequest(
                try db.query("SELECT data FROM payment_requests WHERE payment_request_id = ?", [.text(id)]).first.map {
                    try decode(TrackedPaymentRequest.self, $0.string(0))
                })
        case .refund(let orderID, let key):
            return .refund(
                order: try order(db, orderID),
                existing: try db.query("SELECT data FROM intents WHERE key = ?", [.text(key)]).first.map { try decode(Intent.self, $0.string(0)) })
        }
    }

    /// Writes what an ingest decided (the writer's lookup found the session untracked: nothing else writes between);
    /// returns the capture request's id when it recorded one. `sessionData`: the new session's JSON, if made already.
    @discardableResult
    private func apply(_ db: SQLiteConnection, _ writes: IngestWrites, sessionData: String?, at: Date) throws -> Int64? {
        if let session = writes.newSession { try writeSession(db, session, data: try sessionData ?? json(session), at: at) }
        if let request = writes.paymentRequest { try writePaymentRequest(db, request, data: try json(request), at: at) }
        if let intent = writes.intent { try writeIntent(db, intent, data: try json(intent), at: at) }
        if let hint = writes.disputeHint {
            try db.query(
                """
                INSERT INTO dispute_hints (dispute_id, hinted_at, account) VALUES (?, ?, ?)
                ON CONFLICT (dispute_id) DO UPDATE SET hinted_at = excluded.hinted_at, account = excluded.account
                """,
                [.text(hint.disputeID), SQLValue(at), .text(hint.account.rawValue)])
        }
        var captureRequestID: Int64?
        if let capture = writes.captureRequest {
            try db.query(
                "INSERT INTO capture_requests (order_id, amount, requested_at) VALUES (?, ?, ?)",
                [.text(capture.orderID), SQLValue(capture.amount), SQLValue(at)])
            let id = db.lastInsertRowID
            var event = capture.event
            event.detail["request"] = "\(id)"
            try insertEvent(db, event, at: at)
            captureRequestID = id
        }
        for event in writes.events { try insertEvent(db, event, at: at) }
        for key in writes.wakeups {
            try db.query("INSERT INTO wakeups (work_key, delivered) VALUES (?, ?)", [.text(key.description), .integer(writes.delivered ? 1 : 0)])
        }
        return captureRequestID
    }

    /// Ends an ingest transaction without committing anything.
    private struct Refusal: Error {
        let result: IngestResult
    }

    public func recordRejection(source: String, status: Int, error: String, detail: String, at: Date) async throws {
        try await write { db in
            _ = try db.query(
                "INSERT INTO rejections (at, source, status, error, detail) VALUES (?, ?, ?, ?, ?)",
                [SQLValue(at), .text(source), SQLValue(status), .text(error), .text(String(detail.prefix(1_000)))])
        }
    }

    // MARK: Reading for people

    public func timeline(for id: String) async throws -> PaymentTimeline {
        try await read { db in
            let sessions = try db.query(
                "SELECT data FROM sessions WHERE hpp_session_id = ?1 OR kp_session_id = ?1 OR order_id = ?1 OR merchant_reference = ?1",
                [.text(id)]
            ).map { try self.decode(TrackedSession.self, $0.string(0)) }
            var orderIDs = Set(sessions.compactMap(\.orderID))
            orderIDs.formUnion(
                try db.query("SELECT order_id FROM orders WHERE order_id = ?1 OR merchant_reference = ?1", [.text(id)]).compactMap { $0.string(0) })
            let orders = try orderIDs.sorted().compactMap { orderID in
                try db.query("SELECT data FROM orders WHERE order_id = ?", [.text(orderID)]).first.map {
                    try self.decode(TrackedOrder.self, $0.string(0))
                }
            }
            let sessionIDs = Set(sessions.map(\.hppSessionID)).union(orders.compactMap(\.hppSessionID))
            var events: [RecordedEvent] = []
            var outcomes: [StoredOutcome] = []
            var intents: [Intent] = []
            for subject in sessionIDs.sorted() {
                events += try db.query(
                    "SELECT id, at, hpp_session_id, order_id, kind, message, detail FROM events WHERE hpp_session_id = ?", [.text(subject)]
                ).map(self.event)
                outcomes += try db.query(
                    "SELECT id, at, data, outbox_written, notified, notify_attempts, notify_next FROM outcomes WHERE hpp_session_id = ?",
                    [.text(subject)]
                ).map(self.outcome)
                intents += try db.query("SELECT data FROM intents WHERE subject = ?", [.text(subject)]).map {
                    try self.decode(Intent.self, $0.string(0))
                }
            }
            for orderID in orderIDs.sorted() {
                events += try db.query(
                    "SELECT id, at, hpp_session_id, order_id, kind, message, detail FROM events WHERE order_id = ? AND hpp_session_id IS NULL",
                    [.text(orderID)]
                ).map(self.event)
                outcomes += try db.query(
                    "SELECT id, at, data, outbox_written, notified, notify_attempts, notify_next FROM outcomes WHERE order_id = ? AND hpp_session_id IS NULL",
                    [.text(orderID)]
                ).map(self.outcome)
                intents += try db.query("SELECT data FROM intents WHERE subject = ?", [.text(orderID)]).map {
                    try self.decode(Intent.self, $0.string(0))
                }
            }
            return PaymentTimeline(
                sessions: sessions, orders: orders, intents: intents.sorted { $0.createdAt < $1.createdAt }, events: events.sorted { $0.id < $1.id },
                outcomes: outcomes.sorted { $0.id < $1.id })
        }
    }

    public func list(phase: String?, account: AccountID?, limit: Int) async throws -> StoreListing {
        if phase == "held" { return try await listHeld(account: account, limit: limit) }
        return try await read { db in
            // ?1 the phase (or NULL: any), ?2 the account (or NULL: every one).
            let filter = [SQLValue(phase), SQLValue(account?.rawValue)]
            let sessions = try db.query(
                """
                SELECT data FROM sessions WHERE (?1 IS NULL OR phase = ?1 OR outcome = ?1) AND (?2 IS NULL OR account = ?2)
                ORDER BY updated_at DESC LIMIT \(limit)
                """, filter
            ).map { try self.decode(TrackedSession.self, $0.string(0)) }
            let orders = try db.query(
                """
                SELECT data FROM orders WHERE (?1 IS NULL OR phase = ?1 OR outcome = ?1) AND (?2 IS NULL OR account = ?2)
                ORDER BY updated_at DESC LIMIT \(limit)
                """, filter
            ).map { try self.decode(TrackedOrder.self, $0.string(0)) }
            let intents = try db.query(
                """
                SELECT data FROM intents WHERE (?1 IS NULL OR state = ?1 OR kind = ?1) AND (?2 IS NULL OR \(SharedSQL.intentOfAccount("?2")))
                ORDER BY updated_at DESC LIMIT \(limit)
                """, filter
            ).map { try self.decode(Intent.self, $0.string(0)) }
            return StoreListing(sessions: sessions, orders: orders, intents: intents)
        }
    }

    public func summary(now: Date) async throws -> StatusSummary {
        try await read { db in
            func counts(_ sql: String) throws -> [String: Int] {
                Dictionary(uniqueKeysWithValues: try db.query(sql).map { ($0.string(0) ?? "?", $0.int(1) ?? 0) })
            }
            var summary = StatusSummary(
                sessionsByPhase: try counts("SELECT phase, COUNT(*) FROM sessions GROUP BY phase"),
                ordersByPhase: try counts("SELECT phase, COUNT(*) FROM orders GROUP BY phase"),
                intentsByState: try counts("SELECT state, COUNT(*) FROM intents GROUP BY state"),
                outcomesByKind: try counts("SELECT kind, COUNT(*) FROM outcomes GROUP BY kind"),
                backlog: 0, undeliveredOutcomes: 0)
            let oldest = try db.query(
                """
                SELECT id, since FROM (
                  SELECT hpp_session_id AS id, tracked_at AS since FROM sessions WHERE next_due IS NOT NULL
                  UNION ALL SELECT order_id, created_at FROM orders WHERE next_due IS NOT NULL) ORDER BY since LIMIT 1
                """
            ).first
            summary.oldestOpenID = oldest?.string(0)
            summary.oldestOpenSince = oldest?.date(1)
            let deadline = try db.query(
                """
                SELECT what, deadline FROM (
                  SELECT 'session ' || hpp_session_id AS what, deadline FROM sessions WHERE next_due IS NOT NULL AND deadline IS NOT NULL
                  UNION ALL SELECT 'order ' || order_id, deadline FROM orders WHERE next_due IS NOT NULL AND deadline IS NOT NULL) ORDER BY deadline LIMIT 1
                """
            ).first
            summary.nextDeadlineWhat = deadline?.string(0)
            summary.nextDeadline = deadline?.date(1)
            let due = try db.query(
                "SELECT MIN(d) FROM (SELECT MIN(next_due) AS d FROM sessions UNION ALL SELECT MIN(next_due) FROM orders)"
            ).first
            summary.nextDueAt = due?.date(0)
            let nowValue = SQLValue(now)
            // Held work is not backlog: nothing runs it until it is released.
            summary.backlog =
                (try db.query(
                    """
                    SELECT (SELECT COUNT(*) FROM sessions WHERE next_due <= ?1 AND 'session:' || hpp_session_id NOT IN (SELECT work_key FROM holds))
                      + (SELECT COUNT(*) FROM orders WHERE next_due <= ?1 AND 'order:' || order_id NOT IN (SELECT work_key FROM holds))
                    """, [nowValue]
                ).first?.int(0)) ?? 0
            summary.held = (try db.query("SELECT COUNT(*) FROM holds").first?.int(0)) ?? 0
            summary.addAccountCounts(
                try db.query(SharedSQL.countsByAccount).map { ($0.string(0) ?? "s", $0.string(1) ?? "default", $0.string(2) ?? "?", $0.int(3) ?? 0) })
            summary.undeliveredOutcomes = (try db.query("SELECT COUNT(*) FROM outcomes WHERE outbox_written = 0").first?.int(0)) ?? 0
            summary.rejectionsLastDay =
                (try db.query("SELECT COUNT(*) FROM rejections WHERE at >= ?", [SQLValue(now.addingTimeInterval(-86_400))]).first?.int(0)) ?? 0
            if let last = try db.query("SELECT at, source, status, error, detail FROM rejections ORDER BY id DESC LIMIT 1").first {
                summary.lastRejection =
                    "\((last.date(0) ?? now).formatted(.iso8601)) \(last.string(1) ?? "?") \(last.int(2) ?? 0) \(last.string(3) ?? ""): \(last.string(4) ?? "")"
            }
            for row in try db.query("SELECT name, at, detail FROM health") {
                switch row.string(0).flatMap(HealthKey.init(rawValue:)) {
                case .klarnaOK: summary.lastKlarnaSuccess = row.date(1)
                case .klarnaError:
                    summary.lastKlarnaError = row.date(1)
                    summary.lastKlarnaErrorDetail = row.string(2)
                case nil: break
                }
            }
            return summary
        }
    }

    // MARK: Backup

    /// Writes a consistent copy of the store to `path` (which must not exist) while the daemon goes on writing:
    /// `VACUUM INTO` reads one snapshot through the read connection, so no commit waits for it. The copy is a
    /// plain SQLite file (no WAL to carry along), mode 0640 like the store: it holds authorization tokens.
    public func backup(to path: String) async throws {
        _ = try await read { db in try db.query("VACUUM INTO ?", [.text(path)]) }
        chmod(path, 0o640)
    }

    /// SQLite's `PRAGMA integrity_check`: `["ok"]` for a sound file, else the problems it found.
    public func integrityCheck() async throws -> [String] {
        try await read { db in try db.query("PRAGMA integrity_check").compactMap { $0.string(0) } }
    }

    // MARK: Outcomes

    public func undeliveredOutcomes(now: Date, limit: Int) async throws -> [StoredOutcome] {
        try await read { db in
            try db.query(
                """
                SELECT id, at, data, outbox_written, notified, notify_attempts, notify_next FROM outcomes
                WHERE outbox_written = 0 OR (notified = 0 AND (notify_next IS NULL OR notify_next <= ?)) ORDER BY id LIMIT ?
                """,
                [SQLValue(now), SQLValue(limit)]
            ).map(self.outcome)
        }
    }

    public func markOutboxWritten(_ ids: [Int64], notified: Bool) async throws {
        guard !ids.isEmpty else { return }
        try await write { db in
            for id in ids {
                _ = try db.query(
                    "UPDATE outcomes SET outbox_written = 1, notified = notified OR ? WHERE id = ?", [.integer(notified ? 1 : 0), .integer(id)])
            }
        }
    }

    public func markNotified(_ id: Int64) async throws {
        try await write { db in _ = try db.query("UPDATE outcomes SET notified = 1 WHERE id = ?", [.integer(id)]) }
    }

    public func notifyFailed(_ id: Int64, nextAt: Date?) async throws {
        try await write { db in
            // No next attempt: given up; counted as delivered so the queue moves on (the outbox file stays).
            _ = try db.query(
                "UPDATE outcomes SET notify_attempts = notify_attempts + 1, notify_next = ?, notified = ? WHERE id = ?",
                [SQLValue(nextAt), .integer(nextAt == nil ? 1 : 0), .integer(id)])
        }
    }

    private func event(_ row: SQLRow) throws -> RecordedEvent {
        RecordedEvent(
            id: row.int64(0)!, at: row.date(1)!, hppSessionID: row.string(2), orderID: row.string(3), kind: row.string(4) ?? "",
            message: row.string(5) ?? "", detail: try row.string(6).map { try decode([String: String].self, $0) } ?? [:])
    }

    private func outcome(_ row: SQLRow) throws -> StoredOutcome {
        StoredOutcome(
            id: row.int64(0)!, at: row.date(1)!, outcome: try decode(Outcome.self, row.string(2)), outboxWritten: row.int(3) == 1,
            notified: row.int(4) == 1, notifyAttempts: row.int(5) ?? 0, notifyNextAt: row.date(6))
    }
}
