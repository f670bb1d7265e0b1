import Foundation
import PostgresNIO
import ReconcilerCore
import ReconcilerStore

/// A step's whole commit as one statement: the lease fence and every write of the ``Change``, one exchange with the
/// server and one implicit transaction, where a `BEGIN`, the fence, a statement per row and a `COMMIT` each waited
/// for its answer (measured in BENCHMARKS.md).
///
/// The rows travel as one JSON document (`$4`), a list per table, each read with `jsonb_to_recordset`; every write
/// joins `fenced`, which has its one row only when the step may commit (no fence asked, or this daemon's lease row,
/// share-locked until the statement commits, while this daemon's heartbeat lease lasts). A lost or lapsed lease
/// therefore writes nothing, and the answer row says which. Timestamps travel as microseconds since 2000-01-01, as
/// postgres-nio binds a `Date`, so a row reads back exactly as a bound one would.
///
/// The sub-statements of one statement see the same snapshot and may not write one row twice, so the rows are made
/// disjoint first (``ChangeRows``): the last version of a row wins, as it did when each was its own statement.
///
/// A change that names the version of a shared intent its step read (``Change/intentRead``) and writes that intent
/// goes as ``CommitReadIntent``: the intent is written first and alone (`g`), its update taking the row's lock and
/// made only if the stored row is still the version read, which `ON CONFLICT`'s condition tests against the newest
/// committed row, not the statement's snapshot; an absent read never updates. Every other write joins `written`,
/// which has its row only when that intent was written, so a step that lost the race writes nothing, and the answer's
/// third column says so. Every other change goes as this one, which spares the intent's test.
enum CommitChange: StatementText {
    /// `$1` the fencing key (null: unfenced), `$2` this daemon, `$3` the commit's time, `$4` the rows.
    static let sql = text(guarded: false)

    /// The statement, with the intent read's test when `guarded`.
    static func text(guarded: Bool) -> String {
        let source = guarded ? "written" : "fenced"
        return """
            WITH fence AS (
              SELECT l.holder IS NOT DISTINCT FROM $2::text AS mine,
                coalesce((SELECT leased_until > clock_timestamp() FROM daemons WHERE id = l.holder), false) AS current
              FROM work_leases l WHERE l.work_key = $1::text FOR SHARE OF l),
            fenced AS (SELECT $4::text::jsonb AS j WHERE $1::text IS NULL OR EXISTS (SELECT FROM fence WHERE mine AND current)),
            \(guarded ? guardedWrite : "")s AS (
              \(JSONRows.insertSessions(from: source, "\(source).j->'sessions'", at: "$3::timestamptz"))
              ON CONFLICT (hpp_session_id) DO UPDATE SET order_id = excluded.order_id, phase = excluded.phase, outcome = excluded.outcome,
                next_due = excluded.next_due, deadline = excluded.deadline, updated_at = excluded.updated_at, data = excluded.data),
            o AS (
              \(JSONRows.insertOrders(from: source, "\(source).j->'orders'", at: "$3::timestamptz"))
              ON CONFLICT (order_id) DO UPDATE SET phase = excluded.phase, outcome = excluded.outcome, next_due = excluded.next_due,
                deadline = excluded.deadline, updated_at = excluded.updated_at, data = excluded.data),
            n AS (\(JSONRows.insertOrders(from: source, "\(source).j->'new_orders'", at: "$3::timestamptz")) ON CONFLICT (order_id) DO NOTHING),
            r AS (
              INSERT INTO payment_requests (payment_request_id, state, outcome, next_due, tracked_at, updated_at, data, account)
              SELECT x.id, x.state, x.outcome, \(JSONRows.time("x.next_due")), \(JSONRows.time("x.tracked_at")), $3::timestamptz, x.data, x.account
              FROM \(source), jsonb_to_recordset(\(source).j->'payment_requests') AS x(
                id text, state text, outcome text, next_due bigint, tracked_at bigint, data text, account text)
              ON CONFLICT (payment_request_id) DO UPDATE SET state = excluded.state, outcome = excluded.outcome, next_due = excluded.next_due,
                updated_at = excluded.updated_at, data = excluded.data),
            i AS (\(insertIntents(guarded ? "x.key IS DISTINCT FROM \(source).j->'intent_read'->>'key'" : "true", from: source, updating: "intents.attempts <= excluded.attempts"))),
            e AS (\(JSONRows.insertEvents(from: source, "\(source).j->'events'", at: "$3::timestamptz"))),
            c AS (
              INSERT INTO outcomes (at, kind, hpp_session_id, order_id, data)
              SELECT $3::timestamptz, x.kind, x.session, x.order_id, x.data
              FROM \(source), ROWS FROM (jsonb_to_recordset(\(source).j->'outcomes') AS (kind text, session text, order_id text, data text))
                WITH ORDINALITY AS x(kind, session, order_id, data, n)
              ORDER BY x.n),
            l AS (
              INSERT INTO ledger (order_id, entry, entry_key, klarna_id, amount, currency, at, source)
              SELECT x.order_id, x.entry, x.entry_key, x.klarna_id, x.amount, x.currency, \(JSONRows.time("x.at")), x.source
              FROM \(source), jsonb_to_recordset(\(source).j->'ledger') AS x(
                order_id text, entry text, entry_key text, klarna_id text, amount bigint, currency text, at bigint, source text)
              ON CONFLICT (order_id, entry, entry_key) DO NOTHING),
            q AS (
              UPDATE capture_requests SET state = x.state, note = x.note
              FROM \(source), jsonb_to_recordset(\(source).j->'capture_requests') AS x(id bigint, state text, note text) WHERE capture_requests.id = x.id),
            h AS (
              INSERT INTO holds (work_key, held_at, held_by)
              SELECT x.key, $3::timestamptz, x.by FROM \(source), jsonb_to_recordset(\(source).j->'holds') AS x(key text, by text)
              ON CONFLICT (work_key) DO NOTHING),
            u AS (
              DELETE FROM holds USING \(source), jsonb_array_elements_text(\(source).j->'releases') AS x(key) WHERE holds.work_key = x.key),
            a AS (
              UPDATE operator_requests SET state = x.state, note = x.note, answered_at = $3::timestamptz
              FROM \(source), jsonb_to_recordset(\(source).j->'answers') AS x(id bigint, state text, note text) WHERE operator_requests.id = x.id),
            k AS (
              INSERT INTO health (name, at, detail)
              SELECT x.name, $3::timestamptz, x.detail FROM \(source), jsonb_to_recordset(\(source).j->'health') AS x(name text, detail text)
              ON CONFLICT (name) DO UPDATE SET at = excluded.at, detail = excluded.detail)
            SELECT (SELECT mine FROM fence), (SELECT current FROM fence), \(guarded ? "EXISTS (SELECT FROM written)" : "true")
            """
    }

