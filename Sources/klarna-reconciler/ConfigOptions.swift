import ArgumentParser
import Foundation
import Logging
import PostgresBackend
import ReconcilerCore
import ReconcilerStore
import SQLiteBackend
import Settings

/// `--config`, shared by every command that reads the configuration.
struct ConfigOptions: ParsableArguments {
    @Option(name: .long, help: "The configuration file.")
    var config: String = Settings.defaultConfigPath

    /// Loads the configuration or exits 78 (EX_CONFIG) with one line saying what is wrong.
    func load(needsKlarnaPassword: Bool) async throws -> Settings {
        do {
            return try await Settings.load(configPath: config, needsKlarnaPassword: needsKlarnaPassword)
        } catch {
            printError("klarna-reconciler: config error: \(error)")
            throw ExitCode(78)
        }
    }

    /// Opens the store for an operator command, which waits for the daemon's writes instead of failing: the SQLite
    /// file, or the PostgreSQL database `store.url` names (never migrated by a command: the daemon does that).
    func openStore(_ settings: Settings, readOnly: Bool) async throws -> any ReconcilerStore {
        if let location = settings.storeURL {
            do {
                return try await PostgresStore.open(
                    location, password: settings.storePassword, migrate: false, connections: 2, logger: Logger(label: "klarna-reconciler"))
            } catch let problem as PostgresProblem {
                printError("klarna-reconciler: cannot open the store: \(problem)")
                throw ExitCode(problem.kind.exitCode)
            }
        }
        if readOnly, !FileManager.default.fileExists(atPath: settings.storePath) {
            printError("klarna-reconciler: no store at \(settings.storePath) yet: the daemon creates it on its first start")
            throw ExitCode(69)
        }
        do {
            return try SQLiteStore(path: settings.storePath, readOnly: readOnly, busyTimeout: settings.storeBusyTimeout)
        } catch {
            printError("klarna-reconciler: cannot open the store \(settings.storePath): \(error)")
            throw ExitCode.failure
        }
    }
}

/// `--account ID`: refused by the parser unless it is an account id (the help names the rule).
extension AccountID: ExpressibleByArgument {}

extension Settings {
    /// The configured account `id`, or a usage error naming the accounts there are.
    /// The account a command that creates work is for: the one `--account` names, else the only one, else the one named
    /// default; refused when none is, or when the named one is not configured.
    func commandAccount(_ named: AccountID?) throws -> AccountSettings {
        guard let id = named ?? unnamedAccount else {
            throw ValidationError(
                "--account is required: accounts \(accounts.map(\.id.rawValue).joined(separator: ", ")) are configured, none of them default")
        }
        return try configuredAccount(id)
    }

    func configuredAccount(_ id: AccountID) throws -> AccountSettings {
        guard let account = account(id) else {
            throw ValidationError("--account \(id) is not configured (accounts: \(accounts.map(\.id.rawValue).joined(separator: ", ")))")
        }
        return account
    }
}

func printError(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}
