import ArgumentParser
import Foundation
import Logging
import ReconcilerCore
import ReconcilerStore
import Settings
import SystemdSupport

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
        let candidate =
            ProcessInfo.processInfo.environment["MAINPID"].flatMap { pid_t($0) }
            ?? (try? String(contentsOfFile: storePath + ".lock", encoding: .utf8)).flatMap {
                pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines))
            }
        guard let pid = candidate, pid > 0,
            let command = try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/cmdline"))
        else { return nil }
        let arguments = command.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
        guard arguments.first.map({ ($0 as NSString).lastPathComponent == "klarna-reconciler" }) == true, arguments.contains("run") else {
            return nil
        }
        return pid
    }
}
