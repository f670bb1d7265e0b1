import Foundation
import ReconcilerCore
import ReconcilerStore

/// The embedded store: one SQLite file in WAL mode, every commit fsynced. Two connections, each on its own serial
/// queue so that blocking SQLite calls (and their fsyncs) never run on Swift's cooperative pool: writes go through
/// ``GroupCommit`` on the writer, which commits the writes that queued up meanwhile in one fsync; reads go to a
/// read-only connection, so a read never waits behind a commit's fsync (WAL lets it see the last commit meanwhile).
public final class SQLiteStore: ReconcilerStore, @unchecked Sendable {
    public let path: String
    private let reader: SQLiteConnection
    private let readQueue: DispatchQueue
    private let writes: GroupCommit

    /// Opens the store at `path`, creating it and applying migrations unless `readOnly`.
    /// - Parameter busyTimeout: how long to wait for another process's write before failing (CLI vs daemon).
    /// - Parameter reserve: space on the store's filesystem given back when a write finds the disk full.
    public init(path: String, readOnly: Bool = false, busyTimeout: Duration = .seconds(5), reserve: ReserveFile? = nil) throws {
        self.path = path
        let writer = try Self.relieved(by: reserve) { try SQLiteConnection(path: path, readOnly: readOnly, busyTimeout: busyTimeout) }
        let writeQueue = DispatchQueue(label: "klarna-reconciler.store.write")
        self.writes = GroupCommit(connection: writer, queue: writeQueue, reserve: reserve)
        if !readOnly {
            // The store holds authorization tokens: not for every local user (SQLite gives -wal and -shm the same mode).
            chmod(path, 0o640)
            try Self.relieved(by: reserve) { try Migrations.apply(to: writer) }
            reader = try SQLiteConnection(path: path, readOnly: true, busyTimeout: busyTimeout)
            readQueue = DispatchQueue(label: "klarna-reconciler.store.read")
        } else {
            // Read-only (the CLI): one connection, one queue.
            reader = writer
            readQueue = writeQueue
        }
        guard try Migrations.version(of: reader) == Migrations.latest else {
            throw SQLiteError(
                code: 1,
                message:
                    "store schema is version \(try Migrations.version(of: reader)), this binary expects \(Migrations.latest); run the daemon once to migrate",
                sql: nil)
        }
    }

    /// The schema version this binary writes: a store at a lower one is migrated when the daemon opens it.
    public static var latestSchemaVersion: Int { Migrations.latest }

    /// The schema version of the store file at `path`, read without migrating it; `nil` when there is no file yet.
    public static func schemaVersion(at path: String) throws -> Int? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        return try Migrations.version(of: SQLiteConnection(path: path, readOnly: true, busyTimeout: .seconds(5)))
    }

    /// Runs `body`, and once more after `reserve` gave its space back if it found the disk full.
    private static func relieved<T>(by reserve: ReserveFile?, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as SQLiteError where error.isDiskFull && reserve?.release() == true {
            return try body()
        }
    }

    /// Passes through the writer: an empty transaction, queued behind every write before it.
    public func probeWrites() async throws {
        try await write { _ in }
    }

    /// Writes and the transactions that committed them (fewer than the writes when they were grouped).
    var writeStatistics: GroupCommit.Statistics { writes.statistics }

    /// The schema version in the file.
    public func schemaVersion() async throws -> Int { try await read { try Migrations.version(of: $0) } }

    func write<T: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws -> T) async throws -> T {
        try await writes.write(body)
    }

    func read<T: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            readQueue.async { [reader] in
                continuation.resume(with: Result { try body(reader) })
            }
        }
    }

    /// One daemon per file (its lock): there is no lease to check. Through the group commit: the writes of the steps
    /// that finish meanwhile share one fsync (SQLite-specific for that).
    public func commit(_ change: Change, at: Date, fencedBy key: WorkKey?) async throws {
        guard !change.isEmpty else { return }
        var statements = try change.sessions.map { try WorkWrites.session($0, at: at, .update) }
        statements += try change.newOrders.map { try WorkWrites.order($0, at: at, .keep) }
        statements += try change.orders.map { try WorkWrites.order($0, at: at, .update) }
        statements += try change.paymentRequests.map { try WorkWrites.paymentRequest($0, at: at) }
        statements += try change.intents.map { try WorkWrites.intent($0, at: at, .update) }
        statements += try change.events.map { try WorkWrites.event($0, at: at) }
        statements += try change.outcomes.map { try WorkWrites.outcome($0, at: at) }
        statements += change.ledgerCaptures.map { LedgerRow($0).insert } + change.ledgerRefunds.map { LedgerRow($0).insert }
        statements += change.finishedCaptureRequests.map {
            "UPDATE capture_requests SET state = \($0.state.rawValue), note = \($0.note) WHERE id = \($0.id)"
        }
        statements += change.holds.map {
            "INSERT INTO holds (work_key, held_at, held_by) VALUES (\($0.key.description), \(at), \($0.by)) ON CONFLICT(work_key) DO NOTHING"
        }
        statements += change.releases.map { "DELETE FROM holds WHERE work_key = \($0.description)" }
        statements += change.answeredRequests.map {
            "UPDATE operator_requests SET state = \($0.state.rawValue), note = \($0.note), answered_at = \(at) WHERE id = \($0.id)"
        }
        statements += change.health.map {
            """
            INSERT INTO health (name, at, detail) VALUES (\($0.key.rawValue), \(at), \($0.detail))
            ON CONFLICT(name) DO UPDATE SET at = excluded.at, detail = excluded.detail
            """
        }
        let read = change.intentRead.flatMap { $0.isWritten(by: change) ? $0 : nil }
        try await write { [statements] db in
            if let read {
                let stored = try db.query("SELECT state, attempts FROM intents WHERE key = ?", [.text(read.key)]).first
                guard read.isStored(state: stored?.string(0), attempts: stored?.int(1)) else { throw IntentMoved(key: read.key) }
            }
            for statement in statements { try db.run(statement) }
        }
    }

    /// One write for all of them, each in a savepoint of its own: a refused one is undone alone, and the batch costs
    /// one commit (and shares it with whatever else the group commit holds). SQLite-specific: a spool scan's files in
    /// one fsync.
    public func ingest(_ records: [IngestRecord], at: Date) async throws -> [IngestResult] {
        let transactions = try records.map { try IngestTransactions.ingest($0, at: at, holder: nil) }
        return try await write { db in
            try transactions.map { transaction in
                do {
                    return try db.savepoint { try transaction.perform { try db.run($0) } }
                } catch let refusal as Transaction<IngestResult>.RolledBack {
                    return refusal.answer
                }
            }
        }
    }

    // MARK: Backup

    /// Writes a consistent copy of the store to `path` (which must not exist) while the daemon goes on writing:
    /// `VACUUM INTO` reads one snapshot through the read connection, so no commit waits for it. The copy is a
    /// plain SQLite file (no WAL to carry along), mode 0640 like the store: it holds authorization tokens.
    public func backup(to path: String) async throws {
        _ = try await read { db in try db.query("VACUUM INTO ?", [.text(path)]) }
        chmod(path, 0o640)
    }

    /// SQLite's `PRAGMA integrity_check`: `["ok"]` for a sound file, else the problems it found.
    public func integrityCheck() async throws -> [String] {
        try await read { db in try db.query("PRAGMA integrity_check").compactMap { $0.string(0) } }
    }
}
