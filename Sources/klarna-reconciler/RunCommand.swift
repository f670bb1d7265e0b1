import ArgumentParser
import Engine
import Foundation
import HTTPServer
import Ingest
import KlarnaAPI
import Logging
import ReconcilerCore
import ReconcilerStore
import ServiceLifecycle
import Settings
import SystemdSupport

struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Runs the daemon: tracks sessions, places and captures orders, writes outcomes to the outbox."
    )

    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: true)
        var logger = Logger(label: "klarna-reconciler")
        logger.logLevel = settings.logLevel
        let notifier = SystemdNotifier()

        func fail(_ message: String) -> ExitCode {
            logger.critical("\(message)")
            notifier.notify(["STATUS": message])
            return ExitCode.failure
        }

        let lock: StoreLock
        let store: SQLiteStore
        let writer: OutboxWriter
        do {
            try FileManager.default.createDirectory(
                atPath: (settings.storePath as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            lock = try StoreLock(storePath: settings.storePath)
            store = try SQLiteStore(path: settings.storePath, busyTimeout: settings.storeBusyTimeout)
            writer = try OutboxWriter(directory: settings.outboxDirectory)
        } catch {
            throw fail("cannot start: \(error)")
        }

        let clock = SystemClock()
        let transport = CurlTransport(configuration: .init(
            connectTimeout: settings.connectTimeout, requestTimeout: settings.requestTimeout,
            userAgent: KlarnaClient.userAgent(libcurl: CurlTransport.libcurlVersion)))
        defer { transport.shutdown() }
        let client = KlarnaClient(configuration: settings.klarna, transport: transport, logger: logger)
        let outcomeBell = Doorbell()
        let reconciler = Reconciler(
            store: store, client: client, clock: clock,
            rateLimiter: RateLimiter(ratePerSecond: settings.ratePerSecond, burst: settings.rateBurst, clock: clock),
            settings: settings.engine, logger: logger, outcomeBell: outcomeBell)
        let scheduler = Scheduler()
        let workers = WorkerService(reconciler: reconciler, scheduler: scheduler, logger: logger)
        let notify = settings.notifyURL.map {
            OutcomeNotifier(
                url: $0, transport: transport,
                retry: RetryPolicy(initialDelay: .seconds(2), maxDelay: .seconds(600), maxAttempts: settings.notifyMaxAttempts),
                timeout: settings.notifyTimeout)
        }
        let delivery = OutcomeDeliveryService(
            store: store, writer: writer, notifier: notify, clock: clock, bell: outcomeBell, logger: logger)

        let open: Int
        do {
            open = try await workers.loadOpenWork()
        } catch {
            throw fail("cannot read open work from \(settings.storePath): \(error)")
        }
        let ingestor = Ingestor(
            reader: WebhookReader(
                tokens: settings.callbackKey.map(CallbackTokens.init(key:)), policy: CallbackPolicy(rawValue: settings.callbackPolicy) ?? .require,
                signingKeys: SigningKeys(settings.signingKeys)),
            store: store, defaultCapturePolicy: settings.defaultCapturePolicy, clock: clock, logger: logger,
            wake: { keys in for key in keys { await scheduler.wake(key, at: clock.now) } })
        var spoolService: SpoolService?
        if let directory = settings.spoolDirectory {
            let spool = Spool(directory: directory, maxFileBytes: settings.ingestMaxBodyBytes + (64 << 10), keepDone: settings.spoolKeepDone)
            do {
                try spool.prepare()
            } catch {
                throw fail("cannot prepare the spool \(directory): \(error)")
            }
            spoolService = SpoolService(spool: spool, ingestor: ingestor, rescanInterval: settings.spoolRescanInterval, clock: clock, logger: logger)
        }
        var servers: [HTTPServer] = []
        do {
            let configuration = HTTPServer.Configuration(
                maxBodyBytes: settings.ingestMaxBodyBytes, requestTimeout: settings.ingestRequestTimeout, maxConnections: settings.ingestMaxConnections)
            let handler = IngestHTTP.handler(ingestor, store: store)
            let passed = ListenFDs.take()
            if !passed.sockets.isEmpty {
                // Socket activation: systemd bound the socket (mode and group from the .socket unit) and may hold
                // connections that arrived before we started.
                guard let socket = passed.ingestSocket(), socket.isUnixStreamListener else {
                    throw SocketPermissions.Failed(description: "systemd passed \(passed.sockets.count) sockets (\(passed.sockets.map(\.name).joined(separator: ", "))) but none is a listening unix stream socket named ingest")
                }
                servers.append(try await HTTPServer.bind(.adopted(descriptor: socket.descriptor), configuration: configuration, logger: logger, handler: handler))
            } else if let path = settings.ingestSocket {
                try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                servers.append(try await HTTPServer.bind(.unix(path: path), configuration: configuration, logger: logger, handler: handler))
                try SocketPermissions.apply(path: path, group: settings.ingestSocketGroup)
            }
            if let listen = settings.ingestListen, let address = ListenAddress(parsing: listen) {
                servers.append(try await HTTPServer.bind(address, configuration: configuration, logger: logger, handler: handler))
            }
        } catch {
            throw fail("cannot listen for deliveries: \(error)")
        }
        let listening = servers.map { "\($0.localAddress)" }.joined(separator: ", ")
        let status = "tracking \(open) open sessions and orders; store \(settings.storePath)" + (listening.isEmpty ? "" : "; listening on \(listening)")
        var readyLogger = logger
        readyLogger[metadataKey: "klarna_base_url"] = .string(settings.klarna.baseURL)
        let group = ServiceGroup(configuration: .init(
            services: [
                // Started in this order; shut down in reverse: announce, let the workers finish their step, then
                // flush outcomes.
                .init(service: delivery),
                .init(service: workers),
            ] + servers.map { .init(service: ServerService(server: $0)) } + (spoolService.map { [.init(service: $0)] } ?? []) + [
                .init(service: LifecycleAnnouncer(notifier: notifier, status: status, logger: readyLogger)),
            ],
            gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
        withExtendedLifetime(lock) {}
        logger.notice("klarna-reconciler stopped")
    }
}

/// READY=1 once the group runs (its signal handlers are installed before any service starts, so a SIGTERM right
/// after READY is a graceful stop, never a kill), and STOPPING=1 the moment graceful shutdown begins, while the
/// workers finish their current step.
struct LifecycleAnnouncer: Service {
    let notifier: SystemdNotifier
    let status: String
    let logger: Logger

    func run() async throws {
        logger.notice("klarna-reconciler \(ProductInfo.version) ready: \(status)")
        notifier.ready(status: status)
        await withGracefulShutdownHandler {
            try? await gracefulShutdown()
        } onGracefulShutdown: {
            logger.notice("stopping: finishing the steps under way")
            notifier.stopping(status: "stopping: finishing the steps under way")
        }
    }
}

/// The ingest socket is for the daemon and the forwarders' group only: mode 0660, group from config.
enum SocketPermissions {
    struct Failed: Error, CustomStringConvertible {
        let description: String
    }

    static func apply(path: String, group: String?) throws {
        guard chmod(path, 0o660) == 0 else { throw Failed(description: "cannot chmod \(path): \(String(cString: strerror(errno)))") }
        guard let group else { return }
        guard let entry = getgrnam(group) else { throw Failed(description: "no group named \(group)") }
        guard chown(path, uid_t.max, entry.pointee.gr_gid) == 0 else {
            throw Failed(description: "cannot give \(path) to group \(group): \(String(cString: strerror(errno)))")
        }
    }
}
