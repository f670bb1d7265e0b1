import Foundation
import PostgresNIO
import ReconcilerCore
import ReconcilerStore
import Synchronization

/// A step's whole commit as one statement: the lease fence and every write of the ``Change``, one exchange with the
/// server and one implicit transaction, where a `BEGIN`, the fence, a statement per row and a `COMMIT` each waited
/// for its answer (measured in BENCHMARKS.md at 0490c17).
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
/// is guarded: the intent is written first and alone (`g`), its update taking the row's lock and made only if the
/// stored row is still the version read, which `ON CONFLICT`'s condition tests against the newest committed row, not
/// the statement's snapshot; an absent read never updates. Every other write joins `written`, which has its row only
/// when that intent was written, so a step that lost the race writes nothing, and the answer's third column says so.
///
/// A commit has only the writes of the lists its change fills (``statement(for:)``): every write in a statement is
/// set up at each execution, its table and indexes opened and locked, whether it has rows or not. A step fills two to
/// five of the thirteen lists in phase 5c; with only those, a commit took 0.06-0.14 ms (12-30 %) less (BENCHMARKS.md at 0490c17,
/// the eighth look). Each combination is a statement of its own, prepared on a connection at its first use
/// (``CommitShape``).
enum CommitChange {
    /// The lists of a change, in the order the statement writes them.
    enum List: CaseIterable {
        case sessions, orders, newOrders, paymentRequests, intents, events, outcomes, ledger, captureRequests, holds, releases, answers, health
    }

    /// The statement that commits `rows`: `$1` the fencing key (null: unfenced), `$2` this daemon, `$3` the commit's
    /// time, `$4` the rows.
    static func statement(for rows: ChangeRows) -> any StatementText.Type {
        let flags = List.allCases.map(rows.fills) + [rows.intent_read != nil]
        let first: any CommitShapeBuilding.Type = flags[0] ? CommitShape<Included>.self : CommitShape<Omitted>.self
        return first.extended(by: flags.dropFirst())
    }

    /// The statement that writes `lists`, with the intent read's test when `guarded`.
    static func text(writing lists: [List], guarded: Bool) -> String {
        let source = guarded ? "written" : "fenced"
        let writes = lists.map { "\(name($0)) AS (\n  \(write($0, from: source, guarded: guarded)))" }
        return """
            WITH fence AS (
              SELECT l.holder IS NOT DISTINCT FROM $2::text AS mine,
                coalesce((SELECT leased_until > clock_timestamp() FROM daemons WHERE id = l.holder), false) AS current
              FROM work_leases l WHERE l.work_key = $1::text FOR SHARE OF l),
            fenced AS (SELECT $4::text::jsonb AS j WHERE $1::text IS NULL OR EXISTS (SELECT FROM fence WHERE mine AND current))\(guarded ? ",\n" + guardedWrite : "")\(writes.map { ",\n" + $0 }.joined())
            SELECT (SELECT mine FROM fence), (SELECT current FROM fence), \(guarded ? "EXISTS (SELECT FROM written)" : "true")
            """
    }

    /// The letter of `list`'s write in the statement (its common table expression).
    static func name(_ list: List) -> String {
        switch list {
        case .sessions: "s"
        case .orders: "o"
        case .newOrders: "n"
        case .paymentRequests: "r"
        case .intents: "i"
        case .events: "e"
        case .outcomes: "c"
        case .ledger: "l"
        case .captureRequests: "q"
        case .holds: "h"
        case .releases: "u"
        case .answers: "a"
        case .health: "k"
        }
    }

