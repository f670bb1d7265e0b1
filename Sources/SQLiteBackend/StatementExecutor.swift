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
        case .texts(let list): self = .text((try? StoredJSON.encode(list)) ?? "[]")
        case .integers(let list): self = .text((try? StoredJSON.encode(list)) ?? "[]")
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

    /// In one savepoint of the writer's group commit, like every write.
    public func execute<Answer: Sendable>(_ transaction: Transaction<Answer>) async throws -> Answer {
        try await write { db in try transaction.perform { try db.run($0) } }
    }

    /// One daemon per file: no leases, and nobody else to tell of new work (its engine hears of it from the ingest).
    public var leaseHolder: String? { nil }
    public func announceWork() async {}
}

extension SQLiteConnection {
    /// A shared statement, in SQLite's placeholders.
    @discardableResult
    func run(_ statement: Statement) throws -> [any StatementRow] {
        try query(statement.text(in: .sqlite), statement.values.map(SQLValue.init))
    }
}