    /// The intent read, written first, and the row every other write joins.
    private static let guardedWrite = """
        g AS (
          \(insertIntents(
            "x.key = fenced.j->'intent_read'->>'key'", from: "fenced",
            updating: "intents.state = (SELECT j->'intent_read'->>'state' FROM fenced) AND intents.attempts = (SELECT (j->'intent_read'->>'attempts')::integer FROM fenced)"))
          RETURNING 1),
        written AS (
          SELECT j FROM fenced
          WHERE NOT EXISTS (SELECT FROM jsonb_to_recordset(j->'intents') AS x(key text) WHERE x.key = j->'intent_read'->>'key') OR EXISTS (SELECT FROM g)),

        """

    /// Inserts the change's intents for which `condition` holds (over `x`, read from `source`'s list), each over the
    /// stored one of its key where `updating` holds: for the intent read (`g`), that the stored row is the version
    /// read; for every other, that it counts no more attempts (``Intent/attempts`` never goes back, so a commit delayed
    /// past another session's send of their shared intent does not undo it).
    private static func insertIntents(_ condition: String, from source: String, updating: String) -> String {
        """
        INSERT INTO intents (key, kind, subject, state, attempts, next_attempt, created_at, updated_at, data)
          SELECT x.key, x.kind, x.subject, x.state, x.attempts, \(JSONRows.time("x.next_attempt")), \(JSONRows.time("x.created_at")), $3::timestamptz,
            x.data
          FROM \(source), jsonb_to_recordset(\(source).j->'intents') AS x(
            key text, kind text, subject text, state text, attempts integer, next_attempt bigint, created_at bigint, data text)
          WHERE \(condition)
          ON CONFLICT (key) DO UPDATE SET state = excluded.state, attempts = excluded.attempts, next_attempt = excluded.next_attempt,
            updated_at = excluded.updated_at, data = excluded.data
          WHERE \(updating)
        """
    }

    static func bindings(key: String?, holder: String?, at: Date, rows: String) -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 4)
        bindings.append(key)
        bindings.append(holder)
        bindings.append(at)
        bindings.append(rows)
        return bindings
    }
}

/// ``CommitChange`` for a change that writes the shared intent whose version its step read.
enum CommitReadIntent: StatementText {
    static let sql = CommitChange.text(guarded: true)
}

/// The SQL that reads rows from a JSON list (``ChangeRows``' forms), for the statements that write them.
enum JSONRows {
    /// A `bigint` of microseconds since 2000-01-01 (null stays null) as a `timestamptz`.
    static func time(_ column: String) -> String {
        "(timestamptz '2000-01-01 00:00:00+00' + \(column) * interval '1 microsecond')"
    }

