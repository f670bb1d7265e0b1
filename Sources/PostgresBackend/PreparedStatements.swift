import Foundation
import Logging
import PostgresNIO
import ReconcilerCore
import ReconcilerStore

/// The text of a statement on a hot path: a step's reads and commit, a delivery's ingest, claims, releases and marks.
protocol StatementText: Sendable {
    static var sql: String { get }
    /// The name it is prepared under on a connection.
    static var name: String { get }
}

extension StatementText {
    static var name: String { "klarna_reconciler.\(Self.self)" }
}

/// A hot statement as postgres-nio prepares it: parsed and planned once per pooled connection (named by its
/// text's type), afterwards only bound and executed. A preparation that fails is remembered by postgres-nio for the
/// connection's life; `PostgresConnection.rows(_:_:logger:)` closes such a connection.
struct Prepared<Text: StatementText>: PostgresPreparedStatement {
    static var name: String { Text.name }
    static var sql: String { Text.sql }
    let bindings: PostgresBindings

    func makeBindings() -> PostgresBindings { bindings }
    func decodeRow(_ row: PostgresRow) -> PostgresRow { row }
}

/// The hot statements, each with the values it binds in the order of its parameters.
enum Statements {
    // What steps read, claim, release and mark: prepared, so the server plans each once per connection (as unnamed
    // statements they were planned at every use, a third of PostgreSQL's statement time per payment; BENCHMARKS.md at 0490c17).

    enum SessionData: StatementText {
        static let sql = "SELECT data FROM sessions WHERE hpp_session_id = $1"
    }

    enum OrderData: StatementText {
        static let sql = "SELECT data FROM orders WHERE order_id = $1"
    }

    enum IntentData: StatementText {
        static let sql = "SELECT data FROM intents WHERE key = $1"
    }

    enum SubjectIntents: StatementText {
        static let sql = "SELECT data FROM intents WHERE subject = $1 ORDER BY created_at"
    }

    /// A `FROM` item that runs `lookup` once for each key of the array `keys`, `$KEY` in it standing for the key: how
    /// ``OpenWorkOf`` looks up the keys a claim took, each on its index (a unit's primary key, an order's open refunds),
    /// instead of `column = ANY(keys)`.
    ///
    /// Why: the plan a connection keeps for a prepared statement is made at its sixth execution, from the statistics of
    /// then. On a database not analyzed yet (a new one, during a burst of work into it), the plan for `= ANY` scanned
    /// every session for the ten keys it assumes an array holds, and kept scanning as the table grew: 8 ms a claim
    /// during a burst of 30,000 tracked sessions, about 40 % of PostgreSQL's statement time (BENCHMARKS.md at 0490c17, the
    /// eighth look). Looking up one key on its index is the cheaper plan under those statistics too. The keys
    /// are counted by `generate_subscripts`, which the planner assumes yields 1,000 rows whether it knows the array or
    /// not: with `unnest`, whose length a plan for the array in hand knows, that plan always looked cheaper than the
    /// kept one, and each execution was planned again (0.4 ms). `OFFSET 0` keeps the lookup from being merged into a
    /// join, which the planner could make a scan of the whole table again. The assumed 1,000 rows is also why this
    /// serves only a statement that does nothing more with the rows: a ``ReleaseLeases`` written so (tried, not kept)
    /// was planned to hash whole tables for its conditions and to scan every lease for its join.
    private static func byKey(_ keys: String, in lookup: String) -> String {
        """
        generate_subscripts(\(keys), 1) AS key_number(n)
          CROSS JOIN LATERAL (\(lookup.replacingOccurrences(of: "$KEY", with: "(\(keys))[key_number.n]")) OFFSET 0)
        """
    }

    /// The open work (``ReconcilerStore/OpenWork``) of the keys a claim plans from (`$1` sessions, `$2` orders, `$3`
    /// payment requests, `$4` the keys of intents on customer tokens; empty arrays for none), in the columns of ``ReconcilerStore/OpenWork/all`` (which reads all
    /// of it at start, written once). Looked up one by one (``byKey(_:in:)``); a key named twice comes back twice (its callers
    /// keep one per key).
    private static var openWorkOf: String {
        /// `table`'s rows that are `condition` whose `column` is one of `keys`.
        func rows(_ table: String, _ column: String, _ keys: String, _ condition: String) -> String {
            byKey(keys, in: "SELECT * FROM \(table) WHERE \(column) = $KEY AND \(condition)") + " \(table)"
        }
        return """
            SELECT 's', hpp_session_id, next_due, phase, deadline, tracked_at, (data::jsonb->>'lastReadAt')::float8,
              (data::jsonb->>'lastHintAt')::float8, (data::jsonb->>'expiresAt')::float8, account
            FROM \(rows("sessions", "hpp_session_id", "$1::text[]", "next_due IS NOT NULL"))
            UNION ALL
            SELECT 'o', order_id, next_due, phase, deadline, NULL, NULL, NULL, NULL, account
            FROM \(rows("orders", "order_id", "$2::text[]", "next_due IS NOT NULL"))
            UNION ALL
            SELECT 'p', payment_request_id, next_due, NULL, NULL, NULL, NULL, NULL, NULL, account
            FROM \(rows("payment_requests", "payment_request_id", "$3::text[]", "next_due IS NOT NULL"))
            UNION ALL
            SELECT 'r', subject, min(coalesce(next_attempt, created_at)), NULL, NULL, NULL, NULL, NULL, NULL, NULL
            FROM \(rows("intents", "subject", "$2::text[]", "kind = 'refund' AND state IN ('intended', 'sent', 'ambiguous')"))
            GROUP BY subject
            UNION ALL
            SELECT 'c', key, coalesce(next_attempt, created_at), NULL, NULL, NULL, NULL, NULL, NULL, data::jsonb #>> '{account}'
            FROM \(rows("intents", "key", "$4::text[]", "kind IN ('charge', 'cancel_customer_token') AND state IN ('intended', 'sent', 'ambiguous')"))
            """
    }

