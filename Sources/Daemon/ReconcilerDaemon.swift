import Engine
import Foundation
import Glibc
import HTTPServer
import Ingest
import KlarnaAPI
import Logging
import Metrics
import PostgresBackend
import Prometheus
import ReconcilerCore
import ReconcilerStore
import SQLiteBackend
import ServiceLifecycle
import Settings
import Synchronization
import SystemdSupport
import UnixSignals

/// The daemon, assembled: the store, the Klarna client, the engine's workers, ingest (socket and spool), the
/// operators' socket, outcome delivery, settlements, disputes, retention, reloads and the supervisor that keeps systemd
/// informed, as services in one `ServiceGroup`. `klarna-reconciler run` runs one per process; a test runs one
/// in-process, stops it with ``stop()`` and reloads it with ``reload()``.
public final class ReconcilerDaemon: Sendable {
    public struct Options: Sendable {
        public var configPath: String
        /// Where credentials (`CREDENTIALS_DIRECTORY`) and environment overrides are read from.
        public var environment: [String: String]
        /// SIGTERM and SIGINT stop it, SIGHUP reloads it: for the process's one daemon, not for one inside a test.
        public var handlesSignals: Bool
        /// What `/metrics` prints; swift-metrics counts into it when it was bootstrapped (``bootstrapMetrics()``).
        public var metrics: PrometheusCollectorRegistry
        /// Set from `log.level` at start and at each reload.
        public var logLevel: LogLevelControl
        public var logger: Logger

        public init(
            configPath: String, environment: [String: String] = ProcessInfo.processInfo.environment, handlesSignals: Bool = false,
            metrics: PrometheusCollectorRegistry = PrometheusCollectorRegistry(), logLevel: LogLevelControl = LogLevelControl(.info),
            logger: Logger = Logger(label: "klarna-reconciler")
        ) {
            self.configPath = configPath
            self.environment = environment
            self.handlesSignals = handlesSignals
            self.metrics = metrics
            self.logLevel = logLevel
            self.logger = logger
        }
    }

    /// Why the daemon could not start or stopped on an error: the message, the errno for systemd's `ERRNO=`, and the
    /// exit code (78 for configuration, so systemd does not restart into the same error).
    public struct StartFailure: Error, CustomStringConvertible {
        public let description: String
        public let errno: Int32
        public let exitCode: Int32

        init(_ description: String, errno: Int32, exitCode: Int32 = 1) {
            self.description = description
            self.errno = errno
            self.exitCode = exitCode
        }
    }

    private struct State {
        var group: ServiceGroup?
        var readiness: Readiness?
        var stopAsked = false
    }

    let options: Options
    private let state = Mutex(State())
    private let reloads = ReloadRequests()

    public init(options: Options) {
        self.options = options
    }

    /// Whether `/v1/ready` would answer 200: started, not draining, the store answering.
    public var isReady: Bool { state.withLock { $0.readiness?.report().ready ?? false } }

    /// A graceful stop, as SIGTERM: not ready, the workers finish their step, the listeners close, outcomes flush;
    /// ``run()`` returns once everything stopped.
    public func stop() async {
        let group = state.withLock { state in
            state.stopAsked = true
            return state.group
        }
        await group?.triggerGracefulShutdown()
    }

    /// A reload, as SIGHUP: the configuration read again and what can change live applied.
    public func reload() { reloads.ask() }

