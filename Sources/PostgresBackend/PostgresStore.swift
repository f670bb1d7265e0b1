import Foundation
import Logging
import PostgresNIO
import ReconcilerCore
import ReconcilerStore
import Synchronization
import Telemetry

/// The shared store: PostgreSQL over postgres-nio's connection pool, one transaction per write. The same roles as
/// the SQLite store, test for test (the conformance suite), with what concurrent writers on several hosts need:
/// inserts that race resolve by `ON CONFLICT`, queues are taken with `DELETE … RETURNING`, never by a sequence.
public final class PostgresStore: ReconcilerStore, @unchecked Sendable {
    public let location: PostgresLocation
    let client: PostgresClient
    let logger: Logger
    private let running: Task<Void, Never>
    /// The daemon this handle writes as: its steps' commits are fenced by its leases, it claims outcomes to
    /// deliver. `nil` for operator commands and tests, which write as nobody.
    let owner: DaemonIdentity?
    /// `store copy`'s hold on the database, while it fills it.
    let copyLock = Mutex<CopyLock?>(nil)
    /// Announces new work once its commit is done (``announceWork()``).
    let announcer = WorkAnnouncer()
    /// Sends the deliveries that arrive together in one statement (``ingest(_:at:)``).
    private let batcher = IngestBatcher()
    /// When this handle last recorded a Klarna success (``freshHealth(_:)``).
    private let lastSuccessWritten = Mutex<ContinuousClock.Instant?>(nil)
    /// How often a pooled connection's plans are made afresh (``replanningInterval``), if at all.
    private let replanning: Duration?
    /// Gives up on a lease that waits longer than ``connectionPatience`` (or what `open` was given).
    private let leasePatience: LeasePatience

    /// Connects, applies migrations under the migration lock (several daemons starting together migrate once), and
    /// checks the schema is one this binary knows. `migrate: false` (operator commands) only checks.
    /// - Parameter connections: the most this handle opens at once (one per concurrent transaction).
    /// - Parameter daemon: who the handle writes as (the daemon), else nobody.
    /// - Parameter transactionIdleLimit: the server ends a session whose transaction waits this long for its next
    ///   statement. A daemon cut off from the server mid-transaction would otherwise hold its row locks (a lease
    ///   row's share lock among them, which keeps the work from being claimed) until TCP notices, hours later.
    /// - Parameter replanning: how often each connection's plans are made afresh (``replanningInterval``); `nil`
    ///   never, but when PostgreSQL's own statistics change.
    /// - Parameter patience: how long a caller waits for a pooled connection (``connectionPatience``).
    public static func open(
        _ location: PostgresLocation, password: String?, migrate: Bool = true, connections: Int = 10, daemon: DaemonIdentity? = nil,
        transactionIdleLimit: Duration? = nil, replanning: Duration? = replanningInterval, patience: Duration = connectionPatience,
        logger: Logger
    ) async throws -> PostgresStore {
        let found = try await check(location, password: password, migrate: migrate, logger: logger)
        if !migrate, found < PostgresSchema.latest {
            throw PostgresProblem(
                kind: .schemaTooOld,
                description:
                    "\(location): the store's schema is version \(found), this binary expects \(PostgresSchema.latest): start the daemon once to migrate it"
            )
        }
        let client = PostgresClient(
            configuration: location.clientConfiguration(password: password, maximumConnections: connections, idleInTransaction: transactionIdleLimit),
            backgroundLogger: logger)
        return PostgresStore(
            location: location, password: password, client: client, owner: daemon, replanning: replanning, patience: patience, logger: logger)
    }

    /// Connects once (no pool: its failure names the cause at once, where a pool would retry it for a minute),
    /// migrates if `migrate`, and returns the schema version found. `check-config` uses it to name the problem.
    @discardableResult
    public static func check(_ location: PostgresLocation, password: String?, migrate: Bool = false, logger: Logger) async throws -> Int {
        do {
            let connection = try await connect(location, password: password, logger: logger)
            do {
                let found =
                    migrate
                    ? try await PostgresSchema.migrate(connection, logger: logger)
                    : try await PostgresSchema.version(connection, logger: logger)
                guard found <= PostgresSchema.latest else { throw PostgresSchema.TooNew(found: found, known: PostgresSchema.latest) }
                try await connection.close()
                return found
            } catch {
                try? await connection.close()
                throw error
            }
        } catch {
            throw PostgresProblem(error, location: location)
        }
    }

