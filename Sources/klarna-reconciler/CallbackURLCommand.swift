import ArgumentParser
import Foundation
import Ingest
import ReconcilerCore

extension CallbackTokens.Kind: ExpressibleByArgument {}

struct CallbackURLCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "callback-url",
        abstract: "Prints the callback URL to give Klarna for one KP session, with its token (HMAC under the callback-key credential)."
    )

    @Option(help: "hpp-status (merchant_urls.status_update of the HPP session) or kp-authorization (merchant_urls.authorization).")
    var kind: CallbackTokens.Kind
    @Option(name: .customLong("kp-session"), help: "The KP session id.") var kpSessionID: String
    @Option(help: "The public URL your forwarder receives the callback on, e.g. https://shop.example/klarna/hpp-status.")
    var base: String
    @Option(help: "The Klarna account the KP session is of (an id of accounts:); by default the default account (the klarna: section).")
    var account: AccountID?
    @OptionGroup var options: ConfigOptions

    func validate() throws {
        guard validID(kpSessionID) else { throw ValidationError("--kp-session must be 1–255 printable ASCII characters without spaces") }
        guard let url = URL(string: base), url.scheme == "https" || url.scheme == "http", url.host != nil else {
            throw ValidationError("--base must be an http(s) URL, not \(base)")
        }
    }

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: false)
        guard let key = settings.callbackKey else {
            printError("klarna-reconciler: config error: callback-key: no key to sign callback URLs with (\(settings.callbackKeySource))")
            throw ExitCode(78)
        }
        // A URL without an account is the default account's (its token signs none).
        let id = try settings.configuredAccount(account ?? .default).id
        print(CallbackTokens(key: key).url(kind, kpSessionID: kpSessionID, base: base, account: id))
    }
}
