import Foundation
import Logging
import PostgresNIO
import ReconcilerCore
import ReconcilerStore

/// Work shared by the daemons on one database: a lease row per unit of work that has something to do (made by the
/// triggers of schema step 3 when a unit or a wakeup is inserted), claimed with `FOR UPDATE SKIP LOCKED`, renewed
/// in one statement per daemon, and checked (share-locked) by every fenced commit.
extension PostgresStore: LeaseStore, ClusterView {
    public var daemon: DaemonIdentity {
        guard let owner else { preconditionFailure("a store opened without a daemon has no leases") }
        return owner
    }

    /// `pg_advisory_lock` key that keeps daemons and `store copy` apart: daemons take it shared for the instant
    /// they register, `store copy` exclusively for the whole copy. "klarna-d" in ASCII.
    static let occupancyLock: Int64 = 0x6B6C_6172_6E61_2D64

    public func register(at: Date) async throws {
        let daemon = daemon
        try await transaction { [self] db in
            guard try await rows(db, "SELECT pg_try_advisory_xact_lock_shared(\(Self.occupancyLock))")[0].decode(Bool.self) else {
                throw PostgresProblem(kind: .inUse, description: "\(location): `klarna-reconciler store copy` is filling this database; start the daemon once it is done")
            }
            try await db.rows(
                """
                INSERT INTO daemons (id, host, pid, started_at, heartbeat_at) VALUES (\(daemon.id), \(daemon.host), \(daemon.pid), \(at), clock_timestamp())
                ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, stopped_at = NULL
                """, logger: logger)
            // Rows of daemons long gone only clutter `cluster`.
            try await db.rows("DELETE FROM daemons WHERE heartbeat_at < clock_timestamp() - interval '7 days'", logger: logger)
        }
    }

    /// One statement: the heartbeat, the renewal, and the count of live daemons (this one counted by its new
    /// heartbeat, which the statement's own snapshot does not show).
    public func renewLeases(ttl: Duration) async throws -> LeaseRenewal {
        let id = daemon.id
        let seconds = ttl.timeInterval
        // A lapsed lease nobody claimed yet is still this daemon's: nobody else can have acted on it.
        let row = try await rows(
            """
            WITH beat AS (UPDATE daemons SET heartbeat_at = clock_timestamp() WHERE id = \(id) RETURNING 1),
            held AS (
              UPDATE work_leases SET locked_until = clock_timestamp() + make_interval(secs => \(seconds)) WHERE holder = \(id) RETURNING work_key)
            SELECT coalesce((SELECT array_agg(work_key) FROM held), '{}'),
              (SELECT count(*) FROM daemons
               WHERE stopped_at IS NULL AND (id = \(id) OR heartbeat_at > clock_timestamp() - make_interval(secs => \(seconds))))
            """)[0]
        let (held, live) = try row.decode(([String], Int).self)
        return LeaseRenewal(held: Set(held.compactMap(WorkKey.init)), liveDaemons: max(1, live))
    }

