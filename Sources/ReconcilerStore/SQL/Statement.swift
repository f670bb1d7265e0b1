import Foundation

/// The SQL dialect a ``Statement`` is rendered in: where the two stores' drivers differ.
public enum SQLDialect: Sendable {
    /// SQLite's numbered placeholders (`?1`); a list parameter is bound as a JSON array.
    case sqlite
    /// postgres-nio's placeholders (`$1`); a list parameter is bound as an array.
    case postgres
}

/// One SQL statement written once for both stores. Its text is built by string interpolation, and every value
/// interpolated is a bound parameter, never text: `"SELECT data FROM disputes WHERE dispute_id = \(id)"`. What truly
/// differs between the dialects is a fragment (``StatementInterpolation/appendInterpolation(anyOf:)``), rendered by each
/// driver when it runs the statement.
public struct Statement: Sendable, Equatable, ExpressibleByStringInterpolation {
    /// A bound value, as both drivers take it.
    public enum Value: Sendable, Equatable {
        /// NULL, of the type the interpolated optional had: PostgreSQL must be told it where nothing else says
        /// (`$1::text IS NULL`).
        case null(Kind)
        case integer(Int64)
        /// A flag: SQLite's 0 or 1, PostgreSQL's boolean.
        case bool(Bool)
        case text(String)
        /// A point in time: seconds since 1970 in SQLite's columns, `timestamptz` in PostgreSQL's.
        case date(Date)
        /// A list, for ``StatementInterpolation/appendInterpolation(anyOf:)``.
        case texts([String])
        case integers([Int64])

        /// A value's SQL type, as far as a NULL needs one.
        public enum Kind: Sendable, Equatable {
            case text, integer, date

            var postgresType: String {
                switch self {
                case .text: "text"
                case .integer: "bigint"
                case .date: "timestamptz"
                }
            }
        }
    }

    enum Piece: Sendable, Equatable {
        case sql(String)
        /// The value at this index, bound.
        case parameter(Int)
        /// `column = any of the list at this index`, after its column.
        case anyOf(Int)
        /// The text at a declared path (``StoredJSON``) of a JSON column.
        case json(column: String, path: [String])
        /// The number at a declared path of a JSON column.
        case jsonNumber(column: String, path: [String])
        /// Text that differs between the dialects (`min` / `least`, `FOR UPDATE`, a flag's literal).
        case dialect(sqlite: String, postgres: String)
    }

    /// Locks the rows read until the commit, on PostgreSQL (a concurrent transaction waits for it); nothing on SQLite,
    /// whose writer is alone.
    public static let forUpdate = Statement(pieces: [.dialect(sqlite: "", postgres: " FOR UPDATE")], values: [])

    /// After a text column: compared and ordered byte by byte, as SQLite does; PostgreSQL's default collation may order
    /// by locale and ignore punctuation.
    public static let byteOrder = Statement(pieces: [.dialect(sqlite: "", postgres: " COLLATE \"C\"")], values: [])

    init(pieces: [Piece], values: [Value]) {
        self.pieces = pieces
        self.values = values
    }

    let pieces: [Piece]
    /// The values bound, in the order of their placeholders.
    public let values: [Value]

    public init(stringLiteral value: String) {
        pieces = [.sql(value)]
        values = []
    }

    public init(stringInterpolation: StatementInterpolation) {
        pieces = stringInterpolation.pieces
        values = stringInterpolation.values
    }

    /// The text in `dialect`, placeholders numbered from 1 in the order of ``values``. In one pass, appended to one
    /// string: a statement is rendered every time it runs, on the hot paths too.
    public func text(in dialect: SQLDialect) -> String {
        var text = ""
        text.reserveCapacity(pieces.count * 24)
        func placeholder(_ index: Int) {
            text += dialect == .sqlite ? "?" : "$"
            text += String(index + 1)
        }
        for piece in pieces {
            switch (piece, dialect) {
            case (.sql(let sql), _): text += sql
            case (.parameter(let index), .sqlite): placeholder(index)
            case (.parameter(let index), .postgres):
                placeholder(index)
                if case .null(let kind) = values[index] { text += "::" + kind.postgresType }
            // One parameter, looked up on the column's index whatever the list's length.
            case (.anyOf(let index), .sqlite):
                text += "IN (SELECT value FROM json_each("
                placeholder(index)
                text += "))"
            case (.anyOf(let index), .postgres):
                text += "= ANY("
                placeholder(index)
                text += ")"
            case (.json(let column, let path), .sqlite), (.jsonNumber(let column, let path), .sqlite):
                text += "json_extract(\(column), '$.\(path.joined(separator: "."))')"
            case (.json(let column, let path), .postgres): text += "(\(column)::jsonb #>> '{\(path.joined(separator: ","))}')"
            case (.jsonNumber(let column, let path), .postgres): text += "(\(column)::jsonb #>> '{\(path.joined(separator: ","))}')::float8"
            case (.dialect(let sql, _), .sqlite): text += sql
            case (.dialect(_, let sql), .postgres): text += sql
            }
        }
        return text
    }
}

/// How a ``Statement`` is written: SQL as it is, each interpolated value bound.
public struct StatementInterpolation: StringInterpolationProtocol, Sendable {
    var pieces: [Statement.Piece] = []
    var values: [Statement.Value] = []

    public init(literalCapacity: Int, interpolationCount: Int) {
        pieces.reserveCapacity(interpolationCount * 2 + 1)
    }

    public mutating func appendLiteral(_ literal: String) {
        if !literal.isEmpty { pieces.append(.sql(literal)) }
    }

    private mutating func bind(_ value: Statement.Value) {
        pieces.append(.parameter(values.count))
        values.append(value)
    }

