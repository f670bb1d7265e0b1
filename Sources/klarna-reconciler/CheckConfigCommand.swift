import ArgumentParser
import Foundation

struct CheckConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Validates the configuration and prints the effective values (secrets redacted); exit 78 on any error."
    )

    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: true)
        print(settings.effectiveDescription)
    }
}