    /// Starts everything and runs until stopped. Throws ``StartFailure`` when it cannot start or stops on an error.
    public func run() async throws {
        let options = self.options
        let logger = options.logger
        let notifier = SystemdNotifier()

        let settings: Settings
        do {
            settings = try await Settings.load(configPath: options.configPath, environment: options.environment, needsKlarnaPassword: true)
        } catch {
            throw StartFailure("config error: \(error)", errno: EINVAL, exitCode: 78)
        }
        options.logLevel.value = settings.logLevel

        // The lock beside store.path is taken whichever store is used: one daemon per host and configuration, and
        // the pid `reload` signals. With PostgreSQL, daemons on other hosts share the work by leases.
        let lock: StoreLock
        let store: any ReconcilerStore
        var shared: (any LeaseStore)?
        let writer: OutboxWriter
        let reserve = DiskSetup.reserve(settings)
        // Not ready until the group runs, nor once it drains, nor while the disk is full or the store probe fails or
        // has not answered for longer than a busy store may take.
        let readiness = Readiness(storeStaleAfter: settings.storeBusyTimeout + .seconds(3))
        state.withLock { $0.readiness = readiness }
        let waiting = StartWait(notifier: notifier, logger: logger, reserve: reserve, readiness: readiness)
        do {
            try FileManager.default.createDirectory(
                atPath: (settings.storePath as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            lock = try StoreLock(storePath: settings.storePath)
            // Made now while there is room (a start on a full disk goes without until the disk watch can make it).
            try? reserve?.make()
            if let location = settings.storeURL {
                let daemon = DaemonIdentity(host: ProcessInfo.processInfo.hostName, pid: Int(getpid()), started: Date())
                let postgres = try await waiting.retrying("open \(location)") {
                    try await PostgresStore.open(
                        location, password: settings.storePassword, connections: settings.engine.maxConcurrency + 4, daemon: daemon,
                        transactionIdleLimit: settings.leaseTime, logger: logger)
                }
                store = postgres
                shared = postgres
            } else {
                store = try await waiting.retrying("open \(settings.storePath)") {
                    try SQLiteStore(path: settings.storePath, busyTimeout: settings.storeBusyTimeout, reserve: reserve)
                }
            }
            writer = try OutboxWriter(directory: settings.outboxDirectory)
        } catch let error as StoreLock.Held {
            throw StartFailure("cannot start: \(error)", errno: EBUSY)
        } catch let problem as PostgresProblem {
            throw StartFailure("cannot start: \(problem)", errno: problem.kind == .inUse ? EBUSY : EIO, exitCode: problem.kind.exitCode)
        } catch {
            throw StartFailure("cannot start: \(error)", errno: EIO)
        }

        let watchdog = SystemdNotifier.watchdogInterval()
        let beat = Supervisor.heartbeatInterval(watchdog: watchdog)
        let clock = SystemClock()
        let transport = CurlTransport(
            configuration: .init(
                connectTimeout: settings.connectTimeout, requestTimeout: settings.requestTimeout,
                userAgent: KlarnaClient.userAgent(libcurl: CurlTransport.libcurlVersion)))
        defer { transport.shutdown() }
        let outcomeBell = Doorbell()
        // Per account: its client (hosts, credentials) and its rate budget, shared out among the live daemons.
        var budgets: [AccountID: BudgetShare] = [:]
        let accounts = KlarnaAccounts(
            settings.accounts.map { account in
                let limiter = RateLimiter(ratePerSecond: account.ratePerSecond, burst: account.rateBurst, clock: clock)
                budgets[account.id] = BudgetShare(limiter: limiter, ratePerSecond: account.ratePerSecond, burst: account.rateBurst)
                return KlarnaAccount(
                    id: account.id, client: KlarnaClient(configuration: account.klarna, transport: transport, logger: logger, account: account.id),
                    rateLimiter: limiter)
            })
        let shares = budgets
        let scheduler = Scheduler()
        let leases = shared.map { shared in
            LeaseKeeper(
                store: shared,
                settings: .init(ttl: settings.leaseTime, longestCall: settings.engine.longestCall, poll: settings.engine.wakeupInterval),
                scheduler: scheduler, clock: clock, logger: logger, onLiveDaemons: { count in shares.values.forEach { $0.daemons(count) } })
        }
        let disk = DiskGuard(watermark: DiskWatermark(minFreeBytes: settings.diskMinFreeBytes))
        let reconciler = Reconciler(
            store: store, accounts: accounts, clock: clock, settings: settings.engine, logger: logger, outcomeBell: outcomeBell, ownership: leases,
            disk: disk)
        let workLoopBeat = Heartbeat(name: "work loop", interval: beat)
        let workers = WorkerService(
            reconciler: reconciler, queue: store, scheduler: scheduler, logger: logger, heartbeat: workLoopBeat, leases: leases,
            wedgeFile: settings.wedgeWorkLoopFile)
        // Something for a key arrived here (a delivery, an operator request): with leases, its holder acts on it.
        let wake: @Sendable ([WorkKey], AccountID?) async -> Void = { keys, account in
            for key in keys {
                if let leases { await leases.hint(key) } else { await scheduler.wake(key, at: clock.now, account: account) }
            }
        }
        let notify = settings.notifyURL.map {
            OutcomeNotifier(
                url: $0, transport: transport,
                retry: RetryPolicy(initialDelay: .seconds(2), maxDelay: .seconds(600), maxAttempts: settings.notifyMaxAttempts),
                timeout: settings.notifyTimeout)
        }
        let delivery = OutcomeDeliveryService(
            store: store, writer: writer, notifier: notify, clock: clock, bell: outcomeBell, logger: logger)
        // Payouts matched against the ledger, one service per account with `settlements.enabled`, behind all payment
        // work in that account's rate budget.
        let settlements = settings.accounts.filter(\.settlementsEnabled).compactMap { accounts[$0.id] }.map { account in
            SettlementService(
                store: store, client: account.client, clock: clock, rateLimiter: account.rateLimiter, settings: settings.settlements,
                logger: logger, outcomeBell: outcomeBell, account: account.id)
        }
        // Klarna's disputes and their deadlines, read behind payment work: one service per account with `disputes.enabled`.
        let disputes = settings.accounts.filter(\.disputesEnabled).compactMap { accounts[$0.id] }.map { account in
            DisputeService(
                store: store, client: account.client, clock: clock, rateLimiter: account.rateLimiter, settings: settings.disputes, logger: logger,
                outcomeBell: outcomeBell, account: account.id)
        }
        let disputeBells = DisputeBells(Dictionary(uniqueKeysWithValues: disputes.map { ($0.account, $0.bell) }))

        let diskWatch = DiskWatch(guarding: disk, directories: DiskSetup.directories(settings), reserve: reserve, logger: logger) { pressure in
            readiness.disk(pressure)
            // The work loop waits for space on the scheduler's doorbell.
            scheduler.doorbell.ring()
            _ = notifier.status(pressure?.summary ?? "disk space is back")
        }
        // A first look before anything is taken: a start on a full disk refuses deliveries from the first one.
        diskWatch.check()
        let ingestor = Ingestor(
            rules: Self.ingestRules(settings), store: store, clock: clock, logger: logger, disputeBells: disputeBells, disk: disk, wake: wake)
        var heartbeats = [workLoopBeat]
        var spoolService: SpoolService?
        if let directory = settings.spoolDirectory {
            let spool = Spool(directory: directory, maxFileBytes: settings.ingestMaxBodyBytes + (64 << 10), keepDone: settings.spoolKeepDone)
            do {
                try spool.prepare()
            } catch {
                throw StartFailure("cannot prepare the spool \(directory): \(error)", errno: EIO)
            }
            let spoolLoop = Heartbeat(name: "spool loop", interval: beat)
            heartbeats.append(spoolLoop)
            spoolService = SpoolService(
                spool: spool, ingestor: ingestor, rescanInterval: settings.spoolRescanInterval, clock: clock, logger: logger, heartbeat: spoolLoop)
        }
        let started = ContinuousClock.now
        // Filled once the probes exist: the listeners are bound first, and /v1/health reports on every loop.
        let loops = Live<[Heartbeat]>(heartbeats)
        let gauges = StateGauges(store: store, spoolDirectory: settings.spoolDirectory)
        let control = ControlEndpoints(
            health: {
                HealthReport(
                    heartbeats: loops.value, stallAfter: watchdog ?? beat * 4, phase: readiness.report().phase, uptime: .now - started,
                    open: await scheduler.scheduledCount + scheduler.runningCount, running: await scheduler.runningCount,
                    backlog: await scheduler.backlog(now: clock.now))
            },
            readiness: readiness,
            metrics: {
                await gauges.update(now: clock.now, backlog: await scheduler.backlog(now: clock.now), ready: readiness.report().ready)
                return MetricsExposition.text(of: options.metrics)
            }, disk: disk)
        let desk = OperatorDesk(store: store, wake: { keys in await wake(keys, nil) }, disputeBells: disputeBells)
        let servers: [HTTPServer]
        do {
            servers = try await Self.listen(
                settings, handler: IngestHTTP.handler(ingestor, control: control),
                control: ControlHTTP.handler(
                    desk: desk, control: control, reports: store,
                    tokens: TokenDesk(store: store, accounts: accounts, wake: { keys in await wake(keys, nil) })),
                refused: { _ = await ingestor.refuse(Rejection($0.status, $0.error, $0.detail), source: "socket") }, logger: logger)
        } catch {
            throw StartFailure("cannot listen for deliveries: \(error)", errno: EADDRNOTAVAIL)
        }
        var monitoringServer: HTTPServer?
        if let listen = settings.metricsListen, let address = ListenAddress(parsing: listen) {
            do {
                monitoringServer = try await HTTPServer.bind(address, logger: logger, handler: IngestHTTP.monitoringHandler(control: control))
            } catch {
                throw StartFailure("cannot listen on metrics.listen \(listen): \(error)", errno: EADDRNOTAVAIL)
            }
        }

        // The open work, loaded before READY. A store that cannot be written yet (a full disk, a server refusing
        // writes) does not fail the start: the daemon comes up not ready (/v1/ready and STATUS= say why), and the
        // work loop loads it in its place once the store takes writes.
        let loading = "read open work from \(settings.storeDescription)"
        var workLoop: any Service = workers
        do {
            _ = try await workers.loadOpenWork()
        } catch  where StartWait.waitsOut(error) {
            readiness.waitingForStore("\(error)")
            logger.error(
                "cannot \(loading) yet (\(error)): the daemon starts not ready and loads it once the store takes writes",
                metadata: [MessageID.metadataKey: .string(MessageID.storeWaiting.rawValue)])
            var waiting = waiting
            waiting.heartbeat = workLoopBeat
            workLoop = WorkersAfterStore(workers: workers, waiting: waiting, what: loading)
        } catch let problem as PostgresProblem {
            throw StartFailure("cannot start: \(problem)", errno: problem.kind == .inUse ? EBUSY : EIO, exitCode: problem.kind.exitCode)
        } catch {
            throw StartFailure("cannot \(loading): \(error)", errno: EIO)
        }
        readiness.storeAnswered()  // it just answered, or the wait says why not

        // Probed from the supervisor: the store answers a query and a write passes, each listener's event loop runs
        // a task. An answer that is an error (a full disk) still proves nothing hangs (a restart would not mend
        // it), but it makes the daemon not ready. Every second at most, so readiness follows an outage closely.
        let probes =
            [
                Supervisor.Probe(heartbeat: Heartbeat(name: "store", interval: min(beat, .seconds(1)))) {
                    do {
                        _ = try await store.liveStatus()
                        try await store.probeWrites()
                        readiness.storeAnswered()
                    } catch {
                        readiness.storeFailed("\(error)")
                    }
                }
            ]
            + servers.map { server in
                Supervisor.Probe(heartbeat: Heartbeat(name: "listener \(server.localAddress)", interval: beat)) { await server.probe() }
            }
        loops.replace(with: heartbeats + probes.map(\.heartbeat))
        let supervisor = Supervisor(
            notifier: notifier, watchdog: watchdog, heartbeats: heartbeats, probes: probes, statusInterval: settings.statusInterval,
            drainLimit: settings.drainTimeout, logger: logger
        ) { await Self.status(store: store, scheduler: scheduler, clock: clock, disk: disk) }
        // Registered before READY: systemd may send SIGHUP (a reload) the moment the unit is active.
        let hangups = options.handlesSignals ? await UnixSignalsSequence(trapping: .sighup) : nil
        let reload = ReloadService(
            requests: reloads, hangups: hangups, configPath: options.configPath, environment: options.environment, running: settings,
            store: store, notifier: notifier, logger: logger,
            status: { await Self.status(store: store, scheduler: scheduler, clock: clock, disk: disk) }
        ) { new in
            reconciler.update(settings: new.engine)
            for account in new.accounts { shares[account.id]?.configure(ratePerSecond: account.ratePerSecond, burst: account.rateBurst) }
            settlements.forEach { $0.update(settings: new.settlements) }
            disputes.forEach { $0.update(settings: new.disputes) }
            // The accounts, their ids and merchant ids are the ones the engine started with (a restart changes them);
            // a reload brings their capture policies.
            ingestor.update(Self.ingestRules(new, accounts: settings.accounts))
            options.logLevel.value = new.logLevel
        }

        let listening = servers.map { "\($0.localAddress)" }.joined(separator: ", ")
        let status =
            "ready: \(await scheduler.scheduledCount) open; store \(settings.storeDescription)"
            + (listening.isEmpty ? "" : "; listening on \(listening)")
        var readyLogger = logger
        readyLogger[metadataKey: "klarna_base_url"] = .string(settings.accounts.map(\.klarna.baseURL).joined(separator: " "))
        // Started in this order, told to stop in reverse: announce the stop (not ready), stop reading the spool, let
        // the workers finish their step, close the listeners, flush outcomes; the supervisor keeps systemd informed
        // to the end. The listeners stop after the workers: while the workers drain, /v1/ready answers 503 and a
        // delivery is still committed before its 202 (the next start acts on it).
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: supervisor), .init(service: diskWatch), .init(service: delivery),
        ]
        for server in servers + (monitoringServer.map { [$0] } ?? []) { services.append(.init(service: ServerService(server: server))) }
        // The lease keeper stops after the workers (reverse order): it renews while they finish their steps, then
        // hands the leases back.
        if let leases { services.append(.init(service: leases)) }
        services.append(.init(service: workLoop))
        if let spoolService { services.append(.init(service: spoolService)) }
        let pruner = Pruner(
            store: store, policy: settings.retention, doneDirectory: settings.spoolDirectory.map { "\($0)/done" },
            acknowledgedDirectory: settings.outboxDirectory + "/cur", clock: clock)
        services += settlements.map { .init(service: $0) } + disputes.map { .init(service: $0) }
        services += [
            .init(service: reload),
            .init(service: RetentionService(pruner: pruner, interval: settings.retentionInterval, logger: logger)),
            .init(service: LifecycleAnnouncer(notifier: notifier, status: status, logger: readyLogger, supervisor: supervisor, readiness: readiness)),
        ]
        var configuration = ServiceGroupConfiguration(
            services: services,
            gracefulShutdownSignals: options.handlesSignals ? [.sigterm, .sigint] : [], logger: logger)
        configuration.maximumGracefulShutdownDuration = settings.drainTimeout
        let group = ServiceGroup(configuration: configuration)
        let stopAsked = state.withLock { state in
            state.group = group
            return state.stopAsked
        }
        // A stop asked for while starting: the group runs and drains at once, so that what was started (listeners,
        // the store) is closed the usual way. (A shutdown triggered before `run()` is kept since
        // swift-service-lifecycle 2.13.)
        if stopAsked { await group.triggerGracefulShutdown() }
        do {
            try await group.run()
        } catch {
            throw StartFailure("stopped on an error: \(error)", errno: EIO)
        }
        withExtendedLifetime(lock) {}
        logger.notice("klarna-reconciler stopped", metadata: [MessageID.metadataKey: .string(MessageID.stopped.rawValue)])
    }