    /// The schema version this binary writes.
    public static var schemaVersion: Int { PostgresSchema.latest }

    static func connect(_ location: PostgresLocation, password: String?, logger: Logger) async throws -> PostgresConnection {
        try await PostgresConnection.connect(
            on: PostgresClient.defaultEventLoopGroup.any(), configuration: try location.connectionConfiguration(password: password), id: 0,
            logger: logger
        ).get()
    }

    /// For the connections that live outside the pool (the work listener, the copy lock).
    let password: String?

    private init(
        location: PostgresLocation, password: String?, client: PostgresClient, owner: DaemonIdentity?, replanning: Duration?,
        patience: Duration, logger: Logger
    ) {
        self.location = location
        self.password = password
        self.client = client
        self.owner = owner
        self.replanning = replanning
        leasePatience = LeasePatience(patience: patience, tick: patience / 5)
        self.logger = logger
        running = Task { await client.run() }
    }

    /// Closes every connection; the store is unusable afterwards.
    public func close() {
        copyLock.withLock { $0?.release() }
        leasePatience.stop()
        running.cancel()
    }

    deinit { running.cancel() }

    // MARK: Plumbing

    /// How long a caller waits for a pooled connection. While the server is unreachable the pool keeps trying to
    /// connect for a minute; a delivery waiting for its answer must hear "unavailable" (503, send again) instead.
    public static let connectionPatience: Duration = .seconds(5)

    /// How often a pooled connection's cached plans are made afresh (`DISCARD PLANS` before its next statement).
    ///
    /// Why: a connection keeps the plan it made for a prepared statement until PostgreSQL's statistics of a table it
    /// reads change, and autovacuum analyzes a table only after a tenth of it changed, at most once a minute. A plan
    /// made while a table was small (a new database, a burst of work) can walk the wrong way once the table has grown:
    /// a session step's inputs, planned while the intents were few, scanned them all, up to 1.5 ms a step over a run
    /// of 2,000 payments (BENCHMARKS.md at 0490c17, the eighth look). A plan made again sees the table's size as it is now,
    /// analyzed or not. The cost is the planning again: 0.02-0.07 ms a payment in a run of 2,000, 0.6-0.8 s more in a
    /// burst of 30,000 track requests.
    public static let replanningInterval: Duration = .seconds(5)

    /// No pooled connection within the store's patience (``connectionPatience`` unless `open` was given another):
    /// nothing of the caller's work was sent to the server.
    public struct Unavailable: Error, CustomStringConvertible {
        public let description: String
    }

