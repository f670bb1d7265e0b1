import ArgumentParser
import Foundation
import Logging
import ReconcilerCore
import ReconcilerStore
import ServiceLifecycle
import Settings
import SystemdSupport
import UnixSignals

/// SIGHUP reloads the configuration: `RELOADING=1`, read and validate the file and credentials again, apply what can
/// change live, answer the `reload` commands waiting in the store, `READY=1`. An invalid file changes nothing.
struct ReloadService: Service {
    let signals: UnixSignalsSequence
    let configPath: String
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
        signals: UnixSignalsSequence, configPath: String, running: Settings, store: any ReloadMailbox, notifier: SystemdNotifier,
        logger: Logger, status: @escaping @Sendable () async -> String, apply: @escaping @Sendable (Settings) -> Void
    ) {
        self.signals = signals
        self.configPath = configPath
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
            for await _ in signals { await reload() }
        }
    }

    func reload() async {
        notifier.reloading(status: "reloading \(configPath)")
        // Requests recorded before this point are answered by this reload; later ones send their own SIGHUP.
        let through = try? await store.newestReloadRequest()
        let ok: Bool
        let message: String
        do {
            let new = try await Settings.load(configPath: configPath, needsKlarnaPassword: true)
            let live = new.changes(from: applied.value).live
            let restart = new.changes(from: started).restart
            apply(new)
            applied.replace(with: new)
            ok = true
            message = "reloaded \(configPath): " + (live.isEmpty ? "no live setting changed" : "applied \(live.joined(separator: ", "))")
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

/// `klarna-reconciler reload`: what the unit's `ExecReload=` runs. Signals the daemon and waits for its answer; exit 0
/// when it reloaded, 78 with the reason when it kept its configuration because the new one is invalid. The daemon is
/// the one that validates, with its own credentials: systemd does not give `ExecReload=` the credentials of a
/// namespaced service (systemd#35227), so this command reads only what it needs to find the daemon.
struct ReloadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reload",
        abstract: "Asks the running daemon to reload its configuration and waits until it has."
    )

    @OptionGroup var options: ConfigOptions

    @Option(help: "Seconds to wait for the daemon's answer.")
    var timeout: Double = 30

    func run() async throws {
        var environment = ProcessInfo.processInfo.environment
        environment["CREDENTIALS_DIRECTORY"] = nil
        let settings: Settings
        do {
            settings = try await Settings.load(configPath: options.config, environment: environment, needsKlarnaPassword: false)
        } catch {
            printError("klarna-reconciler: config error: \(error)")
            throw ExitCode(78)
        }
        guard let pid = Self.daemon(storePath: settings.storePath) else {
            printError("klarna-reconciler: no daemon is running on \(settings.storePath)")
            throw ExitCode(69)
        }
        let store = try await options.openStore(settings, readOnly: false)
        let id = try await store.requestReload(at: Date())
        guard kill(pid, SIGHUP) == 0 else {
            printError("klarna-reconciler: cannot signal the daemon (pid \(pid)): \(String(cString: strerror(errno)))")
            throw ExitCode(69)
        }
        let deadline = ContinuousClock.now + .seconds(timeout)
        while ContinuousClock.now < deadline {
            if let answer = try await store.reloadAnswer(id) {
                if answer.ok {
                    print(answer.message)
                    return
                }
                printError("klarna-reconciler: \(answer.message)")
                throw ExitCode(78)
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        printError("klarna-reconciler: the daemon (pid \(pid)) did not answer the reload within \(Int(timeout)) s")
        throw ExitCode.failure
    }

    /// The daemon's pid: `$MAINPID` under `ExecReload=`, else the pid in the store's lock file, if that process
    /// is a running `klarna-reconciler run` (a stale lock file must not get a stranger signalled).
    static func daemon(storePath: String) -> pid_t? {
        let candidate = ProcessInfo.processInfo.environment["MAINPID"].flatMap { pid_t($0) }
            ?? (try? String(contentsOfFile: storePath + ".lock", encoding: .utf8)).flatMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        guard let pid = candidate, pid > 0,
              let command = try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/cmdline"))
        else { return nil }
        let arguments = command.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
        guard arguments.first.map({ ($0 as NSString).lastPathComponent == "klarna-reconciler" }) == true, arguments.contains("run") else { return nil }
        return pid
    }
}
