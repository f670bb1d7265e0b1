import Foundation
import ReconcilerCore

extension StoredOutcome {
    /// The outcome columns, in the order ``init(row:)`` reads them.
    public static let columns: Statement = "id, at, data, outbox_written, notified, notify_attempts, notify_next"

    /// A row of ``columns``.
    public init(row: any StatementRow) throws {
        guard let id = row.int64(0), let at = row.date(1) else { throw MissingRow(what: "an outcome's id and time") }
        self.init(
            id: id, at: at, outcome: try row.decoded(Outcome.self, 2), outboxWritten: row.bool(3) ?? false, notified: row.bool(4) ?? false,
            notifyAttempts: row.int(5) ?? 0, notifyNextAt: row.date(6))
    }

    /// Whether the outcome (an `outcomes` row) waits for its outbox file or for a notification due at `now`.
    public static func undelivered(now: Date) -> Statement {
        "(outbox_written = \(literal: false) OR (notified = \(literal: false) AND (notify_next IS NULL OR notify_next <= \(now))))"
    }
}

extension RecordedEvent {
    /// The event columns, in the order ``init(row:)`` reads them.
    public static let columns: Statement = "id, at, hpp_session_id, order_id, kind, message, detail"

    /// A row of ``columns``.
    public init(row: any StatementRow) throws {
        guard let id = row.int64(0), let at = row.date(1) else { throw MissingRow(what: "an event's id and time") }
        self.init(
            id: id, at: at, hppSessionID: row.string(2), orderID: row.string(3), kind: row.string(4) ?? "", message: row.string(5) ?? "",
            detail: try row.string(6).map { try StoredJSON.decode([String: String].self, $0) } ?? [:])
    }
}

/// The outcome queue, written once; a store shared by several daemons claims the outcomes it reads instead.
extension OutcomeQueue where Self: StatementRunner {
    public func undeliveredOutcomes(now: Date, limit: Int) async throws -> [StoredOutcome] {
        try await rows(of: "SELECT \(StoredOutcome.columns) FROM outcomes WHERE \(StoredOutcome.undelivered(now: now)) ORDER BY id LIMIT \(limit)")
            .map(StoredOutcome.init(row:))
    }

    public func markOutboxWritten(_ ids: [Int64], notified: Bool) async throws {
        guard !ids.isEmpty else { return }
        _ = try await rows(
            writtenBy: "UPDATE outcomes SET outbox_written = \(literal: true), notified = notified OR \(notified) WHERE id \(anyOf: ids)")
    }

    public func markNotified(_ id: Int64) async throws {
        _ = try await rows(writtenBy: "UPDATE outcomes SET notified = \(literal: true) WHERE id = \(id)")
    }

    public func notifyFailed(_ id: Int64, nextAt: Date?) async throws {
        // No next attempt: given up; counted as delivered so the queue moves on (the outbox file stays).
        _ = try await rows(
            writtenBy:
                "UPDATE outcomes SET notify_attempts = notify_attempts + 1, notify_next = \(nextAt), notified = \(nextAt == nil) WHERE id = \(id)")
    }
}