    /// Runs `body` on a pooled connection, or throws ``Unavailable`` when none comes within the patience
    /// (``connectionPatience``, checked every fifth of it: ``LeasePatience``).
    func withConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let race = LeasePatience.Race()
        let leasing = Task { [self] in
            try await client.withConnection { connection in
                guard race.lease() else { throw CancellationError() }
                if let replanning, ConnectionWatch.of(connection).plansDue(every: replanning) {
                    try await connection.rows("DISCARD PLANS", logger: logger)
                }
                return try await body(connection)
            }
        }
        let ticket = leasePatience.enter(race) { leasing.cancel() }
        defer { leasePatience.leave(ticket) }
        do {
            return try await withTaskCancellationHandler {
                try await leasing.value
            } onCancel: {
                leasing.cancel()
            }
        } catch  where race.gaveUp {
            throw Unavailable(
                description:
                    "\(location): no connection to PostgreSQL within \(leasePatience.patience) (the server is unreachable or every connection is busy)"
            )
        } catch {
            guard let refusal = ServerRefusal(error, location: location) else { throw error }
            refused.withLock { $0 = (refusal, .now) }
            throw refusal
        }
    }

    /// The server's last refusal (``ServerRefusal``) and when: `probeWrites` reports it for ``refusalMemory``.
    private let refused = Mutex<(ServerRefusal, ContinuousClock.Instant)?>(nil)
    /// How long a refusal makes the store unavailable to the readiness probe after it: the engine's retries of a held
    /// answer (every 5 s at most) and the forwarders' renew it while the server refuses; it lapses once they land.
    static let refusalMemory: Duration = .seconds(10)

    /// Runs `body` in one transaction on one pooled connection; rolls back and rethrows its own error if it throws.
    /// A failure may have closed the connection (a hot statement that failed at its first use on it, see
    /// `PostgresConnection.rows(_:_:logger:)`): the ROLLBACK then fails at once, unwritten, and the server has
    /// rolled the transaction back with the session.
    func transaction<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let started = ContinuousClock.now
        defer { Telemetry.time(.storeCommitDuration, .now - started) }
        return try await withConnection { [self] connection in
            try await connection.rows("BEGIN", logger: logger)
            do {
                let value = try await body(connection)
                try await connection.rows("COMMIT", logger: logger)
                return value
            } catch {
                _ = try? await connection.rows("ROLLBACK", logger: logger)
                throw error
            }
        }
    }

    @discardableResult
    func rows(_ query: PostgresQuery) async throws -> [PostgresRow] {
        try await withConnection { [logger] connection in try await connection.rows(query, logger: logger) }
    }

    /// A hot statement on a pooled connection (``PostgresConnection/rows(_:_:logger:)``: prepared there once).
    @discardableResult
    func prepared<Text: StatementText>(_ text: Text.Type, _ bindings: PostgresBindings) async throws -> [PostgresRow] {
        try await withConnection { [logger] connection in try await connection.rows(text, bindings, logger: logger) }
    }

    func rows(_ connection: PostgresConnection, _ query: PostgresQuery) async throws -> [PostgresRow] {
        try await connection.rows(query, logger: logger)
    }

    /// Tells the daemons listening for work that some arrived, after the commit that made it (``WorkAnnouncer``). A
    /// daemon does not wait for it (announcements asked for meanwhile go out as one); an operator command, which
    /// exits next, does.
    public func announceWork() async {
        guard announcer.ask() else { return }
        let send: @Sendable () async -> Void = { [self] in
            repeat {
                do {
                    try await rows("SELECT pg_notify(\(PostgresSchema.workChannel), 'work')")
                } catch {
                    logger.debug("announcing new work failed (the daemons find it at their next claim): \(error)")
                }
            } while announcer.sent()
        }
        if owner == nil { await send() } else { Task { await send() } }
    }

    // MARK: Work: a step's reads, prepared (hot: every step asks)

    /// Prepared, as the next three: PostgreSQL-specific for that (unprepared, each was planned at every step).
    public func session(_ hppSessionID: String) async throws -> TrackedSession? {
        try await prepared(Statements.SessionData.self, Statements.values(hppSessionID)).first.map {
            try PostgresStatementRow(row: $0).decoded(TrackedSession.self)
        }
    }

    public func order(_ orderID: String) async throws -> TrackedOrder? {
        try await prepared(Statements.OrderData.self, Statements.values(orderID)).first.map {
            try PostgresStatementRow(row: $0).decoded(TrackedOrder.self)
        }
    }

    public func intent(_ key: String) async throws -> Intent? {
        try await prepared(Statements.IntentData.self, Statements.values(key)).first.map { try PostgresStatementRow(row: $0).decoded(Intent.self) }
    }

    public func intents(subject: String) async throws -> [Intent] {
        try await prepared(Statements.SubjectIntents.self, Statements.values(subject)).map { try PostgresStatementRow(row: $0).decoded(Intent.self) }
    }

    public func stepInputs(for key: WorkKey) async throws -> StepInputs {
        var inputs = StepInputs(controls: OperatorControls(held: false, pending: []), unitRead: true)
        let rows: [PostgresRow]
        switch key {
        case .session(let id):
            inputs.sessionIntents = []
            rows = try await prepared(Statements.StepInputs.Session.self, Statements.values(key.description, id))
        case .order(let id):
            inputs.intents = []
            rows = try await prepared(Statements.StepInputs.Order.self, Statements.values(key.description, id))
        case .paymentRequest(let id):
            rows = try await prepared(Statements.StepInputs.PaymentRequest.self, Statements.values(key.description, id))
        case .customerToken:
            // Nobody holds a token's intent or asks anything of it: its step reads its intent alone.
            return StepInputs(controls: OperatorControls(held: false, pending: []))
        }
        // A row this daemon cannot read (a newer daemon's) must not keep the step from its hold and requests: it is
        // left to its own read, which fails where it did.
        var unreadableIntent = false
        var unreadableSessionIntent = false
        for row in rows {
            let (part, data, held, id, workKey, action, orderID, by, at, state, note, _) = try row.decode(
                (Int, String?, Bool?, Int64?, String?, String?, String?, String?, Date?, String?, String?, Date?).self)
            switch (part, data) {
            case (0, _):
                inputs.controls.held = held ?? false
                if let request = Self.pendingRequest(id, workKey, action, orderID, by, at, state, note) { inputs.controls.pending.append(request) }
            case (1, let data?):
                inputs.session = try? StoredJSON.decode(TrackedSession.self, data)
                inputs.unitRead = inputs.session != nil
            case (2, let data?):
                inputs.order = try? StoredJSON.decode(TrackedOrder.self, data)
                inputs.unitRead = inputs.order != nil
            case (3, let data?):
                inputs.paymentRequest = try? StoredJSON.decode(TrackedPaymentRequest.self, data)
                inputs.unitRead = inputs.paymentRequest != nil
            case (4, let data?):
                if let intent = try? StoredJSON.decode(Intent.self, data) { inputs.intents?.append(intent) } else { unreadableIntent = true }
            case (5, let data?):
                if let intent = try? StoredJSON.decode(Intent.self, data) {
                    inputs.sessionIntents?.append(intent)
                } else {
                    unreadableSessionIntent = true
                }
            default: continue
            }
        }
        if unreadableIntent { inputs.intents = nil }
        if unreadableSessionIntent { inputs.sessionIntents = nil }
        return inputs
    }

    /// With the step's other inputs: a step asks for them all at once (``stepInputs(for:)``), and nothing else
    /// asks on the hot path.
    public func operatorControls(for key: WorkKey) async throws -> OperatorControls {
        try await stepInputs(for: key).controls
    }

    /// A pending request from the columns ``stepInputs(for:)`` reads beside the hold;
    /// nil for the row of nulls that stands for none.
    static func pendingRequest(
        _ id: Int64?, _ workKey: String?, _ action: String?, _ orderID: String?, _ by: String?, _ at: Date?, _ state: String?, _ note: String?
    ) -> OperatorRequest? {
        guard let id, let workKey = workKey.flatMap(WorkKey.init), let action = action.flatMap(OperatorAction.init), let by, let at else {
            return nil
        }
        return OperatorRequest(
            id: id, key: workKey, action: action, orderID: orderID, requestedBy: by, requestedAt: at,
            state: state.flatMap(OperatorRequest.State.init) ?? .pending, note: note)
    }

    public func commit(_ change: Change, at: Date, fencedBy key: WorkKey?) async throws {
        guard !change.isEmpty else { return }
        let changeRows = try ChangeRows(change, health: freshHealth(change.health))
        let rows = try StoredJSON.encode(changeRows)
        // The fence only for a daemon's own step: an operator command or a test writes as nobody.
        let fence = owner.flatMap { owner in key.map { (key: $0, holder: owner.id) } }
        let started = ContinuousClock.now
        defer { Telemetry.time(.storeCommitDuration, .now - started) }
        let bindings = CommitChange.bindings(key: fence?.key.description, holder: fence?.holder, at: at, rows: rows)
        let guarded = changeRows.intent_read != nil
        let statement = CommitChange.statement(for: changeRows)
        let answer = try await withConnection { [logger] db in try await db.rows(statement, bindings, logger: logger) }
        // The lease is share-locked for the statement, so a daemon claiming the work after the lease ran out waits for
        // this commit (its claim skips the row) and then sees what it wrote.
        let (mine, current, written) = try answer.first?.decode((Bool?, Bool?, Bool).self) ?? (nil, nil, false)
        if let fence {
            guard mine == true else { throw LeaseLost(key: fence.key) }
            guard current == true else { throw LeaseLapsed(key: fence.key) }
        }
        if guarded, let read = change.intentRead, !written { throw IntentMoved(key: read.key) }
        // New work for whoever claims it: an order handed off, or a unit other than the step's own.
        if !change.newOrders.isEmpty || change.sessions.contains(where: { key != .session($0.hppSessionID) })
            || change.orders.contains(where: { key != .order($0.orderID) })
            || change.paymentRequests.contains(where: { key != .paymentRequest($0.paymentRequestID) })
        {
            await announceWork()
        }
    }

    /// The `health` entries worth writing: a success at most once a second per handle (every daemon's steps
    /// would otherwise queue on the one `klarna_ok` row, each holding its lock until its commit); errors always.
    private func freshHealth(_ entries: [(key: HealthKey, detail: String)]) -> [(key: HealthKey, detail: String)] {
        let now = ContinuousClock.now
        return entries.filter { entry in
            guard entry.key == .klarnaOK else { return true }
            return lastSuccessWritten.withLock { last in
                if let last, now - last < .seconds(1) { return false }
                last = now
                return true
            }
        }
    }

    // MARK: Queue

    /// The open work of `keys`: what a claim plans its keys from (prepared: every claim asks).
    public func openWork(of keys: [WorkKey]) async throws -> [OpenWork] {
        var (sessions, orders, requests, tokenIntents): ([String], [String], [String], [String]) = ([], [], [], [])
        for key in keys {
            switch key {
            case .session(let id): sessions.append(id)
            case .order(let id): orders.append(id)
            case .paymentRequest(let id): requests.append(id)
            case .customerToken(let key): tokenIntents.append(key)
            }
        }
        let rows = try await prepared(Statements.OpenWorkOf.self, Statements.values(sessions, orders, requests, tokenIntents))
        return OpenWork.merging(rows: rows.map(PostgresStatementRow.init))
    }

    /// A delivery decided by whether one session is tracked (callbacks, track requests) goes out in one statement with
    /// the others that arrive meanwhile (``IngestBatcher``, PostgreSQL-specific: a round trip per statement is its
    /// cost); the others go through the transaction written once (``ingestAlone(_:at:)``).
    public func ingest(_ record: IngestRecord, at: Date) async throws -> IngestResult {
        guard let delivery = try SessionDelivery(record, lookup: IngestPlanner.lookup(record), at: at) else {
            return try await ingestAlone(record, at: at)
        }
        let result = try await batcher.submit(delivery) { [self] deliveries in
            let started = ContinuousClock.now
            defer { Telemetry.time(.storeCommitDuration, .now - started) }
            let bindings = try IngestBatch.bindings(deliveries, holder: owner?.id)
            let rows = try await withConnection { [logger] db in try await db.rows(IngestBatch.self, bindings, logger: logger) }
            return try IngestBatch.results(deliveries, rows: rows)
        }
        // Its wakeups tell whoever holds those keys (another daemon, perhaps) to look now.
        if case .accepted(let wake) = result, !wake.isEmpty { await announceWork() }
        return result
    }

    // MARK: Outcomes

    /// How long a daemon has to deliver the outcomes it claimed before another daemon may take them over.
    static let deliveryClaim = "60 seconds"

    /// A daemon claims the outcomes it returns (several daemons deliver each outcome once, on the host that
    /// claimed it); a claim runs out after ``deliveryClaim`` if its daemon stops.
    public func undeliveredOutcomes(now: Date, limit: Int) async throws -> [StoredOutcome] {
        guard let owner else {
            return try await rows(
                of: "SELECT \(StoredOutcome.columns) FROM outcomes WHERE \(StoredOutcome.undelivered(now: now)) ORDER BY id LIMIT \(limit)"
            ).map(StoredOutcome.init(row:))
        }
        return try await rows(
            """
            WITH picked AS (
              SELECT id FROM outcomes
              WHERE (NOT outbox_written OR (NOT notified AND (notify_next IS NULL OR notify_next <= \(now))))
                AND (delivery_holder IS NULL OR delivery_holder = \(owner.id) OR delivery_until < clock_timestamp())
              ORDER BY id LIMIT \(limit) FOR UPDATE SKIP LOCKED)
            UPDATE outcomes o SET delivery_holder = \(owner.id), delivery_until = clock_timestamp() + interval '\(unescaped: Self.deliveryClaim)'
            FROM picked WHERE o.id = picked.id
            RETURNING o.id, o.at, o.data, o.outbox_written, o.notified, o.notify_attempts, o.notify_next
            """
        ).map { try StoredOutcome(row: PostgresStatementRow(row: $0)) }.sorted { $0.id < $1.id }
    }

    /// Prepared, as ``markNotified(_:)``: PostgreSQL-specific for that (every outcome delivered marks one).
    public func markOutboxWritten(_ ids: [Int64], notified: Bool) async throws {
        guard !ids.isEmpty else { return }
        try await prepared(Statements.MarkOutboxWritten.self, Statements.values(ids, notified))
    }

    public func markNotified(_ id: Int64) async throws {
        try await prepared(Statements.MarkNotified.self, Statements.values(id))
    }

    // MARK: Health

    /// A transaction that takes a connection from the pool and commits (it fails while the server is unreachable),
    /// and no write the server refused within ``refusalMemory`` (a server whose disk is full still answers `SELECT 1`).
    public func probeWrites() async throws {
        if let (refusal, at) = refused.withLock({ $0 }), ContinuousClock.now - at < Self.refusalMemory { throw refusal }
        try await transaction { [self] db in _ = try await db.rows("SELECT 1", logger: logger) }
    }
}
