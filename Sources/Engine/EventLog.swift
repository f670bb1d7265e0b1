import Foundation
import Logging
import ReconcilerCore
import ReconcilerStore

/// Every committed event and outcome becomes one log line with the payment's identifiers as metadata, so
/// `journalctl ORDER_ID=…` (issue 5 maps metadata to journal fields) tells an order's whole story.
enum EventLog {
    static func log(_ change: Change, logger: Logger) {
        for event in change.events {
            var metadata: Logger.Metadata = ["event": .string(event.event.kind)]
            if let id = event.hppSessionID { metadata["hpp_session_id"] = .string(id) }
            if let id = event.orderID { metadata["order_id"] = .string(id) }
            for (key, value) in event.detail { metadata[key] = .string(value) }
            logger.log(level: level(of: event.event.kind), "\(event.event.message)", metadata: metadata)
        }
        for outcome in change.outcomes {
            var metadata: Logger.Metadata = ["outcome": .string(outcome.kind.rawValue)]
            if let id = outcome.hppSessionID { metadata["hpp_session_id"] = .string(id) }
            if let id = outcome.kpSessionID { metadata["kp_session_id"] = .string(id) }
            if let id = outcome.orderID { metadata["order_id"] = .string(id) }
            if let reference = outcome.merchantReference { metadata["merchant_reference"] = .string(reference) }
            if let request = outcome.paymentRequestID { metadata["payment_request_id"] = .string(request) }
            if let amount = outcome.amount { metadata["amount"] = .stringConvertible(amount) }
            let level: Logger.Level = outcome.kind == .needsAttention ? .error : .notice
            logger.log(level: level, "outcome \(outcome.kind.rawValue): \(outcome.reason)", metadata: metadata)
        }
    }

    static func level(of kind: String) -> Logger.Level {
        switch kind {
        case "needs_attention", "failed": .error
        case "ambiguous", "retry", "read_failed", "authorization_expiring", "token_expired", "expired", "refused", "capture_refused", "mode_mismatch", "stale_status", "not_found":
            .warning
        case "status", "order_status", "attempt", "resolved", "tracked", "capture_requested": .info
        default: .notice
        }
    }
}
