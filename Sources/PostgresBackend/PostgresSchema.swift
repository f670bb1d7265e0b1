import Foundation
import Logging
import PostgresNIO
import ReconcilerStore

/// Versioned schema changes for the shared store, applied in order in one transaction under an advisory lock, so
/// that several daemons starting together migrate once and the others wait, then find the work done. The version is
/// the row count of `schema_migrations`. Never edit a shipped migration: append a new one.
enum PostgresSchema {
    /// `pg_advisory_xact_lock` key for migrations: "klarna-r" in ASCII.
    static let migrationLock: Int64 = 0x6B6C_6172_6E61_2D72

    static let steps: [String] = [
        // 1: what SQLite's migrations 1 to 8 built, in PostgreSQL's types: times are timestamptz, flags boolean,
        // each row's state is the same JSON document the engine reads back.
        """
        CREATE TABLE sessions (
          hpp_session_id text PRIMARY KEY, kp_session_id text NOT NULL, order_id text, merchant_reference text,
          phase text NOT NULL, outcome text, next_due timestamptz, deadline timestamptz, tracked_at timestamptz NOT NULL,
          updated_at timestamptz NOT NULL, data text NOT NULL);
        CREATE INDEX sessions_open ON sessions(phase, tracked_at, deadline) WHERE next_due IS NOT NULL;
        CREATE TABLE orders (
          order_id text PRIMARY KEY, hpp_session_id text, merchant_reference text, phase text NOT NULL, outcome text,
          next_due timestamptz, deadline timestamptz, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL,
          data text NOT NULL);
        CREATE INDEX orders_session ON orders(hpp_session_id) WHERE hpp_session_id IS NOT NULL;
        CREATE INDEX orders_open ON orders(phase, created_at, deadline) WHERE next_due IS NOT NULL;
        CREATE TABLE payment_requests (
          payment_request_id text PRIMARY KEY, state text, outcome text, next_due timestamptz, tracked_at timestamptz NOT NULL,
          updated_at timestamptz NOT NULL, data text NOT NULL);
        CREATE INDEX payment_requests_due ON payment_requests(next_due) WHERE next_due IS NOT NULL;
        CREATE TABLE intents (
          key text PRIMARY KEY, kind text NOT NULL, subject text NOT NULL, state text NOT NULL, attempts integer NOT NULL,
          next_attempt timestamptz, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL, data text NOT NULL);
        CREATE TABLE events (
          id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at timestamptz NOT NULL, hpp_session_id text, order_id text,
          kind text NOT NULL, message text NOT NULL, detail text);
        CREATE INDEX events_at ON events(at);
        CREATE TABLE outcomes (
          id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at timestamptz NOT NULL, kind text NOT NULL, hpp_session_id text,
          order_id text, data text NOT NULL, outbox_written boolean NOT NULL DEFAULT false, notified boolean NOT NULL DEFAULT false,
          notify_attempts integer NOT NULL DEFAULT 0, notify_next timestamptz);
        CREATE INDEX outcomes_undelivered ON outcomes(id) WHERE NOT outbox_written OR NOT notified;
        CREATE TABLE capture_requests (
          id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, order_id text NOT NULL, amount bigint,
          requested_at timestamptz NOT NULL, state text NOT NULL DEFAULT 'pending', note text);
        CREATE INDEX capture_requests_order ON capture_requests(order_id);
        CREATE TABLE wakeups (
          id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, work_key text NOT NULL, delivered boolean NOT NULL DEFAULT false);
        CREATE TABLE health (name text PRIMARY KEY, at timestamptz NOT NULL, detail text);
        CREATE TABLE deliveries (
          dedupe_key text PRIMARY KEY, kind text NOT NULL, source text NOT NULL, received_at timestamptz NOT NULL,
          summary text NOT NULL, repeats integer NOT NULL DEFAULT 0);
        CREATE INDEX deliveries_received ON deliveries(received_at);
        CREATE TABLE rejections (
          id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at timestamptz NOT NULL, source text NOT NULL,
          status integer NOT NULL, error text NOT NULL, detail text NOT NULL);
        CREATE INDEX rejections_at ON rejections(at);
        CREATE TABLE reloads (
          id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, requested_at timestamptz NOT NULL, answered_at timestamptz,
          ok boolean, message text);
        CREATE TABLE operator_requests (
          id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, work_key text NOT NULL, action text NOT NULL, order_id text,
          requested_by text NOT NULL, requested_at timestamptz NOT NULL, state text NOT NULL DEFAULT 'pending', note text,
          answered_at timestamptz);
        CREATE INDEX operator_requests_pending ON operator_requests(work_key, id) WHERE state = 'pending';
        CREATE TABLE holds (work_key text PRIMARY KEY, held_at timestamptz NOT NULL, held_by text NOT NULL);
        \(SharedSQL.firstStepIndexes)
        """,
        // 2: the fencing token of the daemon lock: each daemon that takes the lock moves the epoch on, and every
        // write transaction of a daemon checks, with a share lock on this row, that the epoch is still its own.
        """
        CREATE TABLE daemon_epoch (
          singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton), epoch bigint NOT NULL, holder text NOT NULL);
        INSERT INTO daemon_epoch (epoch, holder) VALUES (0, '');
        """,
        // 3: work shared by several daemons. Each unit of work that has something to do has a lease row; a daemon
        // claims free or lapsed rows, renews the ones it holds, and fences each step's commit by its row (the
        // database-wide epoch of step 2 goes). New units and wakeups make their row and tell every listening
        // daemon at once. Outcomes are claimed by the daemon that delivers them.
        """
        DROP TABLE daemon_epoch;
        CREATE TABLE daemons (
          id text PRIMARY KEY, host text NOT NULL, pid integer NOT NULL, started_at timestamptz NOT NULL,
          heartbeat_at timestamptz NOT NULL, stopped_at timestamptz);
        CREATE TABLE work_leases (
          work_key text PRIMARY KEY, holder text, locked_until timestamptz NOT NULL DEFAULT '-infinity',
          since timestamptz NOT NULL DEFAULT clock_timestamp());
        CREATE INDEX work_leases_holder ON work_leases(holder) WHERE holder IS NOT NULL;
        CREATE INDEX work_leases_until ON work_leases(locked_until, since);
        ALTER TABLE wakeups ADD COLUMN woken_by text;
        CREATE INDEX wakeups_key ON wakeups(work_key);
        ALTER TABLE outcomes ADD COLUMN delivery_holder text, ADD COLUMN delivery_until timestamptz;
        CREATE FUNCTION klarna_work_arrived() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
          key text := TG_ARGV[0] || (to_jsonb(NEW) ->> TG_ARGV[1]);
        BEGIN
          INSERT INTO work_leases (work_key) VALUES (key) ON CONFLICT (work_key) DO NOTHING;
          PERFORM pg_notify('klarna_reconciler_work', key);
          RETURN NULL;
        END $$;
        CREATE TRIGGER sessions_work AFTER INSERT ON sessions FOR EACH ROW WHEN (NEW.next_due IS NOT NULL)
          EXECUTE FUNCTION klarna_work_arrived('session:', 'hpp_session_id');
        CREATE TRIGGER orders_work AFTER INSERT ON orders FOR EACH ROW WHEN (NEW.next_due IS NOT NULL)
          EXECUTE FUNCTION klarna_work_arrived('order:', 'order_id');
        CREATE TRIGGER payment_requests_work AFTER INSERT ON payment_requests FOR EACH ROW WHEN (NEW.next_due IS NOT NULL)
          EXECUTE FUNCTION klarna_work_arrived('payment_request:', 'payment_request_id');
        CREATE TRIGGER wakeups_work AFTER INSERT ON wakeups FOR EACH ROW EXECUTE FUNCTION klarna_work_arrived('', 'work_key');
        INSERT INTO work_leases (work_key)
          SELECT 'session:' || hpp_session_id FROM sessions WHERE next_due IS NOT NULL
          UNION SELECT 'order:' || order_id FROM orders WHERE next_due IS NOT NULL
          UNION SELECT 'payment_request:' || payment_request_id FROM payment_requests WHERE next_due IS NOT NULL
          UNION SELECT work_key FROM wakeups
          ON CONFLICT DO NOTHING;
        """,
        // 4: settlements, as SQLite's migration 9: the ledger (one row per order, kind and core key, with the line that
        // settled it and when it was flagged), the payouts recorded and their lines. The daemon's captures confirmed
        // before it are backfilled from their intents (`amount` and `result`, the capture id, in the intent's JSON;
        // the currency in the order's; captured when the intent last changed; an id-less one keyed
        // `~<amount>@<unix seconds>` as the core keys it).
        """
        CREATE TABLE ledger (
          order_id text NOT NULL, entry text NOT NULL, entry_key text NOT NULL, klarna_id text, amount bigint NOT NULL,
          currency text, at timestamptz NOT NULL, source text NOT NULL, settled_reference text, settled_ordinal integer,
          flagged_at timestamptz, PRIMARY KEY (order_id, entry, entry_key));
        CREATE TABLE payouts (
          payment_reference text PRIMARY KEY, payout_date timestamptz NOT NULL, currency text NOT NULL,
          recorded_at timestamptz NOT NULL, finding_count integer NOT NULL, data text NOT NULL);
        \(SharedSQL.settlementLinesAndIndexes)
        INSERT INTO ledger (order_id, entry, entry_key, klarna_id, amount, currency, at, source)
          SELECT i.subject, 'capture',
            coalesce(nullif(btrim(i.data::jsonb ->> 'result'), ''),
              '~' || (i.data::jsonb ->> 'amount') || '@' || floor(extract(epoch FROM i.updated_at))::bigint),
            i.data::jsonb ->> 'result', (i.data::jsonb ->> 'amount')::bigint, o.data::jsonb ->> 'currency', i.updated_at, 'daemon'
          FROM intents i LEFT JOIN orders o ON o.order_id = i.subject
          WHERE i.kind = 'capture' AND i.state = 'confirmed' AND i.data::jsonb ->> 'amount' IS NOT NULL
          ON CONFLICT DO NOTHING;
        """,
        // 5: new work is announced by its writer after the commit (`PostgresStore.announceWork`), no longer by the
        // trigger inside the transaction: PostgreSQL holds one lock across the commit of every transaction that
        // notifies, its WAL flush included, so such transactions never share a flush (measured in BENCHMARKS.md at 0490c17:
        // 2,250 against 9,944 one-row transactions/s). The trigger keeps making the lease rows.
        """
        CREATE OR REPLACE FUNCTION klarna_work_arrived() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO work_leases (work_key) VALUES (TG_ARGV[0] || (to_jsonb(NEW) ->> TG_ARGV[1])) ON CONFLICT (work_key) DO NOTHING;
          RETURN NULL;
        END $$;
        """,
        // 6: a lease lasts as long as its holder's heartbeat (`daemons.leased_until`), no longer a time per row: a
        // renewal writes one row, not every lease the daemon holds (each rewrite of an indexed column was a new row
        // version and index entries; BENCHMARKS.md at 0490c17), and a claim reads the free rows and the rows of daemons that
        // lapsed, never every lease. `holds` is each daemon's count of leases (exact at its renewal, kept up by its
        // claims) for the share a claim may take. A wakeup takes its lease row's lock (`woken`), so that a release
        // running at the same moment sees it (``PostgresStore/releaseLeases(_:)``). An older daemon still running
        // on this database fails every lease statement from here on (the column it renews is gone), so it calls
        // Klarna no more, and its work moves to the upgraded daemons once its lease runs out, as after a hang.
        """
        ALTER TABLE daemons ADD COLUMN leased_until timestamptz NOT NULL DEFAULT '-infinity', ADD COLUMN holds integer NOT NULL DEFAULT 0;
        UPDATE daemons d SET leased_until = l.until, holds = l.n
          FROM (SELECT holder, max(locked_until) AS until, count(*) AS n FROM work_leases WHERE holder IS NOT NULL GROUP BY holder) l
          WHERE d.id = l.holder;
        UPDATE work_leases l SET holder = NULL WHERE holder IS NOT NULL AND NOT EXISTS (SELECT FROM daemons d WHERE d.id = l.holder);
        DROP INDEX work_leases_until;
        ALTER TABLE work_leases DROP COLUMN locked_until, ADD COLUMN woken bigint NOT NULL DEFAULT 0;
        CREATE INDEX work_leases_free ON work_leases(since) WHERE holder IS NULL;
        CREATE FUNCTION klarna_work_woken() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO work_leases (work_key) VALUES (NEW.work_key) ON CONFLICT (work_key) DO UPDATE SET woken = work_leases.woken + 1;
          RETURN NULL;
        END $$;
        DROP TRIGGER wakeups_work ON wakeups;
        CREATE TRIGGER wakeups_work AFTER INSERT ON wakeups FOR EACH ROW EXECUTE FUNCTION klarna_work_woken();
        """,
        // 7: refunds are intents on their order that run whatever the order's phase; this finds the ones under way.
        SharedSQL.openRefundsIndex,
        // 8: disputes, their hints and the operators' actions on them.
        SharedSQL.disputeTables(time: "timestamptz", serial: "bigserial"),
        // 9: the Klarna account of every session, order and payment request.
        SharedSQL.accountColumns,
        // 10: the Klarna account of every payout, dispute and dispute hint, and each account's last dispute list.
        SharedSQL.moneyAccountColumns(time: "timestamptz"),
    ]

