import Foundation
import PostgresNIO
import ReconcilerCore
import ReconcilerStore

/// A delivery that ``IngestPlanner`` decides by whether one session is tracked (HPP callbacks, track requests,
/// deliveries only recorded), ready for ``IngestBatch``: both of its decisions made before anything is sent (with
/// the session tracked and not), to travel as JSON; the statement takes the one whose condition holds.
struct SessionDelivery: Sendable {
    /// What the statement reads for this delivery (``IngestBatch``'s `$1`, one element per delivery).
    struct Element: Encodable, Sendable {
        var n: Int
        var key: String?
        var kind, source: String
        var at: Int64
        var summary: String
        var session: String?
        var if_tracked, if_untracked: Writes
    }

    struct Writes: Encodable, Sendable {
        var sessions: [ChangeRows.Session]
        var events: [ChangeRows.Event]
        var wakeups: [String]

        init(_ writes: IngestWrites) throws {
            sessions = try writes.newSession.map { [ChangeRows.Session($0, data: try StoredJSON.encode($0))] } ?? []
            events = try writes.events.map { try ChangeRows.Event($0) }
            wakeups = writes.wakeups.map(\.description)
        }
    }

    private(set) var element: Element
    private let at: Date
    private let ifTracked: IngestResult
    private let ifUntracked: IngestResult

    /// The keys two deliveries of one statement may not share: a statement writes a row once, and sees none of its
    /// own writes (the second delivery of a key or a session must see the first's).
    var dedupeKey: String? { element.key }
    var sessionID: String? { element.session }

    /// Nil for a delivery decided otherwise, or one whose decisions write more than a session, events and the
    /// wakeups of a delivery: the store's transaction writes those.
    init?(_ record: IngestRecord, lookup: IngestLookup, at: Date) throws {
        let tracked: IngestDecision
        let untracked: IngestDecision
        let sessionID: String?
        switch lookup {
        case .session(let id):
            sessionID = id
            tracked = IngestPlanner.decide(record, found: .session(tracked: true), at: at)
            untracked = IngestPlanner.decide(record, found: .session(tracked: false), at: at)
        case .nothing:
            sessionID = nil
            tracked = IngestPlanner.decide(record, found: .nothing, at: at)
            untracked = tracked
        default:
            return nil
        }
        func simple(_ writes: IngestWrites) -> Bool {
            writes.paymentRequest == nil && writes.captureRequest == nil && writes.disputeHint == nil && writes.delivered
        }
        guard case .write(let whenTracked, let ifTracked) = tracked, case .write(let whenUntracked, let ifUntracked) = untracked,
            whenTracked.newSession == nil, simple(whenTracked), simple(whenUntracked),
            whenUntracked.newSession.map({ $0.hppSessionID == sessionID }) ?? true
        else { return nil }
        self.at = at
        self.ifTracked = ifTracked
        self.ifUntracked = ifUntracked
        element = Element(
            n: 0, key: record.dedupeKey, kind: record.kind, source: record.source, at: ChangeRows.time(at), summary: record.summary,
            session: sessionID, if_tracked: try Writes(whenTracked), if_untracked: try Writes(whenUntracked))
    }

    /// Numbered as the statement answers it.
    func numbered(_ n: Int) -> SessionDelivery {
        var copy = self
        copy.element.n = n
        return copy
    }

    /// The answer from the statement's row for this delivery.
    func result(fresh: Bool, firstSeen: Date?, untracked: Bool?) -> IngestResult {
        guard fresh else { return .repeated(firstSeen: firstSeen ?? at) }
        return untracked == true ? ifUntracked : ifTracked
    }
}

