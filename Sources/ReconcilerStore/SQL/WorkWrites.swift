import Foundation
import ReconcilerCore

/// The rows of the work tables, one statement each, written once: what a track, an ingest, an operator request and
/// SQLite's commit write. (PostgreSQL's commit writes a whole change in one fenced statement of its own.)
public enum WorkWrites {
    /// Whether a write over a row already there replaces it.
    public enum Conflict: Sendable {
        /// Replaces the row's changing columns.
        case update
        /// Leaves it; the statement returns a row only when it inserted one.
        case keep
    }

    public static func session(_ session: TrackedSession, at: Date, _ conflict: Conflict) throws -> Statement {
        let onConflict: Statement =
            switch conflict {
            case .update:
                """
                DO UPDATE SET order_id = excluded.order_id, phase = excluded.phase, outcome = excluded.outcome, next_due = excluded.next_due,
                  deadline = excluded.deadline, updated_at = excluded.updated_at, data = excluded.data
                """
            case .keep: "DO NOTHING RETURNING 1"
            }
        return """
            INSERT INTO sessions (hpp_session_id, kp_session_id, order_id, merchant_reference, phase, outcome, next_due, deadline, tracked_at,
              updated_at, data, account)
            VALUES (\(session.hppSessionID), \(session.kpSessionID), \(session.orderID), \(session.merchantReference), \(session.phase.rawValue),
              \(session.outcome?.rawValue), \(session.isOpen ? session.nextDueAt : nil), \(session.deadline), \(session.trackedAt), \(at),
              \(try StoredJSON.encode(session)), \(session.account.rawValue))
            ON CONFLICT (hpp_session_id) \(onConflict)
            """
    }

    public static func order(_ order: TrackedOrder, at: Date, _ conflict: Conflict) throws -> Statement {
        let onConflict: Statement =
            switch conflict {
            case .update:
                """
                DO UPDATE SET phase = excluded.phase, outcome = excluded.outcome, next_due = excluded.next_due, deadline = excluded.deadline,
                  updated_at = excluded.updated_at, data = excluded.data
                """
            case .keep: "DO NOTHING RETURNING 1"
            }
        return """
            INSERT INTO orders (order_id, hpp_session_id, merchant_reference, phase, outcome, next_due, deadline, created_at, updated_at, data, account)
            VALUES (\(order.orderID), \(order.hppSessionID), \(order.merchantReference), \(order.phase.rawValue), \(order.outcome?.rawValue),
              \(order.isOpen ? order.nextDueAt : nil), \(order.deadline), \(order.createdAt), \(at), \(try StoredJSON.encode(order)),
              \(order.account.rawValue))
            ON CONFLICT (order_id) \(onConflict)
            """
    }

    public static func paymentRequest(_ request: TrackedPaymentRequest, at: Date) throws -> Statement {
        """
        INSERT INTO payment_requests (payment_request_id, state, outcome, next_due, tracked_at, updated_at, data, account)
        VALUES (\(request.paymentRequestID), \(request.state?.rawValue), \(request.outcome?.rawValue), \(request.isOpen ? request.nextDueAt : nil),
          \(request.trackedAt), \(at), \(try StoredJSON.encode(request)), \(request.account.rawValue))
        ON CONFLICT (payment_request_id) DO UPDATE SET state = excluded.state, outcome = excluded.outcome, next_due = excluded.next_due,
          updated_at = excluded.updated_at, data = excluded.data
        """
    }

    /// `.update`: over the stored version unless that one counts more attempts (``Intent/attempts`` never goes back).
    public static func intent(_ intent: Intent, at: Date, _ conflict: Conflict) throws -> Statement {
        let onConflict: Statement =
            switch conflict {
            case .update:
                """
                DO UPDATE SET state = excluded.state, attempts = excluded.attempts, next_attempt = excluded.next_attempt,
                  updated_at = excluded.updated_at, data = excluded.data
                WHERE intents.attempts <= excluded.attempts
                """
            case .keep: "DO NOTHING RETURNING 1"
            }
        return """
            INSERT INTO intents (key, kind, subject, state, attempts, next_attempt, created_at, updated_at, data)
            VALUES (\(intent.key), \(intent.kind.rawValue), \(intent.subject), \(intent.state.rawValue), \(intent.attempts), \(intent.nextAttemptAt),
              \(intent.createdAt), \(at), \(try StoredJSON.encode(intent)))
            ON CONFLICT (key) \(onConflict)
            """
    }

    public static func event(_ event: NewEvent, at: Date) throws -> Statement {
        let detail = event.detail.isEmpty ? nil : try StoredJSON.encode(event.detail)
        return """
            INSERT INTO events (at, hpp_session_id, order_id, kind, message, detail)
            VALUES (\(at), \(event.hppSessionID), \(event.orderID), \(event.event.kind.rawValue), \(event.event.message), \(detail))
            """
    }

    /// An outcome for the outbox writer and the notifier.
    public static func outcome(_ outcome: Outcome, at: Date) throws -> Statement {
        """
        INSERT INTO outcomes (at, kind, hpp_session_id, order_id, data)
        VALUES (\(at), \(outcome.kind.rawValue), \(outcome.hppSessionID), \(outcome.orderID), \(try StoredJSON.encode(outcome)))
        """
    }

    /// A wakeup for `key`. `delivered`: the ingesting daemon wakes the engine itself after the commit; on a shared
    /// store the row then names that daemon (`holder`) when it holds the key, and it skips the row when it takes its
    /// wakeups.
    public static func wakeup(_ key: WorkKey, delivered: Bool, holder: String?) -> Statement {
        guard let holder else { return "INSERT INTO wakeups (work_key, delivered) VALUES (\(key.description), \(delivered))" }
        return """
            INSERT INTO wakeups (work_key, delivered, woken_by)
            VALUES (\(key.description), \(delivered),
              (SELECT holder FROM work_leases WHERE \(delivered) AND work_key = \(key.description) AND holder = \(holder)))
            """
    }

    public static func disputeHint(_ hint: DisputeHint, at: Date) -> Statement {
        """
        INSERT INTO dispute_hints (dispute_id, hinted_at, account) VALUES (\(hint.disputeID), \(at), \(hint.account.rawValue))
        ON CONFLICT (dispute_id) DO UPDATE SET hinted_at = excluded.hinted_at, account = excluded.account
        """
    }
}
