import ArgumentParser
import KlarnaAPI

/// `klarna-sandbox`: the Klarna API simulator the tests, the demo and the benchmarks run against. Its own executable,
/// never linked into the daemon.
@main
struct KlarnaSandboxCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "klarna-sandbox",
        abstract: "A Klarna API simulator (HPP, KP, OM, Settlements, Klarna Network) for offline testing, and the demo.",
        version: "\(ProductInfo.version) (commit \(ProductInfo.commit))",
        subcommands: [ServeCommand.self, DemoCommand.self],
        defaultSubcommand: ServeCommand.self
    )
}