    /// The write of `list`, its rows read from `source`.
    private static func write(_ list: List, from source: String, guarded: Bool) -> String {
        switch list {
        case .sessions:
            """
            \(JSONRows.insertSessions(from: source, "\(source).j->'sessions'", at: "$3::timestamptz"))
              ON CONFLICT (hpp_session_id) DO UPDATE SET order_id = excluded.order_id, phase = excluded.phase, outcome = excluded.outcome,
                next_due = excluded.next_due, deadline = excluded.deadline, updated_at = excluded.updated_at, data = excluded.data
            """
        case .orders:
            """
            \(JSONRows.insertOrders(from: source, "\(source).j->'orders'", at: "$3::timestamptz"))
              ON CONFLICT (order_id) DO UPDATE SET phase = excluded.phase, outcome = excluded.outcome, next_due = excluded.next_due,
                deadline = excluded.deadline, updated_at = excluded.updated_at, data = excluded.data
            """
        case .newOrders:
            "\(JSONRows.insertOrders(from: source, "\(source).j->'new_orders'", at: "$3::timestamptz")) ON CONFLICT (order_id) DO NOTHING"
        case .paymentRequests:
            """
            INSERT INTO payment_requests (payment_request_id, state, outcome, next_due, tracked_at, updated_at, data, account)
              SELECT x.id, x.state, x.outcome, \(JSONRows.time("x.next_due")), \(JSONRows.time("x.tracked_at")), $3::timestamptz, x.data, x.account
              FROM \(source), jsonb_to_recordset(\(source).j->'payment_requests') AS x(
                id text, state text, outcome text, next_due bigint, tracked_at bigint, data text, account text)
              ON CONFLICT (payment_request_id) DO UPDATE SET state = excluded.state, outcome = excluded.outcome, next_due = excluded.next_due,
                updated_at = excluded.updated_at, data = excluded.data
            """
        case .intents:
            """
            \(insertIntents(
                guarded ? "x.key IS DISTINCT FROM \(source).j->'intent_read'->>'key'" : "true", from: source,
                updating: "intents.attempts <= excluded.attempts"))
            """
        case .events:
            "\(JSONRows.insertEvents(from: source, "\(source).j->'events'", at: "$3::timestamptz"))"
        case .outcomes:
            """
            INSERT INTO outcomes (at, kind, hpp_session_id, order_id, data)
              SELECT $3::timestamptz, x.kind, x.session, x.order_id, x.data
              FROM \(source), ROWS FROM (jsonb_to_recordset(\(source).j->'outcomes') AS (kind text, session text, order_id text, data text))
                WITH ORDINALITY AS x(kind, session, order_id, data, n)
              ORDER BY x.n
            """
        case .ledger:
            """
            INSERT INTO ledger (order_id, entry, entry_key, klarna_id, amount, currency, at, source)
              SELECT x.order_id, x.entry, x.entry_key, x.klarna_id, x.amount, x.currency, \(JSONRows.time("x.at")), x.source
              FROM \(source), jsonb_to_recordset(\(source).j->'ledger') AS x(
                order_id text, entry text, entry_key text, klarna_id text, amount bigint, currency text, at bigint, source text)
              ON CONFLICT (order_id, entry, entry_key) DO NOTHING
            """
        case .captureRequests:
            """
            UPDATE capture_requests SET state = x.state, note = x.note
              FROM \(source), jsonb_to_recordset(\(source).j->'capture_requests') AS x(id bigint, state text, note text) WHERE capture_requests.id = x.id
            """
        case .holds:
            """
            INSERT INTO holds (work_key, held_at, held_by)
              SELECT x.key, $3::timestamptz, x.by FROM \(source), jsonb_to_recordset(\(source).j->'holds') AS x(key text, by text)
              ON CONFLICT (work_key) DO NOTHING
            """
        case .releases:
            "DELETE FROM holds USING \(source), jsonb_array_elements_text(\(source).j->'releases') AS x(key) WHERE holds.work_key = x.key"
        case .answers:
            """
            UPDATE operator_requests SET state = x.state, note = x.note, answered_at = $3::timestamptz
              FROM \(source), jsonb_to_recordset(\(source).j->'answers') AS x(id bigint, state text, note text) WHERE operator_requests.id = x.id
            """
        case .health:
            """
            INSERT INTO health (name, at, detail)
              SELECT x.name, $3::timestamptz, x.detail FROM \(source), jsonb_to_recordset(\(source).j->'health') AS x(name text, detail text)
              ON CONFLICT (name) DO UPDATE SET at = excluded.at, detail = excluded.detail
            """
        }
    }

    /// Whether the stored intent is the version read: its attempts, and its state or, for an answer's commit
    /// (`any_unfinished`), any state it may still leave.
    private static let readVersionStored =
        "intents.attempts = (SELECT (j->'intent_read'->>'attempts')::integer FROM fenced)"
        + " AND (intents.state = (SELECT j->'intent_read'->>'state' FROM fenced)"
        + " OR (intents.state IN ('intended', 'sent', 'ambiguous') AND (SELECT (j->'intent_read'->>'any_unfinished')::boolean FROM fenced)))"

