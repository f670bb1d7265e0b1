import Foundation
import ReconcilerCore

extension OpenWork {
    /// Every open session, order, payment request, refund and intent on a customer token under way, as
    /// ``merging(rows:)`` reads them: a kind (`s`, `o`, `p`, `r`, `c`), the unit's id (a token intent's: its key), when it is due, its phase, deadline and account, and a session's poll
    /// profile.
    public static let all: Statement = """
        SELECT 's', hpp_session_id, next_due, phase, deadline, tracked_at, \(jsonNumber: "data", StoredJSON.sessionLastReadAt),
          \(jsonNumber: "data", StoredJSON.sessionLastHintAt), \(jsonNumber: "data", StoredJSON.sessionExpiresAt), account
        FROM sessions WHERE next_due IS NOT NULL
        UNION ALL
        SELECT 'o', order_id, next_due, phase, deadline, NULL, NULL, NULL, NULL, account FROM orders WHERE next_due IS NOT NULL
        UNION ALL
        SELECT 'p', payment_request_id, next_due, NULL, NULL, NULL, NULL, NULL, NULL, account FROM payment_requests WHERE next_due IS NOT NULL
        UNION ALL
        SELECT 'r', subject, min(coalesce(next_attempt, created_at)), NULL, NULL, NULL, NULL, NULL, NULL, NULL
        FROM intents WHERE kind = 'refund' AND state IN ('intended', 'sent', 'ambiguous')
        GROUP BY subject
        UNION ALL
        SELECT 'c', key, coalesce(next_attempt, created_at), NULL, NULL, NULL, NULL, NULL, NULL, \(json: "data", StoredJSON.intentAccount)
        FROM intents WHERE kind IN ('charge', 'cancel_customer_token') AND state IN ('intended', 'sent', 'ambiguous')
        """

    /// The open work in rows of ``all``'s columns, an order's refunds merged into its own.
    public static func merging(rows: [any StatementRow]) -> [OpenWork] {
        // Dates inside `data` are Foundation's default encoding: seconds since 2001-01-01.
        func encoded(_ seconds: Double?) -> Date? { seconds.map { Date(timeIntervalSinceReferenceDate: $0) } }
        var work: [OpenWork] = []
        var refunds: [OpenWork] = []
        for row in rows {
            guard let id = row.string(1), let due = row.date(2) else { continue }
            // A row's `account` column: a valid id, only ever written from one.
            let account = row.string(9).flatMap(AccountID.init(rawValue:)) ?? .default
            switch row.string(0) {
            case "s":
                let poll = PollProfile(
                    trackedAt: row.date(5) ?? due, lastReadAt: encoded(row.double(6)), lastHintAt: encoded(row.double(7)),
                    expiresAt: encoded(row.double(8)))
                let phase = row.string(3).flatMap(TrackedSession.Phase.init) ?? .polling
                work.append(OpenWork(key: .session(id), due: due, kind: .session(phase, poll), deadline: row.date(4), account: account))
            case "o":
                let phase = row.string(3).flatMap(TrackedOrder.Phase.init) ?? .checking
                work.append(OpenWork(key: .order(id), due: due, kind: .order(phase), deadline: row.date(4), account: account))
            case "r":
                refunds.append(OpenWork(key: .order(id), due: due, kind: .refund))
            case "c":
                work.append(OpenWork(key: .customerToken(id), due: due, kind: .customerToken, account: account))
            default:
                work.append(OpenWork(key: .paymentRequest(id), due: due, kind: .paymentRequest, account: account))
            }
        }
        return merging(work, refunds: refunds)
    }
}

extension WorkQueue where Self: StatementRunner {
    public func openWork() async throws -> [OpenWork] {
        OpenWork.merging(rows: try await rows(of: OpenWork.all))
    }
}
