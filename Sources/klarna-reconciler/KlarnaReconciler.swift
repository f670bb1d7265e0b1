import ArgumentParser
import KlarnaAPI

@main
struct KlarnaReconciler: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "klarna-reconciler",
        abstract: "Makes every Klarna payment end correctly: tracks HPP sessions, places and captures orders exactly once.",
        version: "\(ProductInfo.version) (commit \(ProductInfo.commit); \(CurlTransport.libcurlVersion))",
        subcommands: [
            RunCommand.self, ReloadCommand.self, CheckConfigCommand.self, TrackCommand.self, CaptureCommand.self, StatusCommand.self,
            ListCommand.self, ShowCommand.self, SettlementsCommand.self, HoldCommand.self, ReleaseCommand.self, RetryCommand.self, CancelCommand.self,
            ReleaseRemainingCommand.self, RefundCommand.self, ChargeCommand.self, TokensCommand.self, TokenCommand.self, CallbackURLCommand.self,
            QuarantineCommand.self, BackupCommand.self,
            PruneCommand.self,
            StoreCommand.self, DisputesCommand.self, DisputeCommand.self,
            ClusterCommand.self,
        ]
    )
}