    /// The step that made the settlement tables (tests undo it to test its backfill).
    static let settlementStep = 4
    /// The first step of accounts (tests undo it and the ones after to test the upgrade from the release before).
    static let accountsStep = 9

    /// The channel new work is announced on.
    static let workChannel = "klarna_reconciler_work"

    static var latest: Int { steps.count }

    /// A step's statements: split at each `;` outside a `$$` function body.
    static func statements(_ step: String) -> [String] {
        var statements: [String] = []
        var current = ""
        var inBody = false
        var rest = Substring(step)
        while let first = rest.first {
            if rest.hasPrefix("$$") {
                inBody.toggle()
                current += "$$"
                rest = rest.dropFirst(2)
                continue
            }
            if first == ";", !inBody {
                statements.append(current)
                current = ""
            } else {
                current.append(first)
            }
            rest = rest.dropFirst()
        }
        statements.append(current)
        return statements.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.filter { !$0.isEmpty }
    }

    /// The store's schema is newer than this binary knows: a newer daemon migrated it.
    public struct TooNew: Error, CustomStringConvertible {
        public let found: Int
        public let known: Int
        public var description: String {
            "the store's schema is version \(found), newer than this binary (\(known)): upgrade this host's klarna-reconciler"
        }
    }

    static func version(_ connection: PostgresConnection, logger: Logger) async throws -> Int {
        let exists = try await connection.rows("SELECT to_regclass('schema_migrations') IS NOT NULL", logger: logger)
        guard try exists.first?.decode(Bool.self) == true else { return 0 }
        return try await connection.rows("SELECT count(*) FROM schema_migrations", logger: logger).first?.decode(Int.self) ?? 0
    }

    /// Applies what is missing, all in one transaction under the migration lock; returns the version found first.
    @discardableResult
    static func migrate(_ connection: PostgresConnection, logger: Logger) async throws -> Int {
        try await connection.rows("BEGIN", logger: logger)
        do {
            try await connection.rows("SELECT pg_advisory_xact_lock(\(migrationLock))", logger: logger)
            let found = try await version(connection, logger: logger)
            guard found <= latest else { throw TooNew(found: found, known: latest) }
            if found == 0 {
                try await connection.rows(
                    "CREATE TABLE schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())", logger: logger)
            }
            for index in found..<latest {
                // One statement at a time: the extended protocol takes no more.
                for statement in statements(steps[index]) {
                    try await connection.rows(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.rows("INSERT INTO schema_migrations (version) VALUES (\(index + 1))", logger: logger)
            }
            try await connection.rows("COMMIT", logger: logger)
            return found
        } catch {
            _ = try? await connection.rows("ROLLBACK", logger: logger)
            throw error
        }
    }
}