    /// swift-metrics counts into this registry from here on; `/metrics` prints it. Latency buckets from 1 ms (a
    /// commit, a fast call) to 30 s (a Klarna timeout).
    public static func bootstrapMetrics() -> PrometheusCollectorRegistry {
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = [
            .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
            .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2_500), .seconds(5), .seconds(10), .seconds(30),
        ]
        MetricsSystem.bootstrap(factory)
        return registry
    }

    static func ingestRules(_ settings: Settings, accounts running: [AccountSettings]? = nil) -> Ingestor.Rules {
        let accounts = (running ?? settings.accounts).map { started in
            AccountRouting.Account(
                id: started.id, merchantID: started.merchantID, capturePolicy: (settings.account(started.id) ?? started).capturePolicy)
        }
        return
            Ingestor.Rules(
                reader: WebhookReader(
                    tokens: settings.callbackKey.map(CallbackTokens.init(key:)),
                    policy: CallbackPolicy(rawValue: settings.callbackPolicy) ?? .require,
                    signingKeys: SigningKeys(settings.signingKeys)),
                accounts: AccountRouting(accounts))
    }

    /// The ingest listeners: the socket systemd passed (socket activation), else the configured path; and the
    /// optional loopback TCP port.
    /// `refused`: told of the ingest requests the server refuses before the handler (413), to record them.
    static func listen(
        _ settings: Settings, handler: @escaping RequestHandler, control: @escaping RequestHandler,
        refused: @escaping @Sendable (HTTPServer.Refusal) async -> Void, logger: Logger
    ) async throws -> [HTTPServer] {
        var servers: [HTTPServer] = []
        let configuration = HTTPServer.Configuration(
            maxBodyBytes: settings.ingestMaxBodyBytes, requestTimeout: settings.ingestRequestTimeout, maxConnections: settings.ingestMaxConnections)
        var ingest = configuration
        ingest.refused = refused
        let passed = ListenFDs.take()
        // The operators' socket: systemd's (klarna-reconciler-control.socket), else control.socket.
        if let socket = passed.controlSocket() {
            guard socket.isUnixStreamListener else {
                throw SocketPermissions.Failed(description: "the socket systemd passed as control is not a listening unix stream socket")
            }
            servers.append(
                try await HTTPServer.bind(.adopted(descriptor: socket.descriptor), configuration: configuration, logger: logger, handler: control))
        } else if let path = settings.controlSocket {
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            servers.append(try await HTTPServer.bind(.unix(path: path), configuration: configuration, logger: logger, handler: control))
            try SocketPermissions.apply(path: path, group: settings.controlSocketGroup)
        }
        if passed.sockets.contains(where: { $0.name != "control" }) {
            // Socket activation: systemd bound the socket (mode and group from the .socket unit) and may hold
            // connections that arrived before we started.
            guard let socket = passed.ingestSocket(), socket.isUnixStreamListener else {
                throw SocketPermissions.Failed(
                    description:
                        "systemd passed \(passed.sockets.count) sockets (\(passed.sockets.map(\.name).joined(separator: ", "))) but none is a listening unix stream socket named ingest"
                )
            }
            servers.append(
                try await HTTPServer.bind(.adopted(descriptor: socket.descriptor), configuration: ingest, logger: logger, handler: handler))
        } else if let path = settings.ingestSocket {
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            servers.append(try await HTTPServer.bind(.unix(path: path), configuration: ingest, logger: logger, handler: handler))
            try SocketPermissions.apply(path: path, group: settings.ingestSocketGroup)
        }
        if let listen = settings.ingestListen, let address = ListenAddress(parsing: listen) {
            servers.append(try await HTTPServer.bind(address, configuration: ingest, logger: logger, handler: handler))
        }
        return servers
    }

    /// `STATUS=`: one short line of live state.
    static func status(store: any StoreHealth, scheduler: Scheduler, clock: any WallClock, disk: DiskGuard) async -> String {
        let open = await scheduler.scheduledCount + scheduler.runningCount
        let backlog = await scheduler.backlog(now: clock.now)
        if let pressure = disk.pressure { return "\(pressure.summary); \(open) open, backlog \(backlog)" }
        guard let live = try? await store.liveStatus() else { return "\(open) open, backlog \(backlog); store not answering" }
        var klarna = "Klarna ok"
        if let failed = live.lastKlarnaError, live.lastKlarnaSuccess.map({ $0 < failed }) ?? true {
            klarna = "last Klarna error \(failed.formatted(.iso8601.time(includingFractionalSeconds: false))): \(live.lastKlarnaErrorDetail ?? "?")"
        }
        return "\(open) open, \(live.unfinishedIntents) side effects unfinished, backlog \(backlog); \(klarna)"
    }
}
