import Foundation
import PostgresNIO
import ReconcilerStore

/// A PostgreSQL row as a shared statement's row (``StatementRow``): a column by position to a typed value.
struct PostgresStatementRow: StatementRow {
    let row: PostgresRow

    /// The column's value; `nil` for NULL (which does not decode as a value).
    private func cell<T: PostgresDecodable>(_ column: Int, as type: T.Type) -> T? {
        try? row.makeRandomAccess()[column].decode(T.self)
    }

    func string(_ column: Int) -> String? { cell(column, as: String.self) }
    func int(_ column: Int) -> Int? { cell(column, as: Int.self) }
    func date(_ column: Int) -> Date? { cell(column, as: Date.self) }
    func bool(_ column: Int) -> Bool? { cell(column, as: Bool.self) }
    func double(_ column: Int) -> Double? { cell(column, as: Double.self) }
}

/// The executor of the statements written once (``Statement``): postgres-nio's placeholders, on a pooled connection.
extension PostgresStore: StatementRunner {
    public func rows(of statement: Statement) async throws -> [any StatementRow] {
        try await rows(Self.query(statement)).map(PostgresStatementRow.init)
    }

    /// One statement is one transaction of its own (autocommit).
    public func rows(writtenBy statement: Statement) async throws -> [any StatementRow] {
        try await rows(of: statement)
    }

    public func execute<Answer: Sendable>(_ transaction: Transaction<Answer>) async throws -> Answer {
        try await self.transaction { [self] db in
            try await transaction.perform { try await rows(db, Self.query($0)).map(PostgresStatementRow.init) }
        }
    }

    public var leaseHolder: String? { owner?.id }

    static func query(_ statement: Statement) -> PostgresQuery {
        var bindings = PostgresBindings()
        for value in statement.values {
            switch value {
            case .null: bindings.appendNull()
            case .integer(let number): bindings.append(Int(number))
            case .bool(let flag): bindings.append(flag)
            case .text(let text): bindings.append(text)
            case .date(let date): bindings.append(date)
            case .texts(let list): bindings.append(list)
            case .integers(let list): bindings.append(list.map(Int.init))
            }
        }
        return PostgresQuery(unsafeSQL: statement.text(in: .postgres), binds: bindings)
    }
}
