import ArgumentParser
import Foundation
import ReconcilerStore
import SQLiteBackend

/// `backup FILE`: an online copy of the store, checked before the command says it is done.
struct BackupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract:
            "Writes a consistent copy of the store to FILE while the daemon runs, and checks it; restoring: docs/operations.md, \"Backup and restore\"."
    )

    @Argument(help: "The file to write. It must not exist: a backup never overwrites.")
    var file: String
    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: false)
        if FileManager.default.fileExists(atPath: file) {
            printError("klarna-reconciler: \(file) exists; a backup never overwrites a file: name a new one")
            throw ExitCode(73)  // EX_CANTCREAT
        }
        if let location = settings.storeURL {
            printError("klarna-reconciler: the store is PostgreSQL (\(location)): back it up with pg_dump (docs/cluster.md)")
            throw ExitCode(64)
        }
        guard let store = try await options.openStore(settings, readOnly: true) as? SQLiteStore else { throw ExitCode.failure }
        do {
            try await store.backup(to: file)
            let copy = try SQLiteStore(path: file, readOnly: true)
            let problems = try await copy.integrityCheck()
            guard problems == ["ok"] else {
                throw BackupFailed(description: "the copy fails SQLite's integrity check: \(problems.prefix(3).joined(separator: "; "))")
            }
            let summary = try await copy.summary(now: Date())
            let bytes = (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0
            print(
                "backup written: \(file) (\(bytes) bytes, schema \(try await copy.schemaVersion()), integrity ok; "
                    + "\(summary.sessionsByPhase.values.reduce(0, +)) sessions, \(summary.ordersByPhase.values.reduce(0, +)) orders)")
        } catch {
            try? FileManager.default.removeItem(atPath: file)
            printError("klarna-reconciler: backup of \(settings.storePath) failed, nothing kept at \(file): \(error)")
            throw ExitCode.failure
        }
    }

    struct BackupFailed: Error, CustomStringConvertible {
        let description: String
    }
}
