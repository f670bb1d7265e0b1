import Foundation
import ReconcilerStore

extension SQLRow: StatementRow {
    public func bool(_ column: Int) -> Bool? { int(column).map { $0 != 0 } }
}

extension SQLValue {
    /// A shared statement's value as SQLite binds it: dates in seconds since 1970, a list as a JSON array
    /// (`json_each`).
    init(_ value: Statement.Value) {
        switch value {
        case .null: self = .null
        case .integer(let number): self = .integer(number)
        case .bool(let flag): self = .integer(flag ? 1 : 0)
        case .text(let text): self = .text(text)
        case .date(let date): self = .real(date.timeIntervalSince1970)
        case .texts(let list):
            let json = (try? JSONEncoder().encode(list)).map { String(decoding: $0, as: UTF8.self) } ?? "[]"
            self = .text(json)
        }
    }
}

/// The executor of the statements written once (``Statement``): SQLite's placeholders, on the read connection.
extension SQLiteStore: StatementRunner {
    public func rows(of statement: Statement) async throws -> [any StatementRow] {
        let text = statement.text(in: .sqlite)
        let arguments = statement.values.map(SQLValue.init)
        return try await read { db in try db.query(text, arguments) }
    }

    /// Through the writer's group commit, like every write.
    public func rows(writtenBy statement: Statement) async throws -> [any StatementRow] {
        let text = statement.text(in: .sqlite)
        let arguments = statement.values.map(SQLValue.init)
        return try await write { db in try db.query(text, arguments) }
    }
}
