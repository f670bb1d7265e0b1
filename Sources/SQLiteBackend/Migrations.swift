import Foundation
import ReconcilerStore

/// Versioned schema changes, applied in order inside one transaction each; `PRAGMA user_version` records the level.
/// Never edit a shipped migration: append a new one.
enum Migrations {
    static let steps: [String] = [
        // 1: sessions, orders, intents, events, outcomes, capture requests, wakeups, health.
        """
        CREATE TABLE sessions (
          hpp_session_id TEXT PRIMARY KEY, kp_session_id TEXT NOT NULL, order_id TEXT, merchant_reference TEXT,
          phase TEXT NOT NULL, outcome TEXT, next_due REAL, deadline REAL, tracked_at REAL NOT NULL, updated_at REAL NOT NULL,
          data TEXT NOT NULL);
        CREATE TABLE orders (
          order_id TEXT PRIMARY KEY, hpp_session_id TEXT, merchant_reference TEXT, phase TEXT NOT NULL, outcome TEXT,
          next_due REAL, deadline REAL, created_at REAL NOT NULL, updated_at REAL NOT NULL, data TEXT NOT NULL);
        CREATE TABLE intents (
          key TEXT PRIMARY KEY, kind TEXT NOT NULL, subject TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL,
          next_attempt REAL, created_at REAL NOT NULL, updated_at REAL NOT NULL, data TEXT NOT NULL);
        CREATE TABLE events (
          id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, hpp_session_id TEXT, order_id TEXT, kind TEXT NOT NULL,
          message TEXT NOT NULL, detail TEXT);
        CREATE TABLE outcomes (
          id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, kind TEXT NOT NULL, hpp_session_id TEXT, order_id TEXT,
          data TEXT NOT NULL, outbox_written INTEGER NOT NULL DEFAULT 0, notified INTEGER NOT NULL DEFAULT 0,
          notify_attempts INTEGER NOT NULL DEFAULT 0, notify_next REAL);
        CREATE INDEX outcomes_undelivered ON outcomes(id) WHERE outbox_written = 0 OR notified = 0;
        CREATE TABLE capture_requests (
          id INTEGER PRIMARY KEY AUTOINCREMENT, order_id TEXT NOT NULL, amount INTEGER, requested_at REAL NOT NULL,
          state TEXT NOT NULL DEFAULT 'pending', note TEXT);
        CREATE TABLE wakeups (id INTEGER PRIMARY KEY AUTOINCREMENT, work_key TEXT NOT NULL);
        CREATE TABLE health (name TEXT PRIMARY KEY, at REAL NOT NULL, detail TEXT);
        \(SharedSQL.firstStepIndexes)
        """,
        // 2: webhook deliveries for dedupe, and refused deliveries with their reason.
        """
        CREATE TABLE deliveries (
          dedupe_key TEXT PRIMARY KEY, kind TEXT NOT NULL, source TEXT NOT NULL, received_at REAL NOT NULL, summary TEXT NOT NULL,
          repeats INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE rejections (
          id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, source TEXT NOT NULL, status INTEGER NOT NULL,
          error TEXT NOT NULL, detail TEXT NOT NULL);
        """,
        // 3: Klarna Network payment requests followed after a verified webhook.
        """
        CREATE TABLE payment_requests (
          payment_request_id TEXT PRIMARY KEY, state TEXT, outcome TEXT, next_due REAL, tracked_at REAL NOT NULL,
          updated_at REAL NOT NULL, data TEXT NOT NULL);
        CREATE INDEX payment_requests_due ON payment_requests(next_due) WHERE next_due IS NOT NULL;
        """,
        // 4: reload requests from `klarna-reconciler reload` and the daemon's answers.
        """
        CREATE TABLE reloads (
          id INTEGER PRIMARY KEY AUTOINCREMENT, requested_at REAL NOT NULL, answered_at REAL, ok INTEGER, message TEXT);
        """,
        // 5: wakeups the daemon wrote for itself while ingesting (it woke the engine directly): read again only at start.
        """
        ALTER TABLE wakeups ADD COLUMN delivered INTEGER NOT NULL DEFAULT 0;
        """,
        // 6: retention prunes by age, and finds a payment's orders and capture requests by index.
        """
        CREATE INDEX events_at ON events(at);
        CREATE INDEX orders_session ON orders(hpp_session_id) WHERE hpp_session_id IS NOT NULL;
        CREATE INDEX capture_requests_order ON capture_requests(order_id);
        CREATE INDEX rejections_at ON rejections(at);
        CREATE INDEX deliveries_received ON deliveries(received_at);
        """,
        // 7: operator requests (hold, release, retry, cancel, release-remaining), applied by the daemon in the
        // payment's next step, and the holds in force.
        """
        CREATE TABLE operator_requests (
          id INTEGER PRIMARY KEY AUTOINCREMENT, work_key TEXT NOT NULL, action TEXT NOT NULL, order_id TEXT,
          requested_by TEXT NOT NULL, requested_at REAL NOT NULL, state TEXT NOT NULL DEFAULT 'pending', note TEXT, answered_at REAL);
        CREATE INDEX operator_requests_pending ON operator_requests(work_key, id) WHERE state = 'pending';
        CREATE TABLE holds (work_key TEXT PRIMARY KEY, held_at REAL NOT NULL, held_by TEXT NOT NULL);
        """,
        // 8: /metrics counts open work by phase, its oldest and its next deadline from these alone (index-only scans,
        // never the rows' JSON).
        """
        CREATE INDEX sessions_open ON sessions(phase, tracked_at, deadline) WHERE next_due IS NOT NULL;
        CREATE INDEX orders_open ON orders(phase, created_at, deadline) WHERE next_due IS NOT NULL;
        """,
        // 9: settlements. The ledger: every capture and refund the shop knows of, one row per order, kind and core key
        // (an id-less entry's key is `~<amount>@<unix seconds>`), with the settlement line that settled it and when it
        // was flagged as not settled in time; the payouts recorded and their lines, each the core's JSON.
        // The daemon's captures confirmed before this migration are backfilled from their intents (`amount` and
        // `result`, the capture id, in the intent's JSON; the currency in the order's; captured when the intent last
        // changed). `trim` takes spaces only where the core also takes tabs: capture ids have neither.
        """
        CREATE TABLE ledger (
          order_id TEXT NOT NULL, entry TEXT NOT NULL, entry_key TEXT NOT NULL, klarna_id TEXT, amount INTEGER NOT NULL,
          currency TEXT, at REAL NOT NULL, source TEXT NOT NULL, settled_reference TEXT, settled_ordinal INTEGER, flagged_at REAL,
          PRIMARY KEY (order_id, entry, entry_key));
        CREATE TABLE payouts (
          payment_reference TEXT PRIMARY KEY, payout_date REAL NOT NULL, currency TEXT NOT NULL, recorded_at REAL NOT NULL,
          finding_count INTEGER NOT NULL, data TEXT NOT NULL);
        \(SharedSQL.settlementLinesAndIndexes)
        INSERT INTO ledger (order_id, entry, entry_key, klarna_id, amount, currency, at, source)
          SELECT i.subject, 'capture',
            CASE WHEN trim(coalesce(json_extract(i.data, '$.result'), '')) <> '' THEN trim(json_extract(i.data, '$.result'))
                 ELSE '~' || json_extract(i.data, '$.amount') || '@' || CAST(i.updated_at AS INTEGER) END,
            json_extract(i.data, '$.result'), json_extract(i.data, '$.amount'), json_extract(o.data, '$.currency'), i.updated_at, 'daemon'
          FROM intents i LEFT JOIN orders o ON o.order_id = i.subject
          WHERE i.kind = 'capture' AND i.state = 'confirmed' AND json_extract(i.data, '$.amount') IS NOT NULL
          ON CONFLICT DO NOTHING;
        """,
        // 10: refunds are intents on their order that run whatever the order's phase; this finds the ones under way.
        SharedSQL.openRefundsIndex,
        // 11: disputes, their hints and the operators' actions on them.
        SharedSQL.disputeTables(time: "REAL", serial: "INTEGER"),
        // 12: the Klarna account of every session, order and payment request.
        SharedSQL.accountColumns,
        // 13: the Klarna account of every payout, dispute and dispute hint, and each account's last dispute list.
        SharedSQL.moneyAccountColumns(time: "REAL"),
    ]

    static var latest: Int { steps.count }

    /// The step that made the settlement tables (tests undo it to test its backfill).
    static let settlementStep = 9
    /// The first step of accounts (tests undo it and the ones after to test the upgrade from the release before).
    static let accountsStep = 12

    static func version(of db: SQLiteConnection) throws -> Int {
        try db.query("PRAGMA user_version").first?.int(0) ?? 0
    }

    static func apply(to db: SQLiteConnection) throws {
        let current = try version(of: db)
        guard current <= latest else {
            throw SQLiteError(
                code: 1, message: "store schema version \(current) is newer than this binary (\(latest)); refusing to touch it", sql: nil)
        }
        for index in current..<latest {
            try db.transaction {
                try db.execute(steps[index])
                try db.execute("PRAGMA user_version = \(index + 1)")
            }
        }
    }
}
