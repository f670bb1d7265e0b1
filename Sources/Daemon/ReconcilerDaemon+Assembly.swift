import Engine
import Foundation
import Glibc
import HTTPServer
import Ingest
import KlarnaAPI
import Logging
import PostgresBackend
import ReconcilerCore
import ReconcilerStore
import SQLiteBackend
import ServiceLifecycle
import Settings
import SystemdSupport
import UnixSignals

/// The daemon's parts, made from its settings and wired together: what ``ReconcilerDaemon/run()`` then runs.
extension ReconcilerDaemon {
    /// The services in the order they start (they stop in reverse), and what must outlive them.
    struct Assembly {
        var services: [ServiceGroupConfiguration.ServiceConfiguration]
        /// Held while the services run: one daemon per host and configuration.
        let lock: StoreLock
        /// How long the services may take to stop.
        let drainLimit: Duration
    }

    /// The store opened under its lock, and the outbox.
    struct OpenedStore {
        let lock: StoreLock
        let store: any ReconcilerStore
        /// The same store when daemons share it (PostgreSQL): the leases go through it.
        let shared: (any LeaseStore)?
        let writer: OutboxWriter
    }

    /// Everything the daemon runs, made and wired: the store, the accounts, the engine, ingest, the listeners, the
    /// supervisor and reloads. Throws ``StartFailure`` for what keeps the daemon from starting.
    func assemble(_ settings: Settings, transport: CurlTransport, notifier: SystemdNotifier) async throws -> Assembly {
        let options = self.options
        let logger = options.logger
        let reserve = DiskSetup.reserve(settings)
        // Not ready until the group runs, nor once it drains, nor while the disk is full or the store probe fails or
        // has not answered for longer than a busy store may take.
        let readiness = Readiness(storeStaleAfter: settings.storeBusyTimeout + .seconds(3))
        state.withLock { $0.readiness = readiness }
        let waiting = StartWait(notifier: notifier, logger: logger, reserve: reserve, readiness: readiness)
        let opened = try await Self.openStore(settings, waiting: waiting, reserve: reserve, logger: logger)
        let store = opened.store

        let watchdog = SystemdNotifier.watchdogInterval()
        let beat = Supervisor.heartbeatInterval(watchdog: watchdog)
        let clock = SystemClock()
        let outcomeBell = Doorbell()
        let (accounts, shares) = Self.klarnaAccounts(settings, transport: transport, clock: clock, logger: logger)
        let scheduler = Scheduler()
        let leases = opened.shared.map { shared in
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
            store: store, writer: opened.writer, notifier: notify, clock: clock, bell: outcomeBell, logger: logger)
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

        let workLoop = try await Self.workLoop(workers, settings: settings, waiting: waiting, heartbeat: workLoopBeat, logger: logger)
        readiness.storeAnswered()  // it just answered, or the wait says why not
        let probes = Self.probes(store: store, servers: servers, readiness: readiness, beat: beat)
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
        return Assembly(services: services, lock: opened.lock, drainLimit: settings.drainTimeout)
    }

    /// The store under its lock, and the outbox. The lock beside store.path is taken whichever store is used: one
    /// daemon per host and configuration, and the pid `reload` signals. With PostgreSQL, daemons on other hosts
    /// share the work by leases. A store that cannot be opened for a reason that passes (a full disk, a server
    /// refusing writes) is waited for.
    static func openStore(_ settings: Settings, waiting: StartWait, reserve: ReserveFile?, logger: Logger) async throws -> OpenedStore {
        do {
            try FileManager.default.createDirectory(
                atPath: (settings.storePath as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            let lock = try StoreLock(storePath: settings.storePath)
            // Made now while there is room (a start on a full disk goes without until the disk watch can make it).
            try? reserve?.make()
            let store: any ReconcilerStore
            var shared: (any LeaseStore)?
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
            return OpenedStore(lock: lock, store: store, shared: shared, writer: try OutboxWriter(directory: settings.outboxDirectory))
        } catch let error as StoreLock.Held {
            throw StartFailure("cannot start: \(error)", errno: EBUSY)
        } catch let problem as PostgresProblem {
            throw StartFailure("cannot start: \(problem)", errno: problem.kind == .inUse ? EBUSY : EIO, exitCode: problem.kind.exitCode)
        } catch {
            throw StartFailure("cannot start: \(error)", errno: EIO)
        }
    }

    /// Per account: its client (hosts, credentials) and its rate budget, shared out among the live daemons.
    static func klarnaAccounts(
        _ settings: Settings, transport: CurlTransport, clock: SystemClock, logger: Logger
    ) -> (KlarnaAccounts, [AccountID: BudgetShare]) {
        var budgets: [AccountID: BudgetShare] = [:]
        let accounts = KlarnaAccounts(
            settings.accounts.map { account in
                let limiter = RateLimiter(ratePerSecond: account.ratePerSecond, burst: account.rateBurst, clock: clock)
                budgets[account.id] = BudgetShare(limiter: limiter, ratePerSecond: account.ratePerSecond, burst: account.rateBurst)
                return KlarnaAccount(
                    id: account.id, client: KlarnaClient(configuration: account.klarna, transport: transport, logger: logger, account: account.id),
                    rateLimiter: limiter)
            })
        return (accounts, budgets)
    }

    /// The work loop, with the open work loaded before READY. A store that cannot be written yet (a full disk, a
    /// server refusing writes) does not fail the start: the daemon comes up not ready (/v1/ready and STATUS= say
    /// why), and the work loop loads it in its place once the store takes writes.
    static func workLoop(
        _ workers: WorkerService, settings: Settings, waiting: StartWait, heartbeat: Heartbeat, logger: Logger
    ) async throws -> any Service {
        let loading = "read open work from \(settings.storeDescription)"
        do {
            _ = try await workers.loadOpenWork()
            return workers
        } catch  where StartWait.waitsOut(error) {
            waiting.readiness.waitingForStore("\(error)")
            logger.error(
                "cannot \(loading) yet (\(error)): the daemon starts not ready and loads it once the store takes writes",
                metadata: [MessageID.metadataKey: .string(MessageID.storeWaiting.rawValue)])
            var waiting = waiting
            waiting.heartbeat = heartbeat
            return WorkersAfterStore(workers: workers, waiting: waiting, what: loading)
        } catch let problem as PostgresProblem {
            throw StartFailure("cannot start: \(problem)", errno: problem.kind == .inUse ? EBUSY : EIO, exitCode: problem.kind.exitCode)
        } catch {
            throw StartFailure("cannot \(loading): \(error)", errno: EIO)
        }
    }

    /// Probed from the supervisor: the store answers a query and a write passes, each listener's event loop runs a
    /// task. An answer that is an error (a full disk) still proves nothing hangs (a restart would not mend it), but
    /// it makes the daemon not ready. Every second at most, so readiness follows an outage closely.
    static func probes(store: any ReconcilerStore, servers: [HTTPServer], readiness: Readiness, beat: Duration) -> [Supervisor.Probe] {
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
    }
}
