import Foundation
import Logging
import ReconcilerCore
import ReconcilerStore
import ServiceLifecycle
import Settings
import SystemdSupport
import UnixSignals

/// A reload (SIGHUP, or ``ReconcilerDaemon/reload()``): `RELOADING=1`, read and validate the file and credentials
/// again, apply what can change live, answer the `reload` commands waiting in the store, `READY=1`. An invalid file
/// changes nothing.
struct ReloadService: Service {
    let requests: ReloadRequests
    let hangups: UnixSignalsSequence?
    let configPath: String
    let environment: [String: String]
    let store: any ReloadMailbox
    let notifier: SystemdNotifier
    let logger: Logger
    let status: @Sendable () async -> String
    let apply: @Sendable (Settings) -> Void
    /// What the daemon started with: a setting that differs from it and is not live still waits for a restart.
    private let started: Settings
    /// What the last reload applied, to say what this one changes.
    private let applied: Live<Settings>

    init(
        requests: ReloadRequests, hangups: UnixSignalsSequence?, configPath: String, environment: [String: String], running: Settings,
        store: any ReloadMailbox,
        notifier: SystemdNotifier, logger: Logger, status: @escaping @Sendable () async -> String, apply: @escaping @Sendable (Settings) -> Void
    ) {
        self.requests = requests
        self.hangups = hangups
        self.configPath = configPath
        self.environment = environment
        started = running
        applied = Live(running)
        self.store = store
        self.notifier = notifier
        self.logger = logger
        self.status = status
        self.apply = apply
    }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                if let hangups {
                    group.addTask { for await _ in hangups { requests.ask() } }
                }
                for await _ in requests.stream { await reload() }
                group.cancelAll()
            }
        }
    }

    func reload() async {
        notifier.reloading(status: "reloading \(configPath)")
        // Requests recorded before this point are answered by this reload; later ones send their own SIGHUP.
        let through = try? await store.newestReloadRequest()
        let ok: Bool
        let message: String
        do {
            let new = try await Settings.load(configPath: configPath, environment: environment, needsKlarnaPassword: true)
            let live = new.changes(from: applied.value).live
            let restart = new.changes(from: started).restart
            apply(new)
            applied.replace(with: new)
            ok = true
            message =
                "reloaded \(configPath): " + (live.isEmpty ? "no live setting changed" : "applied \(live.joined(separator: ", "))")
                + (restart.isEmpty ? "" : "; takes a restart: \(restart.joined(separator: ", "))")
            logger.notice("\(message)", metadata: [MessageID.metadataKey: .string(MessageID.reloaded.rawValue)])
        } catch {
            ok = false
            message = "reload refused, the running configuration stays: \(error)"
            logger.error("\(message)", metadata: [MessageID.metadataKey: .string(MessageID.reloadFailed.rawValue)])
        }
        if let through {
            do {
                try await store.answerReloads(through: through, ok: ok, message: message, at: Date())
            } catch {
                logger.error("cannot record the reload's answer: \(error)")
            }
        }
        notifier.ready(status: await status())
    }
}

/// Where reloads are asked for (SIGHUP, ``ReconcilerDaemon/reload()``), taken one at a time: asks that arrive during a
/// reload are answered by one more.
final class ReloadRequests: Sendable {
    let stream: AsyncStream<Void>
    private let continuation: AsyncStream<Void>.Continuation

    init() {
        (stream, continuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    func ask() { continuation.yield() }
}