    enum OpenWorkOf: StatementText {
        static let sql = Statements.openWorkOf
    }

    /// A step's inputs (``ReconcilerStore/StepInputs``) in one statement, one statement per kind of key: `$1` the
    /// key, `$2` its unit's id. Rows by part: 0 the hold beside each pending request (one row of nulls beside it when
    /// none), 1-3 the session's, order's or payment request's row, 4 each intent of the order, 5 each place-order or
    /// customer-token intent of the session's KP session (made by any of its sessions, whose ids they name).
    ///
    /// One statement for every kind, with the other kinds' ids bound as null, was planned again at nearly every
    /// execution: a custom plan drops the branches a null cannot match, the generic plan cannot, so PostgreSQL kept
    /// choosing custom plans: 0.21-0.32 ms an execution with its round trip, against 0.075-0.087 ms with every
    /// parameter bound, where the generic plan is as cheap and is kept (BENCHMARKS.md at 0490c17, the seventh look).
    enum StepInputs {
        private static let none = "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL"

        /// The hold and the pending requests, then `unit`'s parts.
        private static func text(_ unit: String) -> String {
            """
            SELECT 0 AS part, NULL::text AS data, h.held, r.id, r.work_key, r.action, r.order_id, r.requested_by, r.requested_at, r.state, r.note,
              NULL::timestamptz AS created_at
            FROM (SELECT EXISTS (SELECT 1 FROM holds WHERE work_key = $1) AS held) h
            LEFT JOIN operator_requests r ON r.work_key = $1 AND r.state = 'pending'
            \(unit)
            ORDER BY part, id, created_at
            """
        }

        enum Session: StatementText {
            static let sql = text(
                """
                UNION ALL SELECT 1, data, \(none), NULL FROM sessions WHERE hpp_session_id = $2
                UNION ALL SELECT 5, i.data, \(none), i.created_at
                  FROM sessions s JOIN sessions sibling ON sibling.kp_session_id = s.kp_session_id
                  JOIN intents i ON i.subject = sibling.hpp_session_id
                    AND i.kind IN ('\(Intent.Kind.placeOrder.rawValue)', '\(Intent.Kind.customerToken.rawValue)')
                  WHERE s.hpp_session_id = $2
                """)
        }

        enum Order: StatementText {
            static let sql = text(
                """
                UNION ALL SELECT 2, data, \(none), NULL FROM orders WHERE order_id = $2
                UNION ALL SELECT 4, data, \(none), created_at FROM intents WHERE subject = $2
                """)
        }

        enum PaymentRequest: StatementText {
            static let sql = text("UNION ALL SELECT 3, data, \(none), NULL FROM payment_requests WHERE payment_request_id = $2")
        }
    }

