import Foundation
import ReconcilerStore

/// `store copy` reads the SQLite file table by table, in rowid order, through the read connection.
extension SQLiteStore: TransferSource {
    public func exportRows(_ table: TransferTable, offset: Int, limit: Int) async throws -> [[TransferValue]] {
        let columns = table.columns
        let sql = "SELECT \(columns.map(\.name).joined(separator: ", ")) FROM \(table.rawValue) ORDER BY rowid LIMIT ? OFFSET ?"
        return try await read { db in
            try db.query(sql, [SQLValue(limit), SQLValue(offset)]).map { row in
                columns.indices.map { index in
                    switch (columns[index].kind, row.values[index]) {
                    case (_, .null): .null
                    case (.text, .text(let text)): .text(text)
                    case (.integer, _): row.int64(index).map(TransferValue.integer) ?? .null
                    case (.date, _): row.date(index).map(TransferValue.date) ?? .null
                    case (.bool, _): .bool(row.int(index) != 0)
                    case (.text, let other): .text("\(other)")
                    }
                }
            }
        }
    }

    public func counters() async throws -> [TransferTable: Int64] {
        try await read { db in
            Dictionary(
                uniqueKeysWithValues: try db.query("SELECT name, seq FROM sqlite_sequence").compactMap { row in
                    row.string(0).flatMap(TransferTable.init(rawValue:)).map { ($0, row.int64(1) ?? 0) }
                })
        }
    }
}
