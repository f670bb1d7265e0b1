import Foundation
import Logging
import PostgresNIO
import Synchronization

/// One daemon per database, until work is shared by leases: a session-level advisory lock held on a connection of
/// its own for the daemon's lifetime, the PostgreSQL counterpart of the SQLite store's `flock`. PostgreSQL drops it
/// when that session ends (the daemon exits or is killed, the server restarts), and the daemon is told (`onLoss`)
/// so that it stops.
///
/// Fencing: whoever takes the lock moves `daemon_epoch` on before it reads anything, and every write transaction
/// of a daemon reads the epoch with a share lock and refuses to commit unless it is still its own. A daemon that
/// lost the lock therefore commits nothing, so no intent of it becomes `sent` and no Klarna call follows; and the
/// share lock makes the next daemon's epoch move wait for a commit already under way, so it never reads state an
/// older daemon is still changing.
final class DaemonLock: Sendable {
    /// `pg_try_advisory_lock` key: "klarna-d" in ASCII (migrations use another).
    static let key: Int64 = 0x6B6C_6172_6E61_2D64

    struct Lost: Error, CustomStringConvertible {
        var description: String { "this daemon no longer holds the store's daemon lock (another took it): nothing is committed" }
    }

    let connection: PostgresConnection
    /// This daemon's fencing token.
    let epoch: Int64

    private init(connection: PostgresConnection, epoch: Int64) {
        self.connection = connection
        self.epoch = epoch
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
            let rows = try await connection.query("SELECT pg_try_advisory_lock(\(key))", logger: logger).collect()
            let taken = try rows[0].decode(Bool.self)
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
            let epoch = try await connection.query(
                "UPDATE daemon_epoch SET epoch = epoch + 1, holder = \(holder) RETURNING epoch", logger: logger
            ).collect()[0].decode(Int64.self)
            let lock = DaemonLock(connection: connection, epoch: epoch)
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