    public func claimWork(ttl: Duration, limit: Int, liveDaemons: Int, patience: Duration) async throws -> [Claim] {
        let id = daemon.id
        // A lapsed lease is taken over when it ran out while the server was up (its holder could have renewed it and
        // did not). One that ran out while the server was down waits until the server has been up a lease time:
        // after a restart every daemon's leases have run out at once, and each renews its own first instead of the
        // daemons taking each other's work (and leaving the Klarna answers they hold unrecorded).
        // `room`: how far this daemon is below its share of all leased work; with none, only keys no daemon with
        // room took within `patience`. Every row nobody holds ends at -infinity, so the claimable rows are those that
        // end before the statement began (`now()`, stable where `clock_timestamp()` is volatile): a range of
        // `work_leases_until`, read in the order taken and only as far as the limit, whatever the number of leases
        // held. The old holder's lease end comes back relative to the server's clock at the
        // query, so that this host's clock (which may differ from the server's, and jump) never shortens the wait
        // for its calls; the caller counts it from when the answer arrived, after the query ran.
        let claimed = try await rows(
            """
            WITH counts AS (
              SELECT count(*) AS total, count(*) FILTER (WHERE holder = \(id) AND locked_until > clock_timestamp()) AS mine FROM work_leases),
            room AS (SELECT greatest(0, least(\(limit), ceil(total::numeric / \(max(1, liveDaemons)))::bigint - mine)) AS eager FROM counts),
            picked AS (
              SELECT work_key, holder, locked_until FROM work_leases
              WHERE locked_until < now() AND (
                  holder IS NULL OR locked_until > pg_postmaster_start_time() OR pg_postmaster_start_time() < now() - make_interval(secs => \(ttl.timeInterval)))
                AND ((SELECT eager FROM room) > 0 OR since < now() - make_interval(secs => \(patience.timeInterval)))
              ORDER BY locked_until, since
              LIMIT (SELECT CASE WHEN eager > 0 THEN eager ELSE \(limit) END FROM room)
              FOR UPDATE SKIP LOCKED)
            UPDATE work_leases l SET holder = \(id), locked_until = clock_timestamp() + make_interval(secs => \(ttl.timeInterval)),
              since = clock_timestamp()
            FROM picked WHERE l.work_key = picked.work_key
            RETURNING l.work_key, picked.holder,
              CASE WHEN picked.locked_until = '-infinity' THEN NULL ELSE extract(epoch FROM picked.locked_until - clock_timestamp())::float8 END
            """
        ).map { try $0.decode((String, String?, Double?).self) }
        guard !claimed.isEmpty else { return [] }
        let keys = claimed.compactMap { WorkKey($0.0) }
        var open: [WorkKey: OpenWork] = [:]
        for work in try await openWork(of: keys) { open[work.key] = work }
        return claimed.compactMap { key, holder, endedAgo in
            guard let key = WorkKey(key) else { return nil }
            var lapsed: LapsedLease?
            if let holder, holder != id, let endedAgo {
                // Relative to the query; the caller counts it from when the answer arrived (``Takeover``).
                lapsed = LapsedLease(holder: holder, endedAgo: Duration(timeInterval: -endedAgo))
            }
            return Claim(key: key, work: open[key], lapsed: lapsed)
        }
    }

    public func takeWakeups() async throws -> [WorkKey] {
        let id = daemon.id
        let taken = try await rows(
            """
            DELETE FROM wakeups w USING work_leases l WHERE l.work_key = w.work_key AND l.holder = \(id)
            RETURNING w.id, w.work_key, w.woken_by IS NOT DISTINCT FROM \(id)
            """
        ).map { try $0.decode((Int64, String, Bool).self) }
        var seen = Set<WorkKey>()
        return taken.sorted { $0.0 < $1.0 }.compactMap { _, key, wokenHere in
            guard !wokenHere, let key = WorkKey(key), seen.insert(key).inserted else { return nil }
            return key
        }
    }

    public func releaseLease(_ key: WorkKey) async throws -> Bool {
        // Kept while the unit is open (a held payment: its holder keeps it, idle) or a wakeup waits for it: a
        // released open unit would have no row to be claimed by.
        let (table, column, id) = switch key {
        case .session(let id): ("sessions", "hpp_session_id", id)
        case .order(let id): ("orders", "order_id", id)
        case .paymentRequest(let id): ("payment_requests", "payment_request_id", id)
        }
        var binds = PostgresBindings(capacity: 3)
        binds.append(key.description)
        binds.append(daemon.id)
        binds.append(id)
        let release = PostgresQuery(
            unsafeSQL: """
                DELETE FROM work_leases WHERE work_key = $1 AND holder = $2
                  AND NOT EXISTS (SELECT 1 FROM wakeups WHERE work_key = $1)
                  AND NOT EXISTS (SELECT 1 FROM \(table) WHERE \(column) = $3 AND next_due IS NOT NULL)
                RETURNING 1
                """, binds: binds)
        return try await !rows(release).isEmpty
    }

