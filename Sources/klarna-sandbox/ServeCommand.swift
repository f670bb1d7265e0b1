import ArgumentParser
import Foundation
import HTTPServer
import KlarnaSandbox
import Logging
import ServiceLifecycle
import SystemdSupport

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Runs a Klarna API simulator (HPP, KP, OM, Settlements, Klarna Network) with scenario, payout and fault controls under /_sandbox/."
    )

    @Option(name: .long, help: "Where to listen: HOST:PORT, or unix:/path.")
    var listen: String = "127.0.0.1:8089"

    @Option(name: .long, help: "The merchant username the sandbox accepts.")
    var username: String = "sandbox-merchant"

    @Option(name: .long, help: "A file holding the password the sandbox accepts (default: sandbox-secret).")
    var passwordFile: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Another merchant the sandbox serves, with its own resources, payouts and rate limit (repeatable; --username and --password-file are merchant K100001).",
            valueName: "ID:USERNAME:PASSWORD"))
    var merchant: [String] = []

    func run() async throws {
        guard let address = ListenAddress(parsing: listen) else {
            throw ValidationError("--listen must be HOST:PORT or unix:/path, not \(listen)")
        }
        var password = "sandbox-secret"
        if let passwordFile {
            guard let text = try? String(contentsOfFile: passwordFile, encoding: .utf8) else {
                throw ValidationError("cannot read --password-file \(passwordFile)")
            }
            password = text.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let others = try merchant.map { text -> SandboxMerchant in
            // The password may hold colons; the id and the username may not.
            let parts = text.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty else {
                throw ValidationError("--merchant must be ID:USERNAME:PASSWORD, not \(text)")
            }
            return SandboxMerchant(id: parts[0], username: parts[1], password: parts[2])
        }
        let configuration = KlarnaSandbox.Configuration(username: username, password: password, otherMerchants: others)
        if let conflict = configuration.merchantConflict { throw ValidationError("--merchant: \(conflict)") }
        var logger = Logger(label: "klarna-sandbox")
        logger.logLevel = .info
        let sandbox = KlarnaSandbox(configuration: configuration)
        let server = try await HTTPServer.bind(address, configuration: KlarnaSandbox.serverConfiguration, logger: logger) { await sandbox.handle($0) }
        let status = "Klarna sandbox listening on \(server.localAddress)"
        logger.notice("\(status)")
        SystemdNotifier().ready(status: status)
        let group = ServiceGroup(
            services: [ServerService(server: server) { SystemdNotifier().stopping(status: "Klarna sandbox stopping") }],
            gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        try await group.run()
    }
}
