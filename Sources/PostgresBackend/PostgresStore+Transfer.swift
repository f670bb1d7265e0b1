import Foundation
import PostgresNIO
import ReconcilerStore

/// `store copy` writes into an empty PostgreSQL store: rows keep their ids (`OVERRIDING SYSTEM VALUE`), and each
/// numbered table's counter is moved past the highest copied id at the end.
extension PostgresStore: TransferTarget {
    public func isEmptyForTransfer() async throws -> Bool {
        try await rows(
            """
            SELECT NOT EXISTS (SELECT 1 FROM sessions) AND NOT EXISTS (SELECT 1 FROM orders) AND NOT EXISTS (SELECT 1 FROM events)
              AND NOT EXISTS (SELECT 1 FROM outcomes) AND NOT EXISTS (SELECT 1 FROM payment_requests)
            """)[0].decode(Bool.self)
    }

    public func importRows(_ table: TransferTable, _ batch: [[TransferValue]]) async throws {
        guard !batch.isEmpty else { return }
        let columns = table.columns
        try await transaction { db in
            for row in batch {
                var bindings = PostgresBindings(capacity: columns.count)
                for value in row {
                    switch value {
                    case .null: bindings.appendNull()
                    case .text(let text): bindings.append(text)
                    case .integer(let number): bindings.append(number)
                    case .date(let date): bindings.append(date)
                    case .bool(let flag): bindings.append(flag)
                    }
                }
                let placeholders = (1...columns.count).map { "$\($0)" }.joined(separator: ", ")
                let sql = "INSERT INTO \(table.rawValue) (\(columns.map(\.name).joined(separator: ", "))) "
                    + (table.numbered ? "OVERRIDING SYSTEM VALUE " : "") + "VALUES (\(placeholders))"
                try await db.query(PostgresQuery(unsafeSQL: sql, binds: bindings), logger: logger)
            }
        }
    }

    public func finishTransfer() async throws {
        for table in TransferTable.allCases where table.numbered {
            try await rows(
                PostgresQuery(unsafeSQL: """
                    SELECT setval(pg_get_serial_sequence('\(table.rawValue)', 'id'), coalesce(max(id), 1), max(id) IS NOT NULL) FROM \(table.rawValue)
                    """))
        }
    }

    public func count(_ table: TransferTable) async throws -> Int {
        try await rows(PostgresQuery(unsafeSQL: "SELECT count(*) FROM \(table.rawValue)"))[0].decode(Int.self)
    }
}
