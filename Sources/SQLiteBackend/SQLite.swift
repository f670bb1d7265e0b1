import CSQLite
import Foundation
import ReconcilerStore

/// A value bound to or read from SQLite.
public enum SQLValue: Sendable, Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)

    public init(_ value: Int?) { self = value.map { .integer(Int64($0)) } ?? .null }
}

/// One result row; columns by position.
public struct SQLRow: Sendable {
    public let values: [SQLValue]

    public func string(_ index: Int) -> String? {
        if case .text(let value) = values[index] { return value }
        return nil
    }

    public func int(_ index: Int) -> Int? {
        switch values[index] {
        case .integer(let value): Int(value)
        case .real(let value): Int(value)
        default: nil
        }
    }

    public func int64(_ index: Int) -> Int64? {
        if case .integer(let value) = values[index] { return value }
        return nil
    }

    public func double(_ index: Int) -> Double? {
        switch values[index] {
        case .real(let value): value
        case .integer(let value): Double(value)
        default: nil
        }
    }

    public func date(_ index: Int) -> Date? {
        switch values[index] {
        case .real(let value): Date(timeIntervalSince1970: value)
        case .integer(let value): Date(timeIntervalSince1970: TimeInterval(value))
        default: nil
        }
    }
}

/// An SQLite failure with SQLite's own message, the statement it came from, the file, and, when the disk may be the
/// cause (full, or an I/O error), how much space its directory has left.
public struct SQLiteError: Error, CustomStringConvertible {
    public let code: Int32
    public let message: String
    public let sql: String?
    public var file: String? = nil
    public var space: String? = nil

    /// `SQLITE_FULL`: the disk (or quota) is full.
    public var isDiskFull: Bool { code & 0xFF == SQLITE_FULL }
    /// The disk is full or failing: what a start waits out rather than exits on.
    public var isStorageFault: Bool { isDiskFull || code & 0xFF == SQLITE_IOERR }
    public var isBusy: Bool { code & 0xFF == SQLITE_BUSY || code & 0xFF == SQLITE_LOCKED }

    public var description: String {
        "SQLite error \(code): \(message)" + (sql.map { " (in: \($0.prefix(80)))" } ?? "") + (file.map { " on \($0)" } ?? "")
            + (space.map { "; \($0)" } ?? "")
    }

    /// The error with the file it happened on, and the free space beside it when the disk may be the cause.
    func on(_ path: String) -> SQLiteError {
        var error = self
        error.file = path
        let primary = code & 0xFF
        if primary == SQLITE_FULL || primary == SQLITE_IOERR || primary == SQLITE_CANTOPEN { error.space = freeSpaceNote(at: path) }
        return error
    }
}

/// A savepoint's rollback failed: what the failed write did is still in the transaction, which must be abandoned.
struct SavepointUndoFailed: Error, CustomStringConvertible {
    let description: String
}

/// One SQLite connection. Not thread-safe by itself: ``SQLiteStore`` confines it to one serial queue.
final class SQLiteConnection: @unchecked Sendable {
    let path: String
    private var handle: OpaquePointer?
    private var statements: [String: OpaquePointer] = [:]

    /// Opens (creating if asked) the database at `path` in WAL mode with full-sync commits.
    init(path: String, readOnly: Bool, busyTimeout: Duration) throws {
        self.path = path
        let flags = (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_NOMUTEX
        var db: OpaquePointer?
        let code = sqlite3_open_v2(path, &db, flags, nil)
        guard code == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close_v2(db)
            throw SQLiteError(code: code, message: message, sql: nil).on(path)
        }
        handle = db
        sqlite3_busy_timeout(db, Int32(busyTimeout.timeInterval * 1_000))
        sqlite3_extended_result_codes(db, 1)
        if !readOnly {
            // WAL lets `status`/`list`/`show` read while the daemon writes; FULL makes each commit durable (fsync
            // of the WAL), which is what "ack after durable commit" needs.
            try execute("PRAGMA journal_mode = WAL")
            try execute("PRAGMA synchronous = FULL")
        }
        try execute("PRAGMA foreign_keys = ON")
    }

    deinit {
        for statement in statements.values { sqlite3_finalize(statement) }
        sqlite3_close_v2(handle)
    }

    func execute(_ sql: String) throws {
        var error: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(handle, sql, nil, nil, &error)
        if code != SQLITE_OK {
            let message = error.map { String(cString: $0) } ?? "error"
            sqlite3_free(error)
            throw SQLiteError(code: code, message: message, sql: sql).on(path)
        }
    }

    /// Runs `sql` with `arguments` and returns every row.
    @discardableResult
    func query(_ sql: String, _ arguments: [SQLValue] = []) throws -> [SQLRow] {
        let statement = try prepared(sql)
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        for (index, value) in arguments.enumerated() {
            let position = Int32(index + 1)
            let code: Int32 =
                switch value {
                case .null: sqlite3_bind_null(statement, position)
                case .integer(let v): sqlite3_bind_int64(statement, position, v)
                case .real(let v): sqlite3_bind_double(statement, position, v)
                case .text(let v): sqlite3_bind_text(statement, position, v, -1, csqlite_transient())
                }
            guard code == SQLITE_OK else { throw error(code, sql) }
        }
        var rows: [SQLRow] = []
        while true {
            let code = sqlite3_step(statement)
            if code == SQLITE_DONE { break }
            guard code == SQLITE_ROW else { throw error(code, sql) }
            let count = sqlite3_column_count(statement)
            var values: [SQLValue] = []
            values.reserveCapacity(Int(count))
            for column in 0..<count {
                switch sqlite3_column_type(statement, column) {
                case SQLITE_INTEGER: values.append(.integer(sqlite3_column_int64(statement, column)))
                case SQLITE_FLOAT: values.append(.real(sqlite3_column_double(statement, column)))
                case SQLITE_TEXT: values.append(.text(String(cString: sqlite3_column_text(statement, column))))
                default: values.append(.null)
                }
            }
            rows.append(SQLRow(values: values))
        }
        return rows
    }

    /// Inside a transaction (SQLite leaves one on its own after some errors: a full disk, an I/O error).
    var inTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    /// Runs `body` inside the current transaction so that, when it throws, only its own writes are undone.
    func savepoint<T>(_ body: () throws -> T) throws -> T {
        try execute("SAVEPOINT write")
        do {
            let value = try body()
            try execute("RELEASE write")
            return value
        } catch {
            guard inTransaction else { throw error }
            do {
                try execute("ROLLBACK TO write; RELEASE write")
            } catch {
                // The write's own rows could not be undone: the transaction must not commit at all.
                throw SavepointUndoFailed(description: "a write failed and could not be undone (\(error)); the whole transaction is rolled back")
            }
            throw error
        }
    }

    /// Runs `body` in one write transaction (taken at once, so a busy database is waited for up front).
    func transaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let value = try body()
            try execute("COMMIT")
            return value
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    private func prepared(_ sql: String) throws -> OpaquePointer {
        if let statement = statements[sql] { return statement }
        var statement: OpaquePointer?
        let code = sqlite3_prepare_v2(handle, sql, -1, &statement, nil)
        guard code == SQLITE_OK, let statement else { throw error(code, sql) }
        statements[sql] = statement
        return statement
    }

    private func error(_ code: Int32, _ sql: String) -> SQLiteError {
        SQLiteError(code: sqlite3_extended_errcode(handle), message: String(cString: sqlite3_errmsg(handle)), sql: sql).on(path)
    }
}