    public mutating func appendInterpolation(_ value: String?) { bind(value.map(Statement.Value.text) ?? .null(.text)) }
    public mutating func appendInterpolation(_ value: Int?) { bind(value.map { .integer(Int64($0)) } ?? .null(.integer)) }
    public mutating func appendInterpolation(_ value: Int64?) { bind(value.map(Statement.Value.integer) ?? .null(.integer)) }
    public mutating func appendInterpolation(_ value: Date?) { bind(value.map(Statement.Value.date) ?? .null(.date)) }
    public mutating func appendInterpolation(_ value: Bool) { bind(.bool(value)) }

    /// Another statement spliced in (a shared condition, a column list): its SQL as it is, its values bound after
    /// those before it.
    public mutating func appendInterpolation(_ statement: Statement) {
        let offset = values.count
        for piece in statement.pieces {
            switch piece {
            case .sql(let text): pieces.append(.sql(text))
            case .parameter(let index): pieces.append(.parameter(index + offset))
            case .anyOf(let index): pieces.append(.anyOf(index + offset))
            case .json(let column, let path): pieces.append(.json(column: column, path: path))
            case .jsonNumber, .dialect: pieces.append(piece)
            }
        }
        values += statement.values
    }

    /// The text at `path` in the JSON of `column` (a column name, as SQL): `json_extract` on SQLite, `#>>` on
    /// PostgreSQL. The path is a declared one (``StoredJSON``), never a value.
    public mutating func appendInterpolation(json column: String, _ path: StoredJSON.Path) {
        pieces.append(.json(column: column, path: path.keys))
    }

    /// The number at `path` in the JSON of `column`, as ``appendInterpolation(json:_:)`` reads text.
    public mutating func appendInterpolation(jsonNumber column: String, _ path: StoredJSON.Path) {
        pieces.append(.jsonNumber(column: column, path: path.keys))
    }

    /// A flag as a literal, not bound (a partial index's condition must match it): `0`/`1` on SQLite, `false`/`true`
    /// on PostgreSQL.
    public mutating func appendInterpolation(literal flag: Bool) {
        pieces.append(.dialect(sqlite: flag ? "1" : "0", postgres: flag ? "true" : "false"))
    }

    /// A number as a literal, not bound: where PostgreSQL wants an `integer` and a bound value would be a `bigint`
    /// (`substr`'s positions).
    public mutating func appendInterpolation(literal number: Int) {
        pieces.append(.sql(String(number)))
    }

    /// Text that differs between the dialects, as SQL: a function's name (`min` / `least`), a collation.
    public mutating func appendInterpolation(sqlite: String, postgres: String) {
        pieces.append(.dialect(sqlite: sqlite, postgres: postgres))
    }

    /// After a column: whether it is one of `ids`, one parameter however long the list.
    public mutating func appendInterpolation(anyOf ids: [Int64]) {
        pieces.append(.anyOf(values.count))
        values.append(.integers(ids))
    }

    /// After a column: whether it is one of `list`, one parameter however long the list (`= ANY($1)` on PostgreSQL,
    /// `IN (SELECT value FROM json_each(?1))` on SQLite).
    public mutating func appendInterpolation(anyOf list: [String]) {
        pieces.append(.anyOf(values.count))
        values.append(.texts(list))
    }
}

extension StatementRow {
    public func int64(_ column: Int) -> Int64? { int(column).map(Int64.init) }

    /// The stored JSON of a `data` column (``StoredJSON/decode(_:_:)``).
    public func decoded<T: Decodable>(_ type: T.Type, _ column: Int = 0) throws -> T {
        try StoredJSON.decode(type, string(column))
    }
}

/// One result row of a ``Statement``, as each driver adapts its own: a column by position to a typed value, so that a
/// row is decoded once for both stores.
public protocol StatementRow: Sendable {
    func string(_ column: Int) -> String?
    func int(_ column: Int) -> Int?
    func date(_ column: Int) -> Date?
    func double(_ column: Int) -> Double?
    /// A flag: SQLite's 0 or 1, PostgreSQL's boolean.
    func bool(_ column: Int) -> Bool?
}

/// What runs a ``Statement``: each store's thin executor, of single statements and of transactions (``execute(_:)``).
public protocol StatementRunner: Sendable {
    /// A read, on the store's read path.
    func rows(of statement: Statement) async throws -> [any StatementRow]
    /// A write of one statement, durable when this returns; the rows it returns (`RETURNING`).
    func rows(writtenBy statement: Statement) async throws -> [any StatementRow]
    /// Runs `transaction` inside one transaction; durable when this returns. A roll-back throws
    /// ``Transaction/RolledBack`` once the transaction is undone (``transact(_:)`` answers with it).
    func execute<Answer: Sendable>(_ transaction: Transaction<Answer>) async throws -> Answer
    /// The daemon whose leases this store's writes may name (``WorkWrites/wakeup(_:delivered:holder:)``): a
    /// daemon sharing its store with others; nil for a store of one (SQLite) and for a command.
    var leaseHolder: String? { get }
    /// Tells the other daemons sharing the store that work arrived, after the commit that made it (nothing to tell
    /// for a store of one daemon).
    func announceWork() async
}

extension Statement {
    /// `parts` one after the other, `separator` between them, their values bound in order.
    public static func joined(_ parts: [Statement], separator: String = ", ") -> Statement {
        var joined = StatementInterpolation(literalCapacity: 0, interpolationCount: parts.count)
        for (index, part) in parts.enumerated() {
            if index > 0 { joined.appendLiteral(separator) }
            joined.appendInterpolation(part)
        }
        return Statement(stringInterpolation: joined)
    }
}