/// Deliveries decided by one session each (``SessionDelivery``), any number of them, as one statement: one exchange
/// and one implicit transaction (one WAL flush) for all, where each delivery's `BEGIN`, dedupe insert, lookup, rows
/// and `COMMIT` each waited for their answer. ``IngestBatcher`` sends the deliveries that arrive while others are on
/// their way together.
///
/// Per delivery: its row in `deliveries` by its dedupe key, counted as a repeat by the insert's own `DO UPDATE`
/// (which sees, and locks, a first delivery committed after the statement began, where a separate `UPDATE` in the same
/// statement would not; `xmax = 0` only on a row this statement inserted); then the writes of the decision that holds.
/// The untracked decision's rows are taken only when the statement inserted the session itself, or when that
/// decision tracks nothing: a session another delivery tracked since the statement began (its insert then conflicts)
/// is decided as tracked, as a transaction that looked first would have. No two deliveries of one statement share a
/// dedupe key or a session (the batcher keeps them apart); rows that take locks are written in key order, so two
/// statements running at once never wait for each other in a circle. Each session is looked up by its key (a
/// lateral `LIMIT 1`): as a semi-join the planner hashed the whole table for a handful of deliveries.
enum IngestBatch: StatementText {
    /// `$1` the deliveries (``SessionDelivery/Element``s), `$2` this daemon (names it on the wakeups of keys it holds).
    static let sql = """
        WITH r AS (
          SELECT * FROM jsonb_to_recordset($1::text::jsonb) AS r(
            n integer, key text, kind text, source text, at bigint, summary text, session text, if_tracked jsonb, if_untracked jsonb)),
        d AS (
          INSERT INTO deliveries (dedupe_key, kind, source, received_at, summary)
          SELECT key, kind, source, \(JSONRows.time("at")), summary FROM r WHERE key IS NOT NULL ORDER BY key
          ON CONFLICT (dedupe_key) DO UPDATE SET repeats = deliveries.repeats + 1
          RETURNING dedupe_key, received_at, xmax = 0 AS inserted),
        fresh AS (
          SELECT r.n, r.session, r.at, r.if_tracked, r.if_untracked, looked.found IS NOT NULL AS tracked_before
          FROM r LEFT JOIN LATERAL (SELECT true AS found FROM sessions WHERE hpp_session_id = r.session LIMIT 1) looked ON true
          WHERE r.key IS NULL OR EXISTS (SELECT FROM d WHERE d.dedupe_key = r.key AND d.inserted)),
        s AS (
          \(JSONRows.insertSessions(from: "fresh", "fresh.if_untracked->'sessions'", at: JSONRows.time("fresh.at")))
          WHERE NOT fresh.tracked_before ORDER BY x.id
          ON CONFLICT (hpp_session_id) DO NOTHING RETURNING hpp_session_id),
        branch AS (
          SELECT fresh.n, fresh.at, b.untracked, CASE WHEN b.untracked THEN fresh.if_untracked ELSE fresh.if_tracked END AS w
          FROM fresh, LATERAL (
            SELECT EXISTS (SELECT FROM s WHERE s.hpp_session_id = fresh.session)
              OR NOT (fresh.tracked_before OR jsonb_array_length(fresh.if_untracked->'sessions') > 0)) AS b(untracked)),
        e AS (\(JSONRows.insertEvents(from: "branch", "branch.w->'events'", at: JSONRows.time("branch.at"), after: "branch.n"))),
        w AS (
          INSERT INTO wakeups (work_key, delivered, woken_by)
          SELECT x.key, true, (SELECT holder FROM work_leases WHERE work_key = x.key AND holder = $2::text)
          FROM branch, jsonb_array_elements_text(branch.w->'wakeups') WITH ORDINALITY AS x(key, m) ORDER BY x.key, branch.n, x.m)
        SELECT r.n, r.key IS NULL OR coalesce(d.inserted, false), CASE WHEN d.inserted THEN NULL ELSE d.received_at END, branch.untracked
        FROM r LEFT JOIN d ON d.dedupe_key = r.key LEFT JOIN branch ON branch.n = r.n
        """

    static func bindings(_ deliveries: [SessionDelivery], holder: String?) throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 2)
        bindings.append(try StoredJSON.encode(deliveries.map(\.element)))
        bindings.append(holder)
        return bindings
    }

    /// Each delivery's answer, in the order given (numbered by its place).
    static func results(_ deliveries: [SessionDelivery], rows: [PostgresRow]) throws -> [IngestResult] {
        var answers: [Int: (Bool, Date?, Bool?)] = [:]
        for row in rows {
            let (n, fresh, firstSeen, untracked) = try row.decode((Int, Bool, Date?, Bool?).self)
            answers[n] = (fresh, firstSeen, untracked)
        }
        return try deliveries.map { delivery in
            guard let (fresh, firstSeen, untracked) = answers[delivery.element.n] else {
                throw PostgresProblem(kind: .other, description: "the ingest statement answered no row for delivery \(delivery.element.n)")
            }
            return delivery.result(fresh: fresh, firstSeen: firstSeen, untracked: untracked)
        }
    }
}
