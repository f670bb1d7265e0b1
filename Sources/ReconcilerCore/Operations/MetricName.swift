/// Every metric the daemon exports on `/metrics` (Prometheus text format). Names never change once released;
/// labels are low-cardinality words (never an id). docs/operations.md's table lists them, and a test keeps the two in step.
public enum MetricName: String, CaseIterable, Sendable {
    // Counted where they happen (since the daemon started).
    case klarnaCalls = "klarna_reconciler_klarna_calls_total"
    case klarnaCallDuration = "klarna_reconciler_klarna_call_duration_seconds"
    case budgetWait = "klarna_reconciler_budget_wait_seconds"
    case outcomes = "klarna_reconciler_outcomes_total"
    case intentsFinished = "klarna_reconciler_intents_finished_total"
    case charges = "klarna_reconciler_charges_total"
    case deliveries = "klarna_reconciler_deliveries_total"
    case refusals = "klarna_reconciler_refusals_total"
    case storeCommitDuration = "klarna_reconciler_store_commit_duration_seconds"
    case settlementLines = "klarna_reconciler_settlement_lines_total"
    case settlementFindings = "klarna_reconciler_settlement_findings_total"
    case payoutsReconciled = "klarna_reconciler_payouts_reconciled_total"
    case settlementSyncFailures = "klarna_reconciler_settlement_sync_failures_total"

    // Read from the state when scraped (the store's part at most every few seconds).
    case openSessions = "klarna_reconciler_open_sessions"
    case openOrders = "klarna_reconciler_open_orders"
    case unfinishedIntents = "klarna_reconciler_unfinished_intents"
    case outboxBacklog = "klarna_reconciler_outbox_backlog"
    case notifyBacklog = "klarna_reconciler_notify_backlog"
    case held = "klarna_reconciler_held"
    case chargesWaiting = "klarna_reconciler_charges_waiting"
    case oldestOpenAge = "klarna_reconciler_oldest_open_age_seconds"
    case nextDeadline = "klarna_reconciler_next_deadline_timestamp_seconds"
    case spoolNew = "klarna_reconciler_spool_new_files"
    case spoolQuarantined = "klarna_reconciler_spool_quarantined_files"
    case backlog = "klarna_reconciler_backlog"
    case ready = "klarna_reconciler_ready"
    case diskFreeBytes = "klarna_reconciler_disk_free_bytes"
    case diskFull = "klarna_reconciler_disk_full"

    // Read from the store after each settlement sync (`settlements.enabled`).
    case unsettledCaptures = "klarna_reconciler_unsettled_captures"
    case newestPayout = "klarna_reconciler_newest_payout_timestamp_seconds"

    // Disputes (`disputes.enabled`): counted where they happen, and read from the store after each sync.
    case disputeSyncFailures = "klarna_reconciler_dispute_sync_failures_total"
    case openDisputes = "klarna_reconciler_open_disputes"
    case disputeDeadlineSeconds = "klarna_reconciler_dispute_next_deadline_seconds"
    case disputedAmountHeld = "klarna_reconciler_disputed_amount_held"

    /// The `# HELP` line of the metric: what it counts, and by which labels.
    public var help: String {
        switch self {
        case .klarnaCalls:
            "Klarna API calls by operation (hpp.read_session, kp.create_order, om.create_capture, ...) and result (ok, not_found, rate_limited, client_error, server_error, transport_error)."
        case .klarnaCallDuration: "Klarna API call latency in seconds, by operation."
        case .budgetWait: "Seconds spent waiting for the rate budget before a Klarna call, by urgency."
        case .outcomes: "Outcomes recorded, by kind (order_placed, captured, needs_attention, ...)."
        case .intentsFinished: "Side effects that ended, by kind (place_order, capture, ...) and state (confirmed, failed)."
        case .charges: "Charges of customer tokens (renewals) that ended, by outcome: placed, declined or failed."
        case .deliveries: "Deliveries from the socket or the spool, by source and result (accepted, repeat, refused)."
        case .refusals: "Refused deliveries, by source and reason (bad_token, malformed_json, ...)."
        case .storeCommitDuration: "Store transaction duration in seconds, fsync included."
        case .settlementLines: "Settlement lines of the payouts reconciled, by result (matched, payout_level, unmatched)."
        case .settlementFindings: "Settlement findings recorded, by kind (orphan, amount_mismatch, unknown_capture, ...)."
        case .payoutsReconciled: "Payouts fetched, matched against the ledger and recorded."
        case .settlementSyncFailures: "Settlement syncs that failed (each is tried again)."
        case .openSessions: "Open HPP sessions, by phase (polling, authorized)."
        case .openOrders: "Open orders, by phase (checking, pending_fraud, awaiting_capture, capturing)."
        case .unfinishedIntents: "Side effects not yet known to be done, by state (intended, sent, ambiguous)."
        case .outboxBacklog: "Outcomes not yet written to the outbox."
        case .notifyBacklog: "Outcomes whose notify.url POST has not succeeded yet (0 without notify.url)."
        case .held: "Sessions and orders on hold."
        case .chargesWaiting: "Charges of customer tokens (renewals) recorded and not yet placed, declined or failed."
        case .oldestOpenAge: "Age in seconds of the oldest open session or order (0 when none is open)."
        case .nextDeadline: "When the next deadline falls (an authorization token or an authorization expiry), as a Unix time (0 when none)."
        case .spoolNew: "Files waiting in the spool's new/ directory."
        case .spoolQuarantined: "Refused files in the spool's quarantine/ directory."
        case .backlog: "Work due that no worker has taken yet."
        case .ready: "1 while /v1/ready would answer 200, else 0."
        case .diskFreeBytes:
            "Bytes free for the daemon by directory (store, spool, outbox), less the store's reserve while it is given back."
        case .diskFull: "1 while a directory the daemon writes is below disk.min_free_mb (deliveries refused with 503 disk_full), else 0."
        case .unsettledCaptures: "Captures flagged as not settled in time that no payout has settled since."
        case .newestPayout: "The newest payout recorded, as a Unix time (0 when none)."
        case .disputeSyncFailures: "Dispute syncs that failed (each is tried again)."
        case .openDisputes: "Open Klarna disputes, by state (INITIATED, REPRESENTMENT, PRE_ARBITRATION, ARBITRATION)."
        case .disputeDeadlineSeconds: "Seconds until the nearest deadline of an open dispute (negative once passed; 0 when none)."
        case .disputedAmountHeld: "Minor units Klarna holds for open disputes, by currency."
        }
    }
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
