import Foundation

/// A store's contents table by table, for `klarna-reconciler store copy`: each column with its kind, so that each
/// store maps it to its own types (SQLite keeps times as seconds since 1970 and flags as 0/1; PostgreSQL as
/// timestamptz and boolean). Ids stay what they were: outbox files and idempotency keys name them.
public enum TransferTable: String, CaseIterable, Sendable {
    case sessions, orders, intents, events, outcomes, wakeups, health, deliveries, rejections, reloads, holds
    case paymentRequests = "payment_requests"
    case captureRequests = "capture_requests"
    case operatorRequests = "operator_requests"
    case ledger, payouts
    case settlementLines = "settlement_lines"

    public enum Kind: Sendable {
        case text, integer, date, bool
    }

    /// Every column, in the order rows carry them.
    public var columns: [(name: String, kind: Kind)] {
        switch self {
        case .sessions:
            [
                ("hpp_session_id", .text), ("kp_session_id", .text), ("order_id", .text), ("merchant_reference", .text), ("phase", .text),
                ("outcome", .text), ("next_due", .date), ("deadline", .date), ("tracked_at", .date), ("updated_at", .date), ("data", .text),
                ("account", .text),
            ]
        case .orders:
            [
                ("order_id", .text), ("hpp_session_id", .text), ("merchant_reference", .text), ("phase", .text), ("outcome", .text),
                ("next_due", .date), ("deadline", .date), ("created_at", .date), ("updated_at", .date), ("data", .text),
                ("account", .text),
            ]
        case .paymentRequests:
            [
                ("payment_request_id", .text), ("state", .text), ("outcome", .text), ("next_due", .date), ("tracked_at", .date),
                ("updated_at", .date), ("data", .text), ("account", .text),
            ]
        case .intents:
            [
                ("key", .text), ("kind", .text), ("subject", .text), ("state", .text), ("attempts", .integer), ("next_attempt", .date),
                ("created_at", .date), ("updated_at", .date), ("data", .text),
            ]
        case .events:
            [("id", .integer), ("at", .date), ("hpp_session_id", .text), ("order_id", .text), ("kind", .text), ("message", .text), ("detail", .text)]
        case .outcomes:
            [
                ("id", .integer), ("at", .date), ("kind", .text), ("hpp_session_id", .text), ("order_id", .text), ("data", .text),
                ("outbox_written", .bool), ("notified", .bool), ("notify_attempts", .integer), ("notify_next", .date),
            ]
        case .captureRequests:
            [("id", .integer), ("order_id", .text), ("amount", .integer), ("requested_at", .date), ("state", .text), ("note", .text)]
        case .wakeups:
            [("id", .integer), ("work_key", .text), ("delivered", .bool)]
        case .health:
            [("name", .text), ("at", .date), ("detail", .text)]
        case .deliveries:
            [("dedupe_key", .text), ("kind", .text), ("source", .text), ("received_at", .date), ("summary", .text), ("repeats", .integer)]
        case .rejections:
            [("id", .integer), ("at", .date), ("source", .text), ("status", .integer), ("error", .text), ("detail", .text)]
        case .reloads:
            [("id", .integer), ("requested_at", .date), ("answered_at", .date), ("ok", .bool), ("message", .text)]
        case .operatorRequests:
            [
                ("id", .integer), ("work_key", .text), ("action", .text), ("order_id", .text), ("requested_by", .text), ("requested_at", .date),
                ("state", .text), ("note", .text), ("answered_at", .date),
            ]
        case .holds:
            [("work_key", .text), ("held_at", .date), ("held_by", .text)]
        case .ledger:
            [
                ("order_id", .text), ("entry", .text), ("entry_key", .text), ("klarna_id", .text), ("amount", .integer), ("currency", .text),
                ("at", .date), ("source", .text), ("settled_reference", .text), ("settled_ordinal", .integer), ("flagged_at", .date),
            ]
        case .payouts:
            [
                ("payment_reference", .text), ("payout_date", .date), ("currency", .text), ("recorded_at", .date), ("finding_count", .integer),
                ("data", .text),
            ]
        case .settlementLines:
            [("payment_reference", .text), ("ordinal", .integer), ("order_id", .text), ("data", .text)]
        }
    }

    /// Whether the first column is a numbered id the store hands out (its counter must continue after the copy).
    public var numbered: Bool { columns.first?.name == "id" }
}

/// One column's value in a transfer.
public enum TransferValue: Sendable, Equatable {
    case null
    case text(String)
    case integer(Int64)
    case date(Date)
    case bool(Bool)
}

/// What a store gives to `store copy`: its rows, a batch at a time, in a stable order.
public protocol TransferSource: Sendable {
    func exportRows(_ table: TransferTable, offset: Int, limit: Int) async throws -> [[TransferValue]]
    func count(_ table: TransferTable) async throws -> Int
    /// The highest id each numbered table ever handed out, rows since deleted included (pruned outcomes keep theirs
    /// in outbox file names: an id is never given twice).
    func counters() async throws -> [TransferTable: Int64]
}

/// What a store takes from `store copy`: rows into an empty store, then its counters moved past the copied ids.
public protocol TransferTarget: Sendable {
    /// No row in any table: a copy never merges into a store that was used.
    func isEmptyForTransfer() async throws -> Bool
    func importRows(_ table: TransferTable, _ rows: [[TransferValue]]) async throws
    /// Moves each numbered table's counter past `counters` and past every copied id.
    func finishTransfer(counters: [TransferTable: Int64]) async throws
    func count(_ table: TransferTable) async throws -> Int
}

extension StatementRunner {
    /// The rows of `table`: what `store copy` compares on both sides once it is done.
    public func count(_ table: TransferTable) async throws -> Int {
        try await rows(of: "SELECT count(*) FROM \(Statement(stringLiteral: table.rawValue))").first?.int(0) ?? 0
    }
}

/// `store copy`'s work, whatever its source and target: every table a batch at a time in the source's order, each
/// table's rows counted on both sides, then the target's counters moved past the source's. The command around it opens
/// the stores and holds them against daemons.
public enum StoreTransfer {
    /// Copies `source` into `target`, which must be empty (``TransferTarget/isEmptyForTransfer()``); returns each
    /// table with the rows it holds now. Throws ``CountMismatch`` when a table's rows differ after its copy.
    public static func copy(
        from source: any TransferSource, to target: any TransferTarget, batch: Int = 1_000
    ) async throws -> [(table: TransferTable, rows: Int)] {
        var copied: [(table: TransferTable, rows: Int)] = []
        for table in TransferTable.allCases {
            var offset = 0
            while true {
                let rows = try await source.exportRows(table, offset: offset, limit: batch)
                try await target.importRows(table, rows)
                offset += rows.count
                if rows.count < batch { break }
            }
            let (expected, found) = (try await source.count(table), try await target.count(table))
            guard expected == found else { throw CountMismatch(table: table, source: expected, target: found) }
            copied.append((table, found))
        }
        try await target.finishTransfer(counters: try await source.counters())
        return copied
    }

    /// A table holds other rows in the target than in the source once copied.
    public struct CountMismatch: Error, CustomStringConvertible {
        public let table: TransferTable
        public let source: Int
        public let target: Int
        public var description: String { "\(table.rawValue): \(source) rows in the source, \(target) in the copy" }
    }
}
