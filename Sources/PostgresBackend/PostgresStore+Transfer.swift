import Foundation
import PostgresNIO
import ReconcilerStore

/// `store copy` writes into an empty PostgreSQL store: rows keep their ids (`OVERRIDING SYSTEM VALUE`), and each
/// numbered table's counter is moved past the highest copied id at the end.
extension PostgresStore: TransferTarget {
    public func isEmptyForTransfer() async throws -> Bool {
        let checks = TransferTable.allCases.map { "NOT EXISTS (SELECT 1 FROM \($0.rawValue))" }.joined(separator: " AND ")
        return try await rows(PostgresQuery(unsafeSQL: "SELECT \(checks)"))[0].decode(Bool.self)
    }

    public func importRows(_ table: TransferTable, _ batch: [[TransferValue]]) async throws {
        guard !batch.isEmpty else { return }
        let columns = table.columns
        try await transaction { [self] db in
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
                let sql =
                    "INSERT INTO \(table.rawValue) (\(columns.map(\.name).joined(separator: ", "))) "
                    + (table.numbered ? "OVERRIDING SYSTEM VALUE " : "") + "VALUES (\(placeholders))"
                try await db.rows(PostgresQuery(unsafeSQL: sql, binds: bindings), logger: logger)
            }
        }
    }

    public func finishTransfer(counters: [TransferTable: Int64]) async throws {
        for table in TransferTable.allCases where table.numbered {
            let counter = counters[table] ?? 0
            try await rows(
                PostgresQuery(
                    unsafeSQL: """
                        SELECT setval(pg_get_serial_sequence('\(table.rawValue)', 'id'), greatest(coalesce(max(id), 0), \(counter), 1),
                          greatest(coalesce(max(id), 0), \(counter)) > 0) FROM \(table.rawValue)
                        """))
        }
    }
}
