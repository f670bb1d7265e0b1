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

    struct State {
        var group: ServiceGroup?
        var readiness: Readiness?
        var stopAsked = false
    }

    let options: Options
    let state = Mutex(State())
    let reloads = ReloadRequests()

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
        let settings: Settings
        do {
            settings = try await Settings.load(configPath: options.configPath, environment: options.environment, needsKlarnaPassword: true)
        } catch {
            throw StartFailure("config error: \(error)", errno: EINVAL, exitCode: 78)
        }
        options.logLevel.value = settings.logLevel
        let transport = CurlTransport(
            configuration: .init(
                connectTimeout: settings.connectTimeout, requestTimeout: settings.requestTimeout,
                userAgent: KlarnaClient.userAgent(libcurl: CurlTransport.libcurlVersion)))
        defer { transport.shutdown() }
        let assembly = try await assemble(settings, transport: transport, notifier: SystemdNotifier())
        try await run(assembly)
    }

    /// Runs the assembled services until they stop: started in their order, told to stop in reverse.
    private func run(_ assembly: Assembly) async throws {
        let logger = options.logger
        var configuration = ServiceGroupConfiguration(
            services: assembly.services,
            gracefulShutdownSignals: options.handlesSignals ? [.sigterm, .sigint] : [], logger: logger)
        configuration.maximumGracefulShutdownDuration = assembly.drainLimit
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
        withExtendedLifetime(assembly.lock) {}
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
