import ArgumentParser
import Engine
import Foundation
import ReconcilerCore

/// `prune [--dry-run]`: retention now, instead of at the daemon's next pass.
struct PruneCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prune",
        abstract: "Removes what is past its retention (retention.* in the config) now; --dry-run only counts it."
    )

    @Flag(help: "Count what would go; remove nothing.") var dryRun = false
    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: false)
        let store = try await options.openStore(settings, readOnly: dryRun)
        let pruner = Pruner(
            store: store, policy: settings.retention, doneDirectory: settings.spoolDirectory.map { "\($0)/done" },
            acknowledgedDirectory: settings.outboxDirectory + "/cur", clock: SystemClock())
        do {
            let counts = try await pruner.run(dryRun: dryRun)
            print("\(dryRun ? "would prune" : "pruned"): \(counts)")
        } catch {
            printError("klarna-reconciler: pruning \(settings.storeDescription) failed: \(error)")
            throw ExitCode.failure
        }
    }
}
