/// SQL that both stores take as it is (SQLite since 3.35 and PostgreSQL agree on it), written once.
public enum SharedSQL {
    /// The indexes both first schema steps make, after their tables (SQLite's step 1, PostgreSQL's step 1).
    public static let firstStepIndexes = """
        CREATE INDEX sessions_due ON sessions(next_due) WHERE next_due IS NOT NULL;
        CREATE INDEX sessions_kp ON sessions(kp_session_id);
        CREATE INDEX sessions_order ON sessions(order_id) WHERE order_id IS NOT NULL;
        CREATE INDEX sessions_reference ON sessions(merchant_reference) WHERE merchant_reference IS NOT NULL;
        CREATE INDEX sessions_phase ON sessions(phase, updated_at);
        CREATE INDEX orders_due ON orders(next_due) WHERE next_due IS NOT NULL;
        CREATE INDEX orders_reference ON orders(merchant_reference) WHERE merchant_reference IS NOT NULL;
        CREATE INDEX orders_phase ON orders(phase, updated_at);
        CREATE INDEX intents_subject ON intents(subject);
        CREATE INDEX intents_state ON intents(state, updated_at);
        CREATE INDEX events_session ON events(hpp_session_id) WHERE hpp_session_id IS NOT NULL;
        CREATE INDEX events_order ON events(order_id) WHERE order_id IS NOT NULL;
        CREATE INDEX outcomes_session ON outcomes(hpp_session_id) WHERE hpp_session_id IS NOT NULL;
        CREATE INDEX outcomes_order ON outcomes(order_id) WHERE order_id IS NOT NULL;
        CREATE INDEX capture_requests_pending ON capture_requests(order_id, id) WHERE state = 'pending';
        """

    /// The refunds under way, by order: the open work a refund makes, whatever its order's phase (SQLite's schema step
    /// 10, PostgreSQL's 7). `IF NOT EXISTS`: the settlement migration's test applies the steps after it again.
    public static let openRefundsIndex = """
        CREATE INDEX IF NOT EXISTS intents_open_refunds ON intents(subject, created_at) WHERE kind = 'refund' AND state IN ('intended', 'sent', 'ambiguous');
        """

    /// Open sessions and orders by account and phase, for `status` (both stores).
    public static let countsByAccount = """
        SELECT 's', account, phase, COUNT(*) FROM sessions GROUP BY account, phase
        UNION ALL SELECT 'o', account, phase, COUNT(*) FROM orders GROUP BY account, phase
        """

    /// Every unit of work belongs to one Klarna account (SQLite's schema step 12, PostgreSQL's 9); rows written before
    /// accounts belong to the default one. Written when a unit is first inserted, never changed.
    public static let accountColumns = """
        ALTER TABLE sessions ADD COLUMN account TEXT NOT NULL DEFAULT 'default';
        ALTER TABLE orders ADD COLUMN account TEXT NOT NULL DEFAULT 'default';
        ALTER TABLE payment_requests ADD COLUMN account TEXT NOT NULL DEFAULT 'default';
        """

    /// The settlement lines' table and the settlement tables' indexes (SQLite's schema step 9, PostgreSQL's 4), made
    /// after the ledger and payouts tables, whose column types differ.
    public static let settlementLinesAndIndexes = """
        CREATE TABLE settlement_lines (
          payment_reference text NOT NULL, ordinal integer NOT NULL, order_id text, data text NOT NULL,
          PRIMARY KEY (payment_reference, ordinal));
        CREATE INDEX settlement_lines_order ON settlement_lines(order_id);
        CREATE INDEX ledger_unsettled ON ledger(at, order_id, entry_key)
          WHERE entry = 'capture' AND settled_reference IS NULL AND flagged_at IS NULL;
        CREATE INDEX ledger_flagged ON ledger(order_id) WHERE flagged_at IS NOT NULL AND settled_reference IS NULL;
        CREATE INDEX payouts_date ON payouts(payout_date);
        """
}

extension SharedSQL {
    /// Disputes (SQLite's schema step 11, PostgreSQL's 8): each dispute with the core's JSON of it (`data`) and Klarna's
    /// (`raw`), the webhooks' hints not read yet, and the operators' actions. `time` and `serial` are the dialect's
    /// column types for a point in time and a row id. `IF NOT EXISTS`: the settlement migration's test applies the
    /// steps after it again.
    public static func disputeTables(time: String, serial: String) -> String {
        """
        CREATE TABLE IF NOT EXISTS disputes (
          dispute_id text PRIMARY KEY, order_id text, state text NOT NULL, is_open integer NOT NULL, deadline \(time),
          next_look \(time), klarna_updated_at \(time), revision integer NOT NULL, api_version text NOT NULL, data text NOT NULL, raw text);
        CREATE INDEX IF NOT EXISTS disputes_order ON disputes(order_id);
        CREATE INDEX IF NOT EXISTS disputes_look ON disputes(next_look) WHERE is_open = 1 AND next_look IS NOT NULL;
        CREATE TABLE IF NOT EXISTS dispute_hints (dispute_id text PRIMARY KEY, hinted_at \(time) NOT NULL);
        CREATE TABLE IF NOT EXISTS dispute_actions (
          id \(serial) PRIMARY KEY, dispute_id text NOT NULL, kind text NOT NULL, state text NOT NULL, next_at \(time),
          revision integer NOT NULL, data text NOT NULL);
        CREATE INDEX IF NOT EXISTS dispute_actions_dispute ON dispute_actions(dispute_id, kind);
        CREATE INDEX IF NOT EXISTS dispute_actions_due ON dispute_actions(next_at) WHERE next_at IS NOT NULL;
        CREATE TABLE IF NOT EXISTS dispute_lists (id integer PRIMARY KEY, listed_through \(time) NOT NULL);
        """
    }
}

extension SharedSQL {
    /// Payouts and disputes belong to a Klarna account too (SQLite's schema step 13, PostgreSQL's 10): each account's
    /// settlement sync lists from its own newest payout, each dispute service reads its own disputes and hints and
    /// lists from its own last list. What was recorded before belongs to the default account.
    public static func moneyAccountColumns(time: String) -> String {
        """
        ALTER TABLE payouts ADD COLUMN account text NOT NULL DEFAULT 'default';
        CREATE INDEX payouts_account ON payouts(account, payout_date);
        ALTER TABLE disputes ADD COLUMN account text NOT NULL DEFAULT 'default';
        ALTER TABLE dispute_hints ADD COLUMN account text NOT NULL DEFAULT 'default';
        CREATE TABLE dispute_account_lists (account text PRIMARY KEY, listed_through \(time) NOT NULL);
        INSERT INTO dispute_account_lists (account, listed_through) SELECT 'default', listed_through FROM dispute_lists;
        DROP TABLE dispute_lists;
        """
    }
}