    public func deregister(at: Date) async throws {
        let id = daemon.id
        try await transaction { [self] db in
            try await db.rows("UPDATE work_leases SET holder = NULL, locked_until = '-infinity' WHERE holder = \(id)", logger: logger)
            try await db.rows("UPDATE daemons SET stopped_at = \(at) WHERE id = \(id)", logger: logger)
            try await db.rows("SELECT pg_notify(\(PostgresSchema.workChannel), 'released')", logger: logger)
        }
    }

    public func listenForWork(_ heard: @escaping @Sendable () -> Void) async {
        while !Task.isCancelled {
            do {
                let connection = try await Self.connect(location, password: password, logger: logger)
                // Whatever arrived while no connection listened.
                heard()
                do {
                    try await connection.listen(on: PostgresSchema.workChannel) { notifications in
                        for try await _ in notifications { heard() }
                    }
                } catch {
                    try? await connection.close()
                    throw error
                }
                try? await connection.close()
            } catch is CancellationError {
                return
            } catch {
                logger.debug("the work listener lost its connection: \(error); listening again shortly")
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    // MARK: Cluster

    public func daemons() async throws -> [DaemonRecord] {
        try await rows(
            """
            SELECT d.id, d.host, d.pid, d.started_at, d.heartbeat_at, d.stopped_at, count(l.work_key)::bigint,
              coalesce((array_agg(l.work_key ORDER BY l.work_key) FILTER (WHERE l.work_key IS NOT NULL))[1:5], '{}')
            FROM daemons d LEFT JOIN work_leases l ON l.holder = d.id AND l.locked_until > clock_timestamp()
            WHERE d.stopped_at IS NULL OR d.stopped_at > clock_timestamp() - interval '1 day'
            GROUP BY d.id ORDER BY d.started_at
            """
        ).map { row in
            let (id, host, pid, started, heartbeat, stopped, leases, sample) = try row.decode((String, String, Int, Date, Date, Date?, Int, [String]).self)
            return DaemonRecord(id: id, host: host, pid: pid, startedAt: started, heartbeatAt: heartbeat, stoppedAt: stopped, leases: leases, sample: sample)
        }
    }

    public func unclaimedWork() async throws -> Int {
        try await rows("SELECT count(*) FROM work_leases WHERE holder IS NULL OR locked_until < clock_timestamp()")[0].decode(Int.self)
    }
}

/// `store copy`'s exclusive hold on a database: a session-level advisory lock on a connection of its own for the
/// whole copy. Daemons take the same lock shared to register, so none starts while a copy fills the database, and
/// the copy refuses to start while a daemon's heartbeat is fresh.
final class CopyLock: Sendable {
    let connection: PostgresConnection

    init(connection: PostgresConnection) { self.connection = connection }

    /// The connection stays referenced until it is closed (postgres-nio asserts it is never dropped open).
    func release() {
        let connection = connection
        connection.close().whenComplete { _ in withExtendedLifetime(connection) {} }
    }
}

extension PostgresStore {
    /// Takes the database for `store copy`, or throws ``PostgresProblem`` (`inUse`) naming the daemon that runs on it.
    public func takeCopyLock() async throws {
        let connection = try await Self.connect(location, password: password, logger: logger)
        do {
            let taken = try await connection.rows("SELECT pg_try_advisory_lock(\(Self.occupancyLock))", logger: logger)[0].decode(Bool.self)
            guard taken else { throw PostgresProblem(kind: .inUse, description: "\(location): another `store copy` or a starting daemon holds this database") }
            let running = try await connection.rows(
                """
                SELECT id, extract(epoch FROM clock_timestamp() - heartbeat_at)::float8 FROM daemons
                WHERE stopped_at IS NULL AND heartbeat_at > clock_timestamp() - interval '2 minutes' ORDER BY heartbeat_at DESC LIMIT 1
                """, logger: logger
            ).first.map { try $0.decode((String, Double).self) }
            if let (id, ago) = running {
                throw PostgresProblem(
                    kind: .inUse, description: "\(location): daemon \(id) runs on this database (heartbeat \(Int(ago)) s ago); stop every daemon first")
            }
            copyLock.withLock { $0 = CopyLock(connection: connection) }
        } catch {
            try? await connection.close()
            throw error
        }
    }
}
