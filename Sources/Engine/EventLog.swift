import Foundation
import Logging
import ReconcilerCore
import ReconcilerStore
import Telemetry

/// Every committed event and outcome becomes one log line with the payment's identifiers as metadata (journald
/// fields `HPP_SESSION_ID`, `ORDER_ID`, …, see ``LogContext``) and, for what an operator acts on, a stable
/// ``MessageID``. Lines are written after the commit, so the journal never tells of a step the store lost.
enum EventLog {
    static func log(_ change: Change, logger: Logger) {
        for event in change.events {
            var metadata: Logger.Metadata = [:]
            if let id = event.hppSessionID { metadata["hpp_session_id"] = .string(id) }
            if let id = event.orderID { metadata["order_id"] = .string(id) }
            for (key, value) in event.detail { metadata[key] = .string(value) }
            log(event.event, metadata: metadata, logger: logger)
        }
        for outcome in change.outcomes { log(outcome, logger: logger) }
    }

    /// Outcomes a service recorded outside an engine step (settlements, disputes): each logged as the engine logs
    /// outcomes and counted; `bell` (the outbox's) is rung so they are written at once.
    static func announce(_ outcomes: [Outcome], logger: Logger, bell: Doorbell?) {
        guard !outcomes.isEmpty else { return }
        for outcome in outcomes {
            log(outcome, logger: logger)
            Telemetry.count(.outcomes, ("kind", outcome.kind.rawValue))
        }
        bell?.ring()
    }

    /// An outcome's line: its ``MessageID``, the payment's (or the payout's) identifiers, and the reason.
    static func log(_ outcome: Outcome, logger: Logger) {
        var metadata: Logger.Metadata = [
            "outcome": .string(outcome.kind.rawValue),
            MessageID.metadataKey: .string(MessageID(outcome: outcome.kind).rawValue),
        ]
        if let id = outcome.hppSessionID { metadata["hpp_session_id"] = .string(id) }
        if let id = outcome.kpSessionID { metadata["kp_session_id"] = .string(id) }
        if let id = outcome.orderID { metadata["order_id"] = .string(id) }
        if let reference = outcome.merchantReference { metadata["merchant_reference"] = .string(reference) }
        if let request = outcome.paymentRequestID { metadata["payment_request_id"] = .string(request) }
        if let amount = outcome.amount { metadata["amount"] = .stringConvertible(amount) }
        if let reference = outcome.paymentReference { metadata["payment_reference"] = .string(reference) }
        if let finding = outcome.finding { metadata["finding"] = .string(finding.rawValue) }
        if let id = outcome.captureID { metadata["capture_id"] = .string(id) }
        if let id = outcome.refundID { metadata["refund_id"] = .string(id) }
        if let reference = outcome.refundReference { metadata["refund_reference"] = .string(reference) }
        if let reference = outcome.chargeReference { metadata["charge_reference"] = .string(reference) }
        // A customer token by its tail only, as everywhere in the journal.
        if let token = outcome.customerTokenID { metadata["customer_token"] = .string(Redact.tail(token)) }
        if let code = outcome.klarnaErrorCode { metadata["error_code"] = .string(code) }
        if let correlation = outcome.klarnaCorrelationID { metadata["klarna_correlation_id"] = .string(correlation) }
        if let id = outcome.disputeID { metadata["dispute_id"] = .string(id) }
        if let state = outcome.disputeState { metadata["dispute_state"] = .string(state) }
        if let deadline = outcome.deadline { metadata["deadline"] = .string(TrackedSession.format(deadline)) }
        let level: Logger.Level =
            switch outcome.kind {
            case .needsAttention, .refundFailed, .chargeFailed, .disputeLost, .disputeActionFailed: .error
            case .disputeOpened, .disputeDeadline, .chargeDeclined: .warning
            default: .notice
            }
        logger.log(level: level, "outcome \(outcome.kind.rawValue): \(outcome.reason)", metadata: metadata)
    }

    static func log(_ event: DomainEvent, metadata: Logger.Metadata, logger: Logger) {
        var metadata = metadata
        metadata["event"] = .string(event.kind.rawValue)
        if let id = MessageID(event: event.kind) { metadata[MessageID.metadataKey] = .string(id.rawValue) }
        logger.log(level: level(of: event.kind), "\(event.message)", metadata: metadata)
    }

    static func level(of kind: EventKind) -> Logger.Level {
        switch kind.severity {
        case .error: .error
        case .warning: .warning
        case .notice: .notice
        case .info: .info
        }
    }
}
