import ArgumentParser
import KlarnaAPI

@main
struct KlarnaReconciler: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "klarna-reconciler",
        abstract: "Makes every Klarna payment end correctly: tracks HPP sessions, places and captures orders exactly once.",
        version: "\(ProductInfo.version) (\(CurlTransport.libcurlVersion))",
        subcommands: [SandboxCommand.self, DemoCommand.self]
    )
}
