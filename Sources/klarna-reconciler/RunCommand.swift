import ArgumentParser
import Daemon
import Engine
import Glibc
import Logging
import ReconcilerCore
import SystemdSupport

/// `klarna-reconciler run`: the process's side of the daemon (signals, the log destination, metrics, how a failure
/// is reported); ``ReconcilerDaemon`` is the daemon itself.
struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Runs the daemon: tracks sessions, places and captures orders, writes outcomes to the outbox."
    )

    @OptionGroup var options: ConfigOptions

    func run() async throws {
        // SIGHUP's default action ends the process; until the reload handler is installed it must do nothing.
        signal(SIGHUP, SIG_IGN)
        LargeBufferRelease.apply()
        let level = LogLevelControl(.info)
        LogDestination.bootstrap(identifier: "klarna-reconciler", level: level, metadataProvider: LogContext.provider)
        let logger = Logger(label: "klarna-reconciler")
        let daemon = ReconcilerDaemon(
            options: .init(
                configPath: options.config, handlesSignals: true, metrics: ReconcilerDaemon.bootstrapMetrics(), logLevel: level, logger: logger))
        do {
            try await daemon.run()
        } catch let failure as ReconcilerDaemon.StartFailure {
            // Said three ways: the log (with MESSAGE_ID), `STATUS=`+`ERRNO=` for `systemctl status`, and the exit code.
            if LogDestination.stderrIsJournal {
                logger.critical("\(failure)", metadata: [MessageID.metadataKey: .string(MessageID.startFailed.rawValue)])
            } else {
                printError("klarna-reconciler: \(failure)")
            }
            SystemdNotifier().failing(status: failure.description, errno: failure.errno)
            throw ExitCode(failure.exitCode)
        }
    }
}
