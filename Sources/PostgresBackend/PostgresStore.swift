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
    private let encoder: JSONEncoder
    private let decoder = JSONDecoder()
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
        encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
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
    /// of 2,000 payments (BENCHMARKS.md, the eighth look). A plan made again sees the table's size as it is now,
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
    func announceWork() async {
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

    func json<T: Encodable>(_ value: T) throws -> String {
        String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    func decode<T: Decodable>(_ type: T.Type, _ row: PostgresRow) throws -> T {
        try decoder.decode(type, from: Data(try row.decode(String.self).utf8))
    }

    func decode<T: Decodable>(_ type: T.Type, text: String) throws -> T {
        try decoder.decode(type, from: Data(text.utf8))
    }

    // MARK: Work

    public func session(_ hppSessionID: String) async throws -> TrackedSession? {
        try await prepared(Statements.SessionData.self, Statements.values(hppSessionID)).first.map { try decode(TrackedSession.self, $0) }
    }

    public func order(_ orderID: String) async throws -> TrackedOrder? {
        try await prepared(Statements.OrderData.self, Statements.values(orderID)).first.map { try decode(TrackedOrder.self, $0) }
    }

    public func paymentRequest(_ id: String) async throws -> TrackedPaymentRequest? {
        try await rows("SELECT data FROM payment_requests WHERE payment_request_id = \(id)").first.map { try decode(TrackedPaymentRequest.self, $0) }
    }

    public func intent(_ key: String) async throws -> Intent? {
        try await prepared(Statements.IntentData.self, Statements.values(key)).first.map { try decode(Intent.self, $0) }
    }

    public func intents(subject: String) async throws -> [Intent] {
        try await prepared(Statements.SubjectIntents.self, Statements.values(subject)).map { try decode(Intent.self, $0) }
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
                inputs.session = try? decode(TrackedSession.self, text: data)
                inputs.unitRead = inputs.session != nil
            case (2, let data?):
                inputs.order = try? decode(TrackedOrder.self, text: data)
                inputs.unitRead = inputs.order != nil
            case (3, let data?):
                inputs.paymentRequest = try? decode(TrackedPaymentRequest.self, text: data)
                inputs.unitRead = inputs.paymentRequest != nil
            case (4, let data?):
                if let intent = try? decode(Intent.self, text: data) { inputs.intents?.append(intent) } else { unreadableIntent = true }
            case (5, let data?):
                if let intent = try? decode(Intent.self, text: data) {
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

    public func commit(_ change: Change, at: Date, fencedBy key: WorkKey?) async throws {
        guard !change.isEmpty else { return }
        let changeRows = try ChangeRows(change, health: freshHealth(change.health)) { try self.json($0) }
        let rows = try json(changeRows)
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

    /// A session tracked for the first time, never overwriting one known already; returns whether it was new.
    func insertSession(_ db: PostgresConnection, _ session: TrackedSession, data: String, at: Date) async throws -> Bool {
        try await !db.rows(Statements.InsertSession.self, try Statements.session(session, data: data, at: at), logger: logger).isEmpty
    }

    func writePaymentRequest(_ db: PostgresConnection, _ request: TrackedPaymentRequest, data: String, at: Date) async throws {
        try await db.rows(
            """
            INSERT INTO payment_requests (payment_request_id, state, outcome, next_due, tracked_at, updated_at, data, account)
            VALUES (\(request.paymentRequestID), \(request.state?.rawValue), \(request.outcome?.rawValue), \(request.isOpen ? request.nextDueAt : nil),
              \(request.trackedAt), \(at), \(data), \(request.account.rawValue))
            ON CONFLICT (payment_request_id) DO UPDATE SET state = excluded.state, outcome = excluded.outcome, next_due = excluded.next_due,
              updated_at = excluded.updated_at, data = excluded.data
            """, logger: logger)
    }

    func insertEvent(_ db: PostgresConnection, _ event: NewEvent, detail: String?, at: Date) async throws {
        try await db.rows(Statements.InsertEvent.self, Statements.event(event, detail: detail, at: at), logger: logger)
    }

    /// An outcome for the outbox writer and the notifier (the daemons claim it from there); `data` is its JSON.
    func insertOutcome(_ db: PostgresConnection, _ outcome: Outcome, data: String, at: Date) async throws {
        try await db.rows(Statements.InsertOutcome.self, Statements.outcome(outcome, data: data, at: at), logger: logger)
    }

    /// `delivered`: the ingesting daemon wakes the engine itself after the commit, which it does for a key it
    /// holds; the row then names it (`woken_by`), and it skips the row when it takes its wakeups.
    func wake(_ db: PostgresConnection, _ key: WorkKey, delivered: Bool) async throws {
        try await db.rows(Statements.Wake.self, Statements.values(key.description, delivered, owner?.id), logger: logger)
    }

    // MARK: Queue

    public func openWork() async throws -> [OpenWork] { try await openWorkRows(of: nil) }

    /// The open work of `keys` (all of it for `nil`): what a claim plans its keys from.
    public func openWork(of keys: [WorkKey]) async throws -> [OpenWork] { try await openWorkRows(of: keys) }

    private func openWorkRows(of keys: [WorkKey]?) async throws -> [OpenWork] {
        // Dates inside `data` are Foundation's default encoding: seconds since 2001-01-01.
        func encoded(_ seconds: Double?) -> Date? { seconds.map { Date(timeIntervalSinceReferenceDate: $0) } }
        var work: [OpenWork] = []
        var refunds: [OpenWork] = []
        let rows: [PostgresRow]
        if let keys {
            var (sessions, orders, requests): ([String], [String], [String]) = ([], [], [])
            for key in keys {
                switch key {
                case .session(let id): sessions.append(id)
                case .order(let id): orders.append(id)
                case .paymentRequest(let id): requests.append(id)
                }
            }
            rows = try await prepared(Statements.OpenWorkOf.self, Statements.values(sessions, orders, requests))
        } else {
            rows = try await prepared(Statements.OpenWork.self, PostgresBindings())
        }
        for row in rows {
            let (kind, id, due, phase, deadline, trackedAt, lastRead, lastHint, expires, accountText) = try row.decode(
                (String, String, Date, String?, Date?, Date?, Double?, Double?, Double?, String?).self)
            let account = accountText.flatMap(AccountID.init(rawValue:)) ?? .default
            switch kind {
            case "s":
                let poll = PollProfile(
                    trackedAt: trackedAt ?? due, lastReadAt: encoded(lastRead), lastHintAt: encoded(lastHint), expiresAt: encoded(expires))
                work.append(
                    OpenWork(
                        key: .session(id), due: due, kind: .session(phase.flatMap(TrackedSession.Phase.init) ?? .polling, poll), deadline: deadline,
                        account: account))
            case "o":
                work.append(
                    OpenWork(
                        key: .order(id), due: due, kind: .order(phase.flatMap(TrackedOrder.Phase.init) ?? .checking), deadline: deadline,
                        account: account))
            case "r":
                refunds.append(OpenWork(key: .order(id), due: due, kind: .refund))
            default:
                work.append(OpenWork(key: .paymentRequest(id), due: due, kind: .paymentRequest, account: account))
            }
        }
        return OpenWork.merging(work, refunds: refunds)
    }

    /// Takes every wakeup row there is. Not by sequence: with concurrent writers, identity values commit out of
    /// order, and a row numbered below one already taken may still be on its way. `sequence` only grows.
    public func wakeups(after sequence: Int64, includingDelivered: Bool) async throws -> (keys: [WorkKey], last: Int64) {
        let taken = try await transaction { [self] db in
            try await rows(db, "DELETE FROM wakeups RETURNING id, work_key, delivered").map { try $0.decode((Int64, String, Bool).self) }
        }
        guard !taken.isEmpty else { return ([], sequence) }
        let keys = taken.sorted { $0.0 < $1.0 }.filter { includingDelivered || !$0.2 }.compactMap { WorkKey($0.1) }
        return (keys, max(sequence, taken.map(\.0).max() ?? sequence))
    }

    // MARK: Ingest

    public func track(_ session: TrackedSession, event: DomainEvent, at: Date) async throws -> TrackResult {
        let data = try json(session)
        let result: TrackResult = try await transaction { [self] db in
            guard try await insertSession(db, session, data: data, at: at) else {
                let existing = try await rows(db, "SELECT data FROM sessions WHERE hpp_session_id = \(session.hppSessionID)")
                return .existing(try decode(TrackedSession.self, existing[0]))
            }
            try await insertEvent(db, NewEvent(hppSessionID: session.hppSessionID, orderID: nil, event), detail: nil, at: at)
            try await wake(db, .session(session.hppSessionID), delivered: false)
            return .tracked(session)
        }
        if case .tracked = result { await announceWork() }
        return result
    }

    public func requestCapture(orderID: String, amount: Int?, at: Date) async throws -> CaptureRequestResult {
        let result: CaptureRequestResult = try await transaction { [self] db in
            switch IngestPlanner.captureRequest(
                orderID: orderID, amount: amount, order: try await lockedOrder(db, orderID), requestedBy: "the command line")
            {
            case .write(var writes):
                writes.delivered = false
                guard case .written(let id?) = try await apply(db, writes, at: at) else {
                    preconditionFailure("a capture request's writes record one")
                }
                return .accepted(id: id)
            case .unknownOrder: return .unknownOrder
            case .refused(let why): return .refused(why)
            }
        }
        if case .accepted = result { await announceWork() }
        return result
    }

    /// Locked until the commit, so that a capture request is decided against the state a concurrent step commits.
    private func lockedOrder(_ db: PostgresConnection, _ orderID: String) async throws -> TrackedOrder? {
        try await rows(db, "SELECT data FROM orders WHERE order_id = \(orderID) FOR UPDATE").first.map { try decode(TrackedOrder.self, $0) }
    }

    /// Ends an ingest transaction without committing anything.
    private struct Refusal: Error {
        let result: IngestResult
    }

    /// A delivery decided by whether one session is tracked (callbacks, track requests) goes out in one statement with
    /// the others that arrive meanwhile (``IngestBatcher``); the others read first in a transaction, then write.
    public func ingest(_ record: IngestRecord, at: Date) async throws -> IngestResult {
        let result = try await ingestOnce(record, at: at)
        // Its wakeups tell whoever holds those keys (another daemon, perhaps) to look now.
        if case .accepted(let wake) = result, !wake.isEmpty { await announceWork() }
        return result
    }

    private func ingestOnce(_ record: IngestRecord, at: Date) async throws -> IngestResult {
        let lookup = IngestPlanner.lookup(record)
        if let delivery = try SessionDelivery(record, lookup: lookup, at: at, json: { try self.json($0) }) {
            return try await batcher.submit(delivery) { [self] deliveries in
                let started = ContinuousClock.now
                defer { Telemetry.time(.storeCommitDuration, .now - started) }
                let bindings = try IngestBatch.bindings(deliveries, holder: owner?.id) { try self.json($0) }
                let rows = try await withConnection { [logger] db in try await db.rows(IngestBatch.self, bindings, logger: logger) }
                return try IngestBatch.results(deliveries, rows: rows)
            }
        }
        do {
            return try await transaction { [self] db in try await ingest(db, record, lookup: lookup, at: at) }
        } catch let refusal as Refusal {
            // Rolled back: a refused delivery leaves no trace but its rejection record.
            return refusal.result
        }
    }

    private func ingest(_ db: PostgresConnection, _ record: IngestRecord, lookup: IngestLookup, at: Date) async throws -> IngestResult {
        if let key = record.dedupeKey {
            // Two deliveries of one key at once: the second waits for the first's commit, then finds the conflict.
            let fresh = try await db.rows(
                Statements.InsertDelivery.self, Statements.values(key, record.kind, record.source, at, record.summary), logger: logger)
            if fresh.isEmpty {
                let seen = try await rows(db, "UPDATE deliveries SET repeats = repeats + 1 WHERE dedupe_key = \(key) RETURNING received_at")
                return .repeated(firstSeen: try seen.first?.decode(Date.self) ?? at)
            }
        }
        var found = try await find(db, lookup)
        while true {
            switch IngestPlanner.decide(record, found: found, at: at) {
            case .refuse(let answer): throw Refusal(result: answer)
            case .write(let writes, let answer):
                switch try await apply(db, writes, at: at) {
                case .written: return answer
                case .sessionTrackedMeanwhile:
                    // Another delivery tracked it since the lookup (and woke it): decided again as tracked.
                    found = .session(tracked: true)
                case .recordedMeanwhile:
                    // Another request recorded it since the lookup: decided again from what it recorded.
                    found = try await find(db, lookup)
                }
            }
        }
    }

    private func find(_ db: PostgresConnection, _ lookup: IngestLookup) async throws -> IngestFound {
        switch lookup {
        case .nothing:
            return .nothing
        case .session(let id):
            return .session(tracked: try await !rows(db, "SELECT 1 FROM sessions WHERE hpp_session_id = \(id)").isEmpty)
        case .openSessionsOfPayment(let kpSessionID):
            return .openSessions(
                try await rows(db, "SELECT hpp_session_id FROM sessions WHERE kp_session_id = \(kpSessionID) AND next_due IS NOT NULL").map {
                    try $0.decode(String.self)
                })
        case .orderSession(let orderID):
            return .orderSession(
                hppSessionID: try await rows(db, "SELECT hpp_session_id FROM orders WHERE order_id = \(orderID)").first.map {
                    try $0.decode(String?.self)
                })
        case .order(let orderID):
            return .order(try await lockedOrder(db, orderID))
        case .paymentRequest(let id):
            return .paymentRequest(
                try await rows(db, "SELECT data FROM payment_requests WHERE payment_request_id = \(id) FOR UPDATE").first.map {
                    try decode(TrackedPaymentRequest.self, $0)
                })
        case .refund(let orderID, let key):
            return .refund(
                order: try await rows(db, "SELECT data FROM orders WHERE order_id = \(orderID)").first.map { try decode(TrackedOrder.self, $0) },
                existing: try await rows(db, "SELECT data FROM intents WHERE key = \(key)").first.map { try decode(Intent.self, $0) })
        }
    }

    private enum Applied {
        /// With the capture request's id when it recorded one.
        case written(captureRequestID: Int64?)
        /// Nothing written: the session to track was tracked by another delivery since the lookup.
        case sessionTrackedMeanwhile
        /// Nothing written: the intent to record (a refund) was recorded by another request since the lookup.
        case recordedMeanwhile
    }

    private func apply(_ db: PostgresConnection, _ writes: IngestWrites, at: Date) async throws -> Applied {
        if let session = writes.newSession, try await !insertSession(db, session, data: try json(session), at: at) { return .sessionTrackedMeanwhile }
        if let request = writes.paymentRequest { try await writePaymentRequest(db, request, data: try json(request), at: at) }
        if let intent = writes.intent {
            let data = try json(intent)
            // Two requests with one reference at once: the second waits for the first's commit, then finds its row.
            let inserted = try await rows(
                db,
                """
                INSERT INTO intents (key, kind, subject, state, attempts, next_attempt, created_at, updated_at, data)
                VALUES (\(intent.key), \(intent.kind.rawValue), \(intent.subject), \(intent.state.rawValue), \(intent.attempts),
                  \(intent.nextAttemptAt), \(intent.createdAt), \(at), \(data))
                ON CONFLICT (key) DO NOTHING RETURNING 1
                """)
            if inserted.isEmpty { return .recordedMeanwhile }
        }
        if let hint = writes.disputeHint {
            _ = try await rows(
                db,
                """
                INSERT INTO dispute_hints (dispute_id, hinted_at, account) VALUES (\(hint.disputeID), \(at), \(hint.account.rawValue))
                ON CONFLICT (dispute_id) DO UPDATE SET hinted_at = excluded.hinted_at, account = excluded.account
                """
            )
        }
        var captureRequestID: Int64?
        if let capture = writes.captureRequest {
            let id = try await rows(
                db, "INSERT INTO capture_requests (order_id, amount, requested_at) VALUES (\(capture.orderID), \(capture.amount), \(at)) RETURNING id"
            )[0].decode(Int64.self)
            var event = capture.event
            event.detail["request"] = "\(id)"
            try await insertEvent(db, event, detail: try json(event.detail), at: at)
            captureRequestID = id
        }
        for event in writes.events { try await insertEvent(db, event, detail: event.detail.isEmpty ? nil : try json(event.detail), at: at) }
        for key in writes.wakeups { try await wake(db, key, delivered: writes.delivered) }
        return .written(captureRequestID: captureRequestID)
    }

    public func recordRejection(source: String, status: Int, error: String, detail: String, at: Date) async throws {
        try await rows(
            "INSERT INTO rejections (at, source, status, error, detail) VALUES (\(at), \(source), \(status), \(error), \(String(detail.prefix(1_000))))"
        )
    }

    // MARK: Outcomes

    /// How long a daemon has to deliver the outcomes it claimed before another daemon may take them over.
    static let deliveryClaim = "60 seconds"

    /// A daemon claims the outcomes it returns (several daemons deliver each outcome once, on the host that
    /// claimed it); a claim runs out after ``deliveryClaim`` if its daemon stops.
    public func undeliveredOutcomes(now: Date, limit: Int) async throws -> [StoredOutcome] {
        guard let owner else {
            return try await rows(
                """
                SELECT id, at, data, outbox_written, notified, notify_attempts, notify_next FROM outcomes
                WHERE NOT outbox_written OR (NOT notified AND (notify_next IS NULL OR notify_next <= \(now))) ORDER BY id LIMIT \(limit)
                """
            ).map(outcome)
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
        ).map(outcome).sorted { $0.id < $1.id }
    }

    public func markOutboxWritten(_ ids: [Int64], notified: Bool) async throws {
        guard !ids.isEmpty else { return }
        try await prepared(Statements.MarkOutboxWritten.self, Statements.values(ids, notified))
    }

    public func markNotified(_ id: Int64) async throws {
        try await prepared(Statements.MarkNotified.self, Statements.values(id))
    }

    public func notifyFailed(_ id: Int64, nextAt: Date?) async throws {
        try await rows(
            "UPDATE outcomes SET notify_attempts = notify_attempts + 1, notify_next = \(nextAt), notified = \(nextAt == nil) WHERE id = \(id)")
    }

    func outcome(_ row: PostgresRow) throws -> StoredOutcome {
        let (id, at, data, written, notified, attempts, next) = try row.decode((Int64, Date, String, Bool, Bool, Int, Date?).self)
        return StoredOutcome(
            id: id, at: at, outcome: try decode(Outcome.self, text: data), outboxWritten: written, notified: notified, notifyAttempts: attempts,
            notifyNextAt: next)
    }

    // MARK: Reloads

    // MARK: Health

    /// A transaction that takes a connection from the pool and commits (it fails while the server is unreachable),
    /// and no write the server refused within ``refusalMemory`` (a server whose disk is full still answers `SELECT 1`).
    public func probeWrites() async throws {
        if let (refusal, at) = refused.withLock({ $0 }), ContinuousClock.now - at < Self.refusalMemory { throw refusal }
        try await transaction { [self] db in _ = try await db.rows("SELECT 1", logger: logger) }
    }
}
