/// Every metric the daemon exports on `/metrics` (Prometheus text format). Names never change once released;
/// labels are low-cardinality words (never an id). The README's table lists them, and a test keeps the two in step.
public enum MetricName: String, CaseIterable, Sendable {
    // Counted where they happen (since the daemon started).
    /// Klarna calls by `operation` (`om.create_capture`, …) and `result` (``KlarnaCallResult``).
    case klarnaCalls = "klarna_reconciler_klarna_calls_total"
    /// Klarna call latency by `operation` (histogram).
    case klarnaCallDuration = "klarna_reconciler_klarna_call_duration_seconds"
    /// Time spent waiting for the rate budget before a Klarna call, by `urgency` (histogram).
    case budgetWait = "klarna_reconciler_budget_wait_seconds"
    /// Outcomes recorded, by `kind`.
    case outcomes = "klarna_reconciler_outcomes_total"
    /// Side effects that ended, by `kind` (place_order, capture, …) and `state` (confirmed, failed).
    case intentsFinished = "klarna_reconciler_intents_finished_total"
    /// Deliveries from the socket or the spool by `source` and `result` (`accepted`, `repeat`, `refused`).
    case deliveries = "klarna_reconciler_deliveries_total"
    /// Refused deliveries by `source` and `reason` (the error word: `bad_token`, `malformed`, …).
    case refusals = "klarna_reconciler_refusals_total"
    /// Store transactions' duration, fsync included (histogram).
    case storeCommitDuration = "klarna_reconciler_store_commit_duration_seconds"
    /// Settlement lines of the payouts reconciled, by `result` (``SettlementLineResult``).
    case settlementLines = "klarna_reconciler_settlement_lines_total"
    /// Settlement findings recorded, by `kind` (``SettlementFindingKind``: `orphan`, `amount_mismatch`, …).
    case settlementFindings = "klarna_reconciler_settlement_findings_total"
    /// Payouts fetched, matched and recorded.
    case payoutsReconciled = "klarna_reconciler_payouts_reconciled_total"
    /// Settlement syncs that failed (each is tried again).
    case settlementSyncFailures = "klarna_reconciler_settlement_sync_failures_total"

    // Read from the state when scraped (the store's part at most every few seconds).
    /// Open HPP sessions by `phase` (`polling`, `authorized`).
    case openSessions = "klarna_reconciler_open_sessions"
    /// Open orders by `phase` (`checking`, `pending_fraud`, `awaiting_capture`, `capturing`).
    case openOrders = "klarna_reconciler_open_orders"
    /// Side effects not yet known to be done, by `state` (`intended`, `sent`, `ambiguous`).
    case unfinishedIntents = "klarna_reconciler_unfinished_intents"
    /// Outcomes not yet written to the outbox.
    case outboxBacklog = "klarna_reconciler_outbox_backlog"
    /// Outcomes whose `notify.url` POST has not succeeded yet (0 without `notify.url`).
    case notifyBacklog = "klarna_reconciler_notify_backlog"
    /// Sessions and orders on hold.
    case held = "klarna_reconciler_held"
    /// Age of the oldest open session or order (0 when none is open).
    case oldestOpenAge = "klarna_reconciler_oldest_open_age_seconds"
    /// When the next deadline falls (a token or an authorization expiry), as a Unix time (0 when none).
    case nextDeadline = "klarna_reconciler_next_deadline_timestamp_seconds"
    /// Files waiting in the spool's `new/`, and refused files in `quarantine/`.
    case spoolNew = "klarna_reconciler_spool_new_files"
    case spoolQuarantined = "klarna_reconciler_spool_quarantined_files"
    /// Work due that no worker has taken yet (from memory).
    case backlog = "klarna_reconciler_backlog"
    /// 1 while `/v1/ready` would answer 200.
    case ready = "klarna_reconciler_ready"

    // Read from the store after each settlement sync (`settlements.enabled`).
    /// Captures flagged as not settled in time that no payout has settled since.
    case unsettledCaptures = "klarna_reconciler_unsettled_captures"
    /// The newest payout recorded, as a Unix time (0 when none).
    case newestPayout = "klarna_reconciler_newest_payout_timestamp_seconds"
}

/// The `result` label of ``MetricName/settlementLines``: what a settlement line matched.
public enum SettlementLineResult: String, Sendable, CaseIterable {
    /// A capture, a refund or an order of the ledger.
    case matched
    /// About the payout rather than an order (HOLDBACK, RELEASE, CHARGE, CREDIT, …).
    case payoutLevel = "payout_level"
    case unmatched

    public init(_ match: LineMatch) {
        if match.isMatched {
            self = .matched
        } else {
            self = match == .payoutLevel ? .payoutLevel : .unmatched
        }
    }
}

/// The `result` label of ``MetricName/klarnaCalls``.
public enum KlarnaCallResult: String, Sendable, CaseIterable {
    case ok
    case notFound = "not_found"
    case rateLimited = "rate_limited"
    case clientError = "client_error"
    case serverError = "server_error"
    case transportError = "transport_error"

    public init(status: Int?) {
        switch status {
        case nil: self = .transportError
        case let status? where (200..<300).contains(status): self = .ok
        case 404: self = .notFound
        case 429: self = .rateLimited
        case let status? where status >= 500: self = .serverError
        default: self = .clientError
        }
    }
}
