import Foundation
import PostgresNIO
import ReconcilerCore
import ReconcilerStore

/// A delivery that ``IngestPlanner`` decides by whether one session is tracked (HPP callbacks, track requests,
/// deliveries only recorded), as one statement: the delivery's row by its dedupe key, then the writes of the one of
/// the two decisions that holds, one exchange and one implicit transaction where a `BEGIN`, the dedupe insert, the
/// lookup, each row and a `COMMIT` each waited for their answer.
///
/// Both decisions are made before the statement is sent (``IngestPlanner/decide(_:found:at:)`` with the session
/// tracked and not), and travel as JSON; the statement takes the untracked one's rows only when it inserted the
/// session itself, or when that one tracks nothing: a session another delivery tracked since the statement began
/// (its insert then conflicts) is decided as tracked, as a transaction that looked first would have. A repeat is
/// counted by the dedupe insert's own `DO UPDATE` (which sees, and locks, a first delivery committed after the
/// statement began, where a separate `UPDATE` in the same statement would not), its row telling the two apart
/// (`xmax = 0` only on a row this statement inserted).
struct IngestBySession: StatementText {
    /// `$1` the dedupe key (null: none), `$2` kind, `$3` source, `$4` the time, `$5` summary, `$6` the session (null:
    /// none looked up), `$7` both decisions' rows, `$8` this daemon (names it on the wakeups of keys it holds).
    static let sql = """
        WITH d AS (
          INSERT INTO deliveries (dedupe_key, kind, source, received_at, summary)
          SELECT $1::text, $2::text, $3::text, $4::timestamptz, $5::text WHERE $1::text IS NOT NULL
          ON CONFLICT (dedupe_key) DO UPDATE SET repeats = deliveries.repeats + 1
          RETURNING received_at, xmax = 0 AS inserted),
        fresh AS (SELECT $7::text::jsonb AS j WHERE $1::text IS NULL OR (SELECT inserted FROM d)),
        looked AS (SELECT EXISTS (SELECT FROM sessions WHERE hpp_session_id = $6::text) AS tracked),
        s AS (
          \(JSONRows.insertSessions(from: "fresh, looked", "fresh.j->'untracked'->'sessions'", at: "$4::timestamptz")) WHERE NOT looked.tracked
          ON CONFLICT (hpp_session_id) DO NOTHING RETURNING 1),
        branch AS (
          SELECT untracked, CASE WHEN untracked THEN fresh.j->'untracked' ELSE fresh.j->'tracked' END AS w
          FROM fresh, looked, LATERAL (SELECT EXISTS (SELECT FROM s) OR NOT (looked.tracked OR jsonb_array_length(fresh.j->'untracked'->'sessions') > 0)) AS b(untracked)),
        e AS (\(JSONRows.insertEvents(from: "branch", "branch.w->'events'", at: "$4::timestamptz"))),
        w AS (
          INSERT INTO wakeups (work_key, delivered, woken_by)
          SELECT x.key, true, (SELECT holder FROM work_leases WHERE work_key = x.key AND holder = $8::text)
          FROM branch, jsonb_array_elements_text(branch.w->'wakeups') WITH ORDINALITY AS x(key, n) ORDER BY x.n)
        SELECT EXISTS (SELECT FROM fresh), (SELECT received_at FROM d WHERE NOT inserted), (SELECT untracked FROM branch)
        """

    private struct Writes: Encodable {
        var sessions: [ChangeRows.Session]
        var events: [ChangeRows.Event]
        var wakeups: [String]

        init(_ writes: IngestWrites, json: (any Encodable) throws -> String) throws {
            sessions = try writes.newSession.map { [ChangeRows.Session($0, data: try json($0))] } ?? []
            events = try writes.events.map { try ChangeRows.Event($0, json: json) }
            wakeups = writes.wakeups.map(\.description)
        }
    }

    private struct Decisions: Encodable {
        var tracked, untracked: Writes
    }

    private let record: IngestRecord
    private let at: Date
    private let hppSessionID: String?
    private let ifTracked: IngestResult
    private let ifUntracked: IngestResult
    private let rows: String

    /// Nil for a delivery decided otherwise, or one whose decisions write more than a session, events and the
    /// wakeups of a delivery: the store's transaction writes those.
    init?(_ record: IngestRecord, lookup: IngestLookup, at: Date, json: (any Encodable) throws -> String) throws {
        let tracked: IngestDecision
        let untracked: IngestDecision
        switch lookup {
        case .session(let id):
            hppSessionID = id
            tracked = IngestPlanner.decide(record, found: .session(tracked: true), at: at)
            untracked = IngestPlanner.decide(record, found: .session(tracked: false), at: at)
        case .nothing:
            hppSessionID = nil
            tracked = IngestPlanner.decide(record, found: .nothing, at: at)
            untracked = tracked
        default:
            return nil
        }
        func simple(_ writes: IngestWrites) -> Bool { writes.paymentRequest == nil && writes.captureRequest == nil && writes.delivered }
        guard case .write(let whenTracked, let ifTracked) = tracked, case .write(let whenUntracked, let ifUntracked) = untracked,
            whenTracked.newSession == nil, simple(whenTracked), simple(whenUntracked)
        else { return nil }
        self.record = record
        self.at = at
        self.ifTracked = ifTracked
        self.ifUntracked = ifUntracked
        rows = try json(Decisions(tracked: try Writes(whenTracked, json: json), untracked: try Writes(whenUntracked, json: json)))
    }

    func bindings(holder: String?) -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 8)
        bindings.append(record.dedupeKey)
        bindings.append(record.kind)
        bindings.append(record.source)
        bindings.append(at)
        bindings.append(record.summary)
        bindings.append(hppSessionID)
        bindings.append(rows)
        bindings.append(holder)
        return bindings
    }

    /// The answer from the statement's row.
    func result(_ row: PostgresRow?) throws -> IngestResult {
        guard let (fresh, firstSeen, untracked) = try row?.decode((Bool, Date?, Bool?).self) else {
            throw PostgresProblem(kind: .other, description: "the ingest statement answered no row")
        }
        guard fresh else { return .repeated(firstSeen: firstSeen ?? at) }
        return untracked == true ? ifUntracked : ifTracked
    }
}
