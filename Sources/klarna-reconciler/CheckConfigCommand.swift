import ArgumentParser
import Foundation
import Logging
import PostgresBackend
import SQLiteBackend

struct CheckConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract:
            "Validates the configuration and prints the effective values (secrets redacted) and the store's schema version next to the one this "
            + "binary writes; with store.url, connects to PostgreSQL and names what "
            + "is wrong (exit 78 for configuration and credentials, 69 for a server or schema this binary cannot use)."
    )

    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: true)
        print(settings.effectiveDescription)
        guard let location = settings.storeURL else {
            // A file this binary cannot migrate is named here too; opening it would say the same.
            let found = try SQLiteStore.schemaVersion(at: settings.storePath)
            let schema = found.map { "version \($0)" } ?? "not created yet: the daemon creates it on its first start"
            print("store.check: \(settings.storePath); schema \(schema) (this binary writes \(SQLiteStore.latestSchemaVersion))")
            return
        }
        do {
            let found = try await PostgresStore.check(location, password: settings.storePassword, logger: Logger(label: "klarna-reconciler"))
            let schema = found == 0 ? "empty: the daemon creates the schema on its first start" : "version \(found)"
            print("store.check: connected to \(location); schema \(schema) (this binary writes \(PostgresStore.schemaVersion))")
        } catch let problem as PostgresProblem {
            printError("klarna-reconciler: store.url: \(problem)")
            throw ExitCode(problem.kind.exitCode)
        }
    }
}