    /// A claim (``PostgresStore/claimWork(ttl:limit:liveDaemons:patience:)`` says what it takes): `$1` the most to
    /// take, `$2` the live daemons, `$3` this daemon, `$4` the lease in seconds, `$5` the patience in seconds. The free
    /// leases are counted `ORDER BY since` so that the partial index of free leases serves the count too: without it, a
    /// planner whose statistics lag a burst of new work scans every lease row, dead versions included.
    enum Claim: StatementText {
        static let sql = """
            WITH room AS (
              SELECT greatest(0, least($1, ceil((total.held + free.n)::numeric / $2)::bigint - mine.holds)) AS eager
              FROM (SELECT coalesce(sum(holds), 0) AS held FROM daemons) total,
                (SELECT coalesce((SELECT holds FROM daemons WHERE id = $3), 0) AS holds) mine,
                LATERAL (SELECT count(*) AS n FROM (
                  SELECT FROM work_leases WHERE holder IS NULL ORDER BY since LIMIT (mine.holds + $1) * $2) f) free),
            lapsed AS (
              SELECT id, leased_until FROM daemons
              WHERE id <> $3 AND leased_until < now() AND (
                  leased_until > pg_postmaster_start_time() OR pg_postmaster_start_time() < now() - make_interval(secs => $4))
              FOR UPDATE SKIP LOCKED),
            free AS (
              SELECT work_key, holder, NULL::timestamptz AS ended FROM work_leases
              WHERE holder IS NULL AND ((SELECT eager FROM room) > 0 OR since < now() - make_interval(secs => $5))
              ORDER BY since
              LIMIT (SELECT CASE WHEN eager > 0 THEN eager ELSE $1 END FROM room)
              FOR UPDATE SKIP LOCKED),
            taken AS (
              SELECT l.work_key, l.holder, d.leased_until AS ended FROM work_leases l JOIN lapsed d ON d.id = l.holder
              WHERE (SELECT eager FROM room) > 0 OR l.since < now() - make_interval(secs => $5)
              ORDER BY d.leased_until, l.since
              LIMIT (SELECT CASE WHEN eager > 0 THEN eager ELSE $1 END FROM room)
              FOR UPDATE OF l SKIP LOCKED),
            picked AS (
              SELECT * FROM (SELECT * FROM free UNION ALL SELECT * FROM taken) p
              LIMIT (SELECT CASE WHEN eager > 0 THEN eager ELSE $1 END FROM room)),
            claimed AS (
              UPDATE work_leases l SET holder = $3, since = clock_timestamp()
              FROM picked WHERE l.work_key = picked.work_key
              RETURNING l.work_key, picked.holder, picked.ended),
            counted AS (
              UPDATE daemons SET holds = greatest(0, holds + c.delta),
                leased_until = CASE WHEN daemons.id = $3
                  THEN greatest(leased_until, clock_timestamp() + make_interval(secs => $4)) ELSE leased_until END
              FROM (
                SELECT $3::text AS id, count(*) AS delta FROM claimed
                UNION ALL SELECT holder, -count(*) FROM claimed WHERE holder IS NOT NULL GROUP BY holder) c
              WHERE daemons.id = c.id AND c.delta <> 0)
            SELECT work_key, holder, CASE WHEN ended IS NULL THEN NULL ELSE extract(epoch FROM ended - clock_timestamp())::float8 END
            FROM claimed
            """
    }

    enum MarkOutboxWritten: StatementText {
        static let sql = "UPDATE outcomes SET outbox_written = true, notified = notified OR $2 WHERE id = ANY($1::bigint[])"
    }

    enum MarkNotified: StatementText {
        static let sql = "UPDATE outcomes SET notified = true WHERE id = $1"
    }

    /// The leases of `$1` (keys) this daemon (`$2`) holds, given back in one statement, each unless its unit is open
    /// or a wakeup waits for it; the keys given back return. An order's refunds under way are its open work too,
    /// whatever the order's phase; a customer token's intent is open work while unfinished. A wakeup committed while this runs is not in its snapshot: its trigger locked the
    /// lease row and counted itself in `woken`, so the delete waits for it and then finds the row changed from the
    /// count `asked` read (materialized: read once, before) and leaves it. Each condition is a subquery inside an
    /// `OR`, so that it runs per key on its index instead of as a join over a whole table. The keys go in key order,
    /// as an ingest's wakeups lock their lease rows, so that the two rarely wait for each other in a circle; when they
    /// do, PostgreSQL fails one of them and the caller asks again.
    enum ReleaseLeases: StatementText {
        static let sql = """
            WITH asked AS MATERIALIZED (
              SELECT work_key, woken, split_part(work_key, ':', 1) AS kind, substr(work_key, strpos(work_key, ':') + 1) AS unit
              FROM work_leases WHERE work_key = ANY($1::text[]) AND holder = $2 ORDER BY work_key
            )
            DELETE FROM work_leases l USING asked a
            WHERE l.work_key = a.work_key AND l.holder = $2 AND l.woken = a.woken
              AND NOT (
                EXISTS (SELECT 1 FROM wakeups w WHERE w.work_key = a.work_key)
                OR CASE a.kind
                  WHEN 'session' THEN EXISTS (SELECT 1 FROM sessions WHERE hpp_session_id = a.unit AND next_due IS NOT NULL)
                  WHEN 'order' THEN EXISTS (SELECT 1 FROM orders WHERE order_id = a.unit AND next_due IS NOT NULL)
                    OR EXISTS (SELECT 1 FROM intents WHERE subject = a.unit AND kind = 'refund' AND state IN ('intended', 'sent', 'ambiguous'))
                  WHEN 'payment_request' THEN EXISTS (SELECT 1 FROM payment_requests WHERE payment_request_id = a.unit AND next_due IS NOT NULL)
                  WHEN 'customer_token' THEN EXISTS (SELECT 1 FROM intents WHERE key = a.unit AND state IN ('intended', 'sent', 'ambiguous'))
                  ELSE true
                END)
            RETURNING l.work_key
            """
    }

    static func values(
        _ first: some PostgresThrowingDynamicTypeEncodable, _ rest: (any PostgresThrowingDynamicTypeEncodable)?...
    ) throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 1 + rest.count)
        try bindings.append(first)
        for value in rest {
            if let value { try bindings.append(value) } else { bindings.appendNull() }
        }
        return bindings
    }
}
