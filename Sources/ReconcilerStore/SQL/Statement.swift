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

    /// The text in `dialect`, placeholders numbered from 1 in the order of ``values``.
    public func text(in dialect: SQLDialect) -> String {
        pieces.map { piece in
            switch (piece, dialect) {
            case (.sql(let text), _): text
            case (.parameter(let index), .sqlite): "?\(index + 1)"
            case (.parameter(let index), .postgres):
                if case .null(let kind) = values[index] { "$\(index + 1)::\(kind.postgresType)" } else { "$\(index + 1)" }
            // One parameter, looked up on the column's index whatever the list's length.
            case (.anyOf(let index), .sqlite): "IN (SELECT value FROM json_each(?\(index + 1)))"
            case (.anyOf(let index), .postgres): "= ANY($\(index + 1))"
            case (.json(let column, let path), .sqlite): "json_extract(\(column), '$.\(path.joined(separator: "."))')"
            case (.json(let column, let path), .postgres): "(\(column)::jsonb #>> '{\(path.joined(separator: ","))}')"
            }
        }.joined()
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
            }
        }
        values += statement.values
    }

    /// The text at `path` in the JSON of `column` (a column name, as SQL): `json_extract` on SQLite, `#>>` on
    /// PostgreSQL. The path is a declared one (``StoredJSON``), never a value.
    public mutating func appendInterpolation(json column: String, _ path: StoredJSON.Path) {
        pieces.append(.json(column: column, path: path.keys))
    }

    /// After a column: whether it is one of `list`, one parameter however long the list (`= ANY($1)` on PostgreSQL,
    /// `IN (SELECT value FROM json_each(?1))` on SQLite).
    public mutating func appendInterpolation(anyOf list: [String]) {
        pieces.append(.anyOf(values.count))
        values.append(.texts(list))
    }
}

/// One result row of a ``Statement``, as each driver adapts its own: a column by position to a typed value, so that a
/// row is decoded once for both stores.
public protocol StatementRow: Sendable {
    func string(_ column: Int) -> String?
    func int(_ column: Int) -> Int?
    func date(_ column: Int) -> Date?
    /// A flag: SQLite's 0 or 1, PostgreSQL's boolean.
    func bool(_ column: Int) -> Bool?
}

/// What runs a ``Statement``: each store's thin executor, outside any transaction.
public protocol StatementRunner: Sendable {
    /// A read, on the store's read path.
    func rows(of statement: Statement) async throws -> [any StatementRow]
    /// A write of one statement, durable when this returns; the rows it returns (`RETURNING`).
    func rows(writtenBy statement: Statement) async throws -> [any StatementRow]
}