    /// The intent read, written first, and the row every other write joins.
    private static let guardedWrite = """
        g AS (
          \(insertIntents(
            "x.key = fenced.j->'intent_read'->>'key'", from: "fenced",
            updating: readVersionStored))
          RETURNING 1),
        written AS (
          SELECT j FROM fenced
          WHERE NOT EXISTS (SELECT FROM jsonb_to_recordset(j->'intents') AS x(key text) WHERE x.key = j->'intent_read'->>'key') OR EXISTS (SELECT FROM g))
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

/// Whether a commit writes a list (or, last, tests the intent read): the type parameters that name a ``CommitShape``.
protocol Inclusion {
    static var included: Bool { get }
}

enum Included: Inclusion {
    static var included: Bool { true }
}

enum Omitted: Inclusion {
    static var included: Bool { false }
}

/// The commit of one combination of lists (``CommitChange/List``, then whether it is guarded), as a type: a prepared
/// statement is named by its type (postgres-nio keeps a connection's prepared statements by a static name). Named by
/// the letters of its writes (`klarna_reconciler.Commit.sie`: sessions, intents, events), `g` first when guarded.
struct CommitShape<each Flag: Inclusion>: StatementText {
    static var name: String { texts.name }
    static var sql: String { texts.sql }

    /// Made once per combination: postgres-nio reads a statement's name and text at every execution.
    private static var texts: CommitShapeTexts.Texts {
        CommitShapeTexts.of(Self.self) {
            var flags: [Bool] = []
            for flag in repeat (each Flag).self { flags.append(flag.included) }
            let lists = zip(CommitChange.List.allCases, flags).filter(\.1).map(\.0)
            let guarded = flags.dropFirst(CommitChange.List.allCases.count).first == true
            return (
                name: "klarna_reconciler.Commit." + (guarded ? "g" : "") + lists.map(CommitChange.name).joined(),
                sql: CommitChange.text(writing: lists, guarded: guarded)
            )
        }
    }
}

/// The name and text of each ``CommitShape`` used so far (a generic type has no stored static properties).
enum CommitShapeTexts {
    typealias Texts = (name: String, sql: String)
    private static let made = Mutex<[ObjectIdentifier: Texts]>([:])

    static func of(_ shape: any StatementText.Type, making: () -> Texts) -> Texts {
        let key = ObjectIdentifier(shape)
        if let texts = made.withLock({ $0[key] }) { return texts }
        let texts = making()
        made.withLock { $0[key] = texts }
        return texts
    }
}

/// How a combination's type is made from its flags, one flag at a time (every ``CommitShape`` conforms, complete or
/// not). Each step goes through the next type's conformance rather than a generic function of its own: the
/// compiler's optimizer specializes a generic function that calls itself with a longer list of types without end (the
/// release build did not finish).
protocol CommitShapeBuilding: StatementText {
    static func extended(by flags: ArraySlice<Bool>) -> any StatementText.Type
}

extension CommitShape: CommitShapeBuilding {
    static func extended(by flags: ArraySlice<Bool>) -> any StatementText.Type {
        guard let first = flags.first else { return Self.self }
        let next: any CommitShapeBuilding.Type = first ? CommitShape<repeat each Flag, Included>.self : CommitShape<repeat each Flag, Omitted>.self
        return next.extended(by: flags.dropFirst())
    }
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

/// The rows of a ``Change`` as ``CommitChange``'s statements read them, one list per table, made disjoint: one version of each
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

        init(_ event: NewEvent) throws {
            session = event.hppSessionID
            order_id = event.orderID
            kind = event.event.kind.rawValue
            message = event.event.message
            detail = event.detail.isEmpty ? nil : try StoredJSON.encode(event.detail)
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
        /// Any unfinished state at these attempts is the version read (an answer's commit).
        var any_unfinished: Bool
    }

    init(_ change: Change, health entries: [(key: HealthKey, detail: String)]) throws {
        sessions = try Self.lastOfEach(change.sessions, by: \.hppSessionID).map { Session($0, data: try StoredJSON.encode($0)) }
        func order(_ order: TrackedOrder) throws -> Order {
            Order(
                id: order.orderID, session: order.hppSessionID, reference: order.merchantReference, phase: order.phase.rawValue,
                outcome: order.outcome?.rawValue, next_due: Self.time(order.isOpen ? order.nextDueAt : nil), deadline: Self.time(order.deadline),
                created_at: Self.time(order.createdAt), data: try StoredJSON.encode(order), account: order.account.rawValue)
        }
        orders = try Self.lastOfEach(change.orders, by: \.orderID).map(order)
        let written = Set(change.orders.map(\.orderID))
        new_orders = try Self.lastOfEach(change.newOrders.filter { !written.contains($0.orderID) }, by: \.orderID).map(order)
        payment_requests = try Self.lastOfEach(change.paymentRequests, by: \.paymentRequestID).map { request in
            PaymentRequest(
                id: request.paymentRequestID, state: request.state?.rawValue, outcome: request.outcome?.rawValue,
                next_due: Self.time(request.isOpen ? request.nextDueAt : nil), tracked_at: Self.time(request.trackedAt),
                data: try StoredJSON.encode(request),
                account: request.account.rawValue)
        }
        intents = try Self.lastOfEach(change.intents, by: \.key).map { intent in
            IntentRow(
                key: intent.key, kind: intent.kind.rawValue, subject: intent.subject, state: intent.state.rawValue, attempts: intent.attempts,
                next_attempt: Self.time(intent.nextAttemptAt), created_at: Self.time(intent.createdAt), data: try StoredJSON.encode(intent))
        }
        events = try change.events.map { try Event($0) }
        outcomes = try change.outcomes.map { outcome in
            OutcomeRow(kind: outcome.kind.rawValue, session: outcome.hppSessionID, order_id: outcome.orderID, data: try StoredJSON.encode(outcome))
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
            intent_read = IntentRead(key: read.key, state: read.state?.rawValue, attempts: read.attempts, any_unfinished: read.anyUnfinished)
        }
    }

    /// Whether the change has rows in `list`.
    func fills(_ list: CommitChange.List) -> Bool {
        switch list {
        case .sessions: !sessions.isEmpty
        case .orders: !orders.isEmpty
        case .newOrders: !new_orders.isEmpty
        case .paymentRequests: !payment_requests.isEmpty
        case .intents: !intents.isEmpty
        case .events: !events.isEmpty
        case .outcomes: !outcomes.isEmpty
        case .ledger: !ledger.isEmpty
        case .captureRequests: !capture_requests.isEmpty
        case .holds: !holds.isEmpty
        case .releases: !releases.isEmpty
        case .answers: !answers.isEmpty
        case .health: !health.isEmpty
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
