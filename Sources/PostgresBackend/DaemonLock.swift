import Foundation
import Logging
import PostgresNIO
import Synchronization

/// One daemon per database, until work is shared by leases: a session-level advisory lock held on a connection of
/// its own for the daemon's lifetime, the PostgreSQL counterpart of the SQLite store's `flock`. PostgreSQL drops it
/// when that session ends (the daemon exits or is killed, the server restarts). Every write transaction checks, in
/// the transaction, that this session still holds it, so a daemon that lost it commits nothing, and a `sent` intent
/// (hence a Klarna call) cannot follow; and the daemon is told (`onLoss`) so that it stops.
final class DaemonLock: Sendable {
    /// `pg_try_advisory_lock` key: "klarna-d" in ASCII (migrations use another).
    static let key: Int64 = 0x6B6C_6172_6E61_2D64

    struct Lost: Error, CustomStringConvertible {
        var description: String { "this daemon no longer holds the store's daemon lock (its session ended): nothing is committed" }
    }

    let connection: PostgresConnection
    /// The lock session's server process, as `pg_locks.pid` shows it.
    let backendPID: Int32

    private init(connection: PostgresConnection, backendPID: Int32) {
        self.connection = connection
        self.backendPID = backendPID
    }

    private let released = Mutex(false)

    /// Ends the lock's session on purpose (the daemon stops): not a loss.
    func release() {
        released.withLock { $0 = true }
        connection.close().whenComplete { _ in }
    }

    /// Takes the lock or says who holds it. `holder` is shown to a daemon that finds it taken.
    static func take(
        _ location: PostgresLocation, password: String?, holder: String, logger: Logger, onLoss: @escaping @Sendable () -> Void
    ) async throws -> DaemonLock {
        let connection = try await PostgresStore.connect(location, password: password, logger: logger)
        do {
            try await connection.query("SELECT set_config('application_name', \(String(holder.prefix(60))), false)", logger: logger)
            let rows = try await connection.query("SELECT pg_try_advisory_lock(\(key)), pg_backend_pid()", logger: logger).collect()
            let (taken, pid) = try rows[0].decode((Bool, Int32).self)
            guard taken else {
                let other = try await connection.query(
                    """
                    SELECT a.application_name, coalesce(host(a.client_addr), 'local socket') FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                    WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid()
                      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                      AND ((l.classid::bigint << 32) | l.objid::bigint) = \(key)
                    """, logger: logger
                ).collect().first.map { try $0.decode((String, String).self) }
                throw PostgresProblem(
                    kind: .heldByAnotherDaemon,
                    description: "\(location): another klarna-reconciler daemon holds this store (\(other.map { "\($0.0) from \($0.1)" } ?? "unknown")); "
                        + "one daemon per database for now")
            }
            let lock = DaemonLock(connection: connection, backendPID: pid)
            connection.closeFuture.whenComplete { _ in if !lock.released.withLock({ $0 }) { onLoss() } }
            return lock
        } catch {
            try? await connection.close()
            throw error
        }
    }
}

extension PostgresStore {
    /// Makes this handle the daemon's: takes the database's daemon lock (or throws ``PostgresProblem`` naming who
    /// holds it) and fences every later write transaction on it. `onLoss` runs once if the lock's session ends
    /// while the daemon runs (the server restarted, the connection broke): the daemon should stop, and its
    /// restart takes the lock again.
    public func takeDaemonLock(password: String?, holder: String, onLoss: @escaping @Sendable () -> Void) async throws {
        let lock = try await DaemonLock.take(location, password: password, holder: holder, logger: logger, onLoss: onLoss)
        daemonLock.withLock { $0 = lock }
    }
}
