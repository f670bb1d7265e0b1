import Foundation
import Logging
import PostgresNIO
import ReconcilerCore
import ReconcilerStore

/// Work shared by the daemons on one database: a lease row per unit of work that has something to do (made by the
/// triggers of schema step 3 when a unit or a wakeup is inserted), claimed with `FOR UPDATE SKIP LOCKED`, and
/// checked (share-locked) by every fenced commit. A lease lasts as long as its holder's heartbeat
/// (`daemons.leased_until`, schema step 6): a renewal extends every lease the daemon holds by writing its one row.
///
/// Takeover and renewal exclude each other by the lapsed daemon's row: a claim taking a lapsed daemon's leases
/// locks that row (skipping it when its renewal holds it), and a renewal locks it first, then reads the leases
/// still its own in a second statement, whose snapshot shows every takeover committed before.
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
                throw PostgresProblem(
                    kind: .inUse,
                    description: "\(location): `klarna-reconciler store copy` is filling this database; start the daemon once it is done")
            }
            try await db.rows(
                """
                INSERT INTO daemons (id, host, pid, started_at, heartbeat_at) VALUES (\(daemon.id), \(daemon.host), \(daemon.pid), \(at), clock_timestamp())
                ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, stopped_at = NULL
                """, logger: logger)
            // Rows of daemons long gone only clutter `cluster`; what they still held is free (a lease without its
            // holder's row could never lapse).
            try await db.rows(
                """
                WITH gone AS (DELETE FROM daemons WHERE heartbeat_at < clock_timestamp() - interval '7 days' RETURNING id)
                UPDATE work_leases SET holder = NULL FROM gone WHERE holder = gone.id
                """, logger: logger)
        }
    }

    /// The heartbeat and the renewal of every lease held, then what is held: two statements in one transaction, so
    /// that the second reads after any takeover the first waited for (see the type's comment). The live daemons are
    /// counted with this one's new heartbeat.
    public func renewLeases(ttl: Duration) async throws -> LeaseRenewal {
        let id = daemon.id
        let seconds = ttl.timeInterval
        // A lapsed lease nobody claimed yet is still this daemon's: nobody else can have acted on it.
        let row = try await transaction { [self] db in
            _ = try await rows(
                db,
                """
                UPDATE daemons SET heartbeat_at = clock_timestamp(), leased_until = clock_timestamp() + make_interval(secs => \(seconds))
                WHERE id = \(id)
                """)
            return try await rows(
                db,
                """
                WITH held AS (SELECT work_key FROM work_leases WHERE holder = \(id)),
                counted AS (UPDATE daemons SET holds = (SELECT count(*) FROM held) WHERE id = \(id))
                SELECT coalesce((SELECT array_agg(work_key) FROM held), '{}'),
                  (SELECT count(*) FROM daemons WHERE stopped_at IS NULL AND heartbeat_at > clock_timestamp() - make_interval(secs => \(seconds)))
                """)[0]
        }
        let (held, live) = try row.decode(([String], Int).self)
        announcer.counted(liveDaemons: live)
        return LeaseRenewal(held: Set(held.compactMap(WorkKey.init)), liveDaemons: max(1, live))
    }

    public func claimWork(ttl: Duration, limit: Int, liveDaemons: Int, patience: Duration) async throws -> [Claim] {
        let id = daemon.id
        let live = max(1, liveDaemons)
        // Claimable: a row nobody holds, or one whose holder's heartbeat lease ran out while the server was up (its
        // holder could have renewed it and did not). One that ran out while the server was down waits until the
        // server has been up a lease time: after a restart every daemon's lease has run out at once, and each renews
        // its own first instead of the daemons taking each other's work (and leaving the Klarna answers they hold
        // unrecorded). Free rows first (oldest first), then the lapsed daemons' (longest lapsed first).
        // `room`: how far this daemon is below its share of all leased work (every daemon's `holds` and the free
        // rows, counted only as far as can matter); with none, only keys no daemon with room took within `patience`.
        // A claim extends this daemon's lease as a renewal would (a lease is claimed for `ttl`). The old holder's
        // lease end comes back relative to the server's clock at the query, so that this host's clock (which may
        // differ from the server's, and jump) never shortens the wait for its calls; the caller counts it from when
        // the answer arrived, after the query ran.
        let claimed = try await prepared(
            Statements.Claim.self, Statements.values(limit, live, id, ttl.timeInterval, patience.timeInterval)
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
        // Looked up wakeup by wakeup (a subquery on the lease's primary key), not joined: a join the planner chose from
        // statistics that lag a burst hashed every lease this daemon holds (thousands) for a few dozen wakeups. The
        // cost is one probe per wakeup waiting in the cluster; a wakeup waits only until its key is held and taken, and
        // in a burst of 30,000 new sessions on one daemon about 35 waited at a time (BENCHMARKS.md at 0490c17).
        let taken = try await rows(
            """
            DELETE FROM wakeups w WHERE (SELECT l.holder FROM work_leases l WHERE l.work_key = w.work_key) = \(id)
            RETURNING w.id, w.work_key, w.woken_by IS NOT DISTINCT FROM \(id)
            """
        ).map { try $0.decode((Int64, String, Bool).self) }
        var seen = Set<WorkKey>()
        return taken.sorted { $0.0 < $1.0 }.compactMap { _, key, wokenHere in
            guard !wokenHere, let key = WorkKey(key), seen.insert(key).inserted else { return nil }
            return key
        }
    }

    public func releaseLeases(_ keys: [WorkKey]) async throws -> Set<WorkKey> {
        // Kept while the unit is open (a held payment: its holder keeps it, idle; an order with a refund under way) or
        // a wakeup waits for it: a released open unit would have no row to be claimed by (``Statements/ReleaseLeases``).
        guard !keys.isEmpty else { return [] }
        let released = try await prepared(Statements.ReleaseLeases.self, Statements.values(keys.map(\.description), daemon.id))
        return Set(try released.compactMap { WorkKey(try $0.decode(String.self)) })
    }

    public func deregister(at: Date) async throws {
        let id = daemon.id
        try await transaction { [self] db in
            try await db.rows("UPDATE work_leases SET holder = NULL WHERE holder = \(id)", logger: logger)
            try await db.rows("UPDATE daemons SET stopped_at = \(at), holds = 0, leased_until = '-infinity' WHERE id = \(id)", logger: logger)
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
            FROM daemons d LEFT JOIN work_leases l ON l.holder = d.id AND d.leased_until > clock_timestamp()
            WHERE d.stopped_at IS NULL OR d.stopped_at > clock_timestamp() - interval '1 day'
            GROUP BY d.id ORDER BY d.started_at
            """
        ).map { row in
            let (id, host, pid, started, heartbeat, stopped, leases, sample) = try row.decode(
                (String, String, Int, Date, Date, Date?, Int, [String]).self)
            return DaemonRecord(
                id: id, host: host, pid: pid, startedAt: started, heartbeatAt: heartbeat, stoppedAt: stopped, leases: leases, sample: sample)
        }
    }

    public func unclaimedWork() async throws -> Int {
        try await rows(
            """
            SELECT count(*) FROM work_leases l LEFT JOIN daemons d ON d.id = l.holder
            WHERE l.holder IS NULL OR d.id IS NULL OR d.leased_until < clock_timestamp()
            """
        )[0].decode(Int.self)
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
            guard taken else {
                throw PostgresProblem(kind: .inUse, description: "\(location): another `store copy` or a starting daemon holds this database")
            }
            let running = try await connection.rows(
                """
                SELECT id, extract(epoch FROM clock_timestamp() - heartbeat_at)::float8 FROM daemons
                WHERE stopped_at IS NULL AND heartbeat_at > clock_timestamp() - interval '2 minutes' ORDER BY heartbeat_at DESC LIMIT 1
                """, logger: logger
            ).first.map { try $0.decode((String, Double).self) }
            if let (id, ago) = running {
                throw PostgresProblem(
                    kind: .inUse,
                    description: "\(location): daemon \(id) runs on this database (heartbeat \(Int(ago)) s ago); stop every daemon first")
            }
            copyLock.withLock { $0 = CopyLock(connection: connection) }
        } catch {
            try? await connection.close()
            throw error
        }
    }
}