    /// Inserts the ``ChangeRows/Session``s of the list at `path` (`source` names the row it is read from), updated
    /// at `at`; the caller adds the conflict clause.
    static func insertSessions(from source: String, _ path: String, at: String) -> String {
        """
        INSERT INTO sessions (hpp_session_id, kp_session_id, order_id, merchant_reference, phase, outcome, next_due, deadline, tracked_at,
            updated_at, data, account)
          SELECT x.id, x.kp, x.order_id, x.reference, x.phase, x.outcome, \(time("x.next_due")), \(time("x.deadline")), \(time("x.tracked_at")),
            \(at), x.data, x.account
          FROM \(source), jsonb_to_recordset(\(path)) AS x(
            id text, kp text, order_id text, reference text, phase text, outcome text, next_due bigint, deadline bigint, tracked_at bigint, data text,
            account text)
        """
    }

    /// Inserts the ``ChangeRows/Order``s of the list at `path`, as ``insertSessions(from:_:at:)`` does sessions.
    static func insertOrders(from source: String, _ path: String, at: String) -> String {
        """
        INSERT INTO orders (order_id, hpp_session_id, merchant_reference, phase, outcome, next_due, deadline, created_at, updated_at, data, account)
          SELECT x.id, x.session, x.reference, x.phase, x.outcome, \(time("x.next_due")), \(time("x.deadline")), \(time("x.created_at")), \(at), x.data,
            x.account
          FROM \(source), jsonb_to_recordset(\(path)) AS x(
            id text, session text, reference text, phase text, outcome text, next_due bigint, deadline bigint, created_at bigint, data text,
            account text)
        """
    }

    /// Inserts the ``ChangeRows/Event``s of the list at `path` in their order (after the order of `after`, when the
    /// list is one of several), at `at`.
    static func insertEvents(from source: String, _ path: String, at: String, after: String? = nil) -> String {
        """
        INSERT INTO events (at, hpp_session_id, order_id, kind, message, detail)
          SELECT \(at), x.session, x.order_id, x.kind, x.message, x.detail
          FROM \(source), ROWS FROM (jsonb_to_recordset(\(path)) AS (session text, order_id text, kind text, message text, detail text))
            WITH ORDINALITY AS x(session, order_id, kind, message, detail, n)
          ORDER BY \(after.map { "\($0), " } ?? "")x.n
        """
    }
}

/// The rows of a ``Change`` as ``CommitChange`` reads them, one list per table, made disjoint: one version of each
/// row (the last), a new order only when no version of it is written, a hold only when it is not released too.
struct ChangeRows: Encodable {
    struct Session: Encodable {
        var id, kp: String
        var order_id, reference: String?
        var phase: String
        var outcome: String?
        var next_due, deadline: Int64?
        var tracked_at: Int64
        var data: String
        var account: String

        init(_ session: TrackedSession, data: String) {
            id = session.hppSessionID
            kp = session.kpSessionID
            order_id = session.orderID
            reference = session.merchantReference
            phase = session.phase.rawValue
            outcome = session.outcome?.rawValue
            next_due = ChangeRows.time(session.isOpen ? session.nextDueAt : nil)
            deadline = ChangeRows.time(session.deadline)
            tracked_at = ChangeRows.time(session.trackedAt)
            self.data = data
            account = session.account.rawValue
        }
    }

    struct Order: Encodable {
        var id: String
        var session, reference: String?
        var phase: String
        var outcome: String?
        var next_due, deadline: Int64?
        var created_at: Int64
        var data: String
        var account: String
    }

    struct PaymentRequest: Encodable {
        var id: String
        var state, outcome: String?
        var next_due: Int64?
        var tracked_at: Int64
        var data: String
        var account: String
    }

    struct IntentRow: Encodable {
        var key, kind, subject, state: String
        var attempts: Int
        var next_attempt: Int64?
        var created_at: Int64
        var data: String
    }

    struct Event: Encodable {
        var session, order_id: String?
        var kind, message: String
        var detail: String?

        init(_ event: NewEvent, json: (any Encodable) throws -> String) throws {
            session = event.hppSessionID
            order_id = event.orderID
            kind = event.event.kind.rawValue
            message = event.event.message
            detail = event.detail.isEmpty ? nil : try json(event.detail)
        }
    }

    struct OutcomeRow: Encodable {
        var kind: String
        var session, order_id: String?
        var data: String
    }

    struct Ledger: Encodable {
        var order_id, entry, entry_key: String
        var klarna_id: String?
        var amount: Int
        var currency: String?
        var at: Int64
        var source: String
    }

    struct Answer: Encodable {
        var id: Int64
        var state: String
        var note: String
    }

    struct Hold: Encodable {
        var key, by: String
    }

    struct Health: Encodable {
        var name: String
        var detail: String
    }

