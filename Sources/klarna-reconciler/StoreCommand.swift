import ArgumentParser
import Foundation
import Logging
import PostgresBackend
import ReconcilerStore
import SQLiteBackend

/// `store copy`: moves a store from the SQLite file to PostgreSQL.
struct StoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store", abstract: "Moves the store between backends.", subcommands: [StoreCopyCommand.self])
}

struct StoreCopyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "copy",
        abstract: "Copies a SQLite store into an empty PostgreSQL database while no daemon runs on either; checks every table's count.",
        discussion: "Without --to, the database is the configuration's store.url, with its store-password credential.")

    @Option(name: .long, help: "The SQLite store file (the old store.path).")
    var from: String
    @Option(name: .long, help: "The PostgreSQL database, as store.url: postgres://USER@HOST:PORT/DATABASE (default: the configuration's store.url).")
    var to: String?
    @Option(name: .long, help: "A file holding the database password (default: the configuration's store-password credential).")
    var passwordFile: String?
    @OptionGroup var options: ConfigOptions

    func run() async throws {
        guard FileManager.default.fileExists(atPath: from) else {
            printError("klarna-reconciler: no SQLite store at \(from)")
            throw ExitCode(66)  // EX_NOINPUT
        }
        let configured = to == nil ? try await options.load(needsKlarnaPassword: false) : nil
        let location: PostgresLocation
        do {
            guard let target = try to.map(PostgresLocation.init(url:)) ?? configured?.storeURL else {
                printError("klarna-reconciler: no database to copy to: give --to, or set store.url in \(options.config)")
                throw ExitCode(64)
            }
            location = target
        } catch let error as PostgresLocation.Invalid {
            printError("klarna-reconciler: --to: \(error)")
            throw ExitCode(64)
        }
        var password = configured?.storePassword
        if let passwordFile {
            do {
                password = try String(contentsOfFile: passwordFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            } catch {
                printError("klarna-reconciler: cannot read --password-file \(passwordFile): \(error.localizedDescription)")
                throw ExitCode(66)
            }
        }
        // Held for the whole copy: no daemon starts on either store meanwhile.
        let lock: StoreLock
        do {
            lock = try StoreLock(storePath: from)
        } catch {
            printError("klarna-reconciler: \(error): stop the daemon (and its sockets) before copying its store")
            throw ExitCode(75)
        }
        let source: SQLiteStore
        do {
            source = try SQLiteStore(path: from, readOnly: true)
        } catch {
            printError("klarna-reconciler: cannot open \(from): \(error)")
            throw ExitCode.failure
        }
        let target: PostgresStore
        do {
            target = try await PostgresStore.open(location, password: password, connections: 2, logger: Logger(label: "klarna-reconciler"))
            try await target.takeCopyLock()
        } catch let problem as PostgresProblem {
            printError("klarna-reconciler: --to: \(problem)")
            throw ExitCode(problem.kind.exitCode)
        }
        defer { target.close() }
        guard try await target.isEmptyForTransfer() else {
            printError("klarna-reconciler: \(location) holds a store already; a copy goes only into an empty database (nothing was written)")
            throw ExitCode(73)  // EX_CANTCREAT
        }
        let copied: [(table: TransferTable, rows: Int)]
        do {
            copied = try await StoreTransfer.copy(from: source, to: target)
        } catch {
            printError(
                "klarna-reconciler: the copy failed: \(error). The database holds part of it: drop and create it again before copying anew; \(from) is unchanged"
            )
            throw ExitCode.failure
        }
        withExtendedLifetime(lock) {}
        print("copied \(from) to \(location): \(copied.map { "\($0.table.rawValue) \($0.rows)" }.joined(separator: ", "))")
        print("next: set store.url in config.yaml (and remove store.path), then start the daemon")
    }
}