    var sessions: [Session] = []
    var orders: [Order] = []
    var new_orders: [Order] = []
    var payment_requests: [PaymentRequest] = []
    var intents: [IntentRow] = []
    var events: [Event] = []
    var outcomes: [OutcomeRow] = []
    var ledger: [Ledger] = []
    var capture_requests: [Answer] = []
    var holds: [Hold] = []
    var releases: [String] = []
    var answers: [Answer] = []
    var health: [Health] = []
    var intent_read: IntentRead?

    struct IntentRead: Encodable {
        var key: String
        var state: String?
        var attempts: Int
    }

    /// `json` encodes a stored row's `data` (and an event's detail) as the store's other writes do.
    init(_ change: Change, health entries: [(key: HealthKey, detail: String)], json: (any Encodable) throws -> String) throws {
        sessions = try Self.lastOfEach(change.sessions, by: \.hppSessionID).map { Session($0, data: try json($0)) }
        func order(_ order: TrackedOrder) throws -> Order {
            Order(
                id: order.orderID, session: order.hppSessionID, reference: order.merchantReference, phase: order.phase.rawValue,
                outcome: order.outcome?.rawValue, next_due: Self.time(order.isOpen ? order.nextDueAt : nil), deadline: Self.time(order.deadline),
                created_at: Self.time(order.createdAt), data: try json(order), account: order.account.rawValue)
        }
        orders = try Self.lastOfEach(change.orders, by: \.orderID).map(order)
        let written = Set(change.orders.map(\.orderID))
        new_orders = try Self.lastOfEach(change.newOrders.filter { !written.contains($0.orderID) }, by: \.orderID).map(order)
        payment_requests = try Self.lastOfEach(change.paymentRequests, by: \.paymentRequestID).map { request in
            PaymentRequest(
                id: request.paymentRequestID, state: request.state?.rawValue, outcome: request.outcome?.rawValue,
                next_due: Self.time(request.isOpen ? request.nextDueAt : nil), tracked_at: Self.time(request.trackedAt), data: try json(request),
                account: request.account.rawValue)
        }
        intents = try Self.lastOfEach(change.intents, by: \.key).map { intent in
            IntentRow(
                key: intent.key, kind: intent.kind.rawValue, subject: intent.subject, state: intent.state.rawValue, attempts: intent.attempts,
                next_attempt: Self.time(intent.nextAttemptAt), created_at: Self.time(intent.createdAt), data: try json(intent))
        }
        events = try change.events.map { try Event($0, json: json) }
        outcomes = try change.outcomes.map { outcome in
            OutcomeRow(kind: outcome.kind.rawValue, session: outcome.hppSessionID, order_id: outcome.orderID, data: try json(outcome))
        }
        ledger = (change.ledgerCaptures.map(LedgerRow.init) + change.ledgerRefunds.map(LedgerRow.init)).map { row in
            Ledger(
                order_id: row.orderID, entry: row.entry.rawValue, entry_key: row.key, klarna_id: row.klarnaID, amount: row.amount,
                currency: row.currency, at: Self.time(row.at), source: row.source.rawValue)
        }
        capture_requests = Self.lastOfEach(
            change.finishedCaptureRequests.map { Answer(id: $0.id, state: $0.state.rawValue, note: $0.note) }, by: \.id)
        releases = Array(Set(change.releases.map(\.description))).sorted()
        let released = Set(releases)
        holds = Self.lastOfEach(
            change.holds.filter { !released.contains($0.key.description) }.map { Hold(key: $0.key.description, by: $0.by) }, by: \.key)
        answers = Self.lastOfEach(change.answeredRequests.map { Answer(id: $0.id, state: $0.state.rawValue, note: $0.note) }, by: \.id)
        health = Self.lastOfEach(entries.map { Health(name: $0.key.rawValue, detail: $0.detail) }, by: \.name)
        if let read = change.intentRead, read.isWritten(by: change) {
            intent_read = IntentRead(key: read.key, state: read.state?.rawValue, attempts: read.attempts)
        }
    }

    /// The last of each key, in the order their keys first appear.
    private static func lastOfEach<Row, Key: Hashable>(_ rows: [Row], by key: (Row) -> Key) -> [Row] {
        var last: [Key: Row] = [:]
        var order: [Key] = []
        for row in rows {
            let id = key(row)
            if last.updateValue(row, forKey: id) == nil { order.append(id) }
        }
        return order.map { last[$0]! }
    }

    /// As postgres-nio binds a `Date`: whole microseconds since 2000-01-01, truncated.
    static func time(_ date: Date?) -> Int64? {
        date.map { Int64($0.timeIntervalSince(Date(timeIntervalSince1970: 946_684_800)) * 1_000_000) }
    }

    static func time(_ date: Date) -> Int64 { time(Optional(date))! }
}
