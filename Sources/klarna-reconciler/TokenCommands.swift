import ArgumentParser
import Engine
import Foundation
import ReconcilerCore
import ReconcilerStore

/// `tokens`: the customer tokens the daemon created or charged, by their tails.
struct TokensCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tokens", abstract: "The customer tokens the daemon created or charged, the most recently used first.")

    @Option(help: "At most this many tokens.") var limit: Int = 100
    @Flag(help: "Print JSON.") var json = false
    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: false)
        let tokens: [CustomerTokenView]
        if let client = try await ControlClient.find(settings) {
            tokens = try await client.get([CustomerTokenView].self, "/v2/customer-tokens?limit=\(max(1, limit))") ?? []
        } else {
            tokens = try await TokenDesk(store: try await options.openStore(settings, readOnly: true)).tokens(limit: limit)
        }
        if json { return try printJSON(tokens) }
        for token in tokens { print(TokenView.line(token)) }
        print("Total: \(tokens.count) token\(tokens.count == 1 ? "" : "s")")
    }
}

/// `token show` and `token cancel`.
struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token", abstract: "One customer token: its status at Klarna and its charges, or its cancellation.",
        subcommands: [Show.self, Cancel.self])

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "show", abstract: "The token's status (read from Klarna by the running daemon), its charges and their orders.")

        @Argument(help: "The customer token (from the outbox).") var token: String
        @Flag(help: "Print JSON.") var json = false
        @OptionGroup var options: ConfigOptions

        func validate() throws { try validateToken(token) }

        func run() async throws {
            let settings = try await options.load(needsKlarnaPassword: false)
            let found: CustomerTokenView?
            if let client = try await ControlClient.find(settings) {
                found = try await client.get(CustomerTokenView.self, "/v2/customer-tokens/\(ControlClient.escape(token))")
            } else {
                found = try await TokenDesk(store: try await options.openStore(settings, readOnly: true)).token(token)
            }
            guard let view = found else {
                printError("klarna-reconciler: this daemon neither created nor charged customer token \(Redact.tail(token))")
                throw ExitCode.failure
            }
            if json { return try printJSON(view) }
            print(TokenView.line(view))
            print("  status at Klarna: \(view.status ?? "—")\(view.statusNote.map { " (\($0))" } ?? "")")
            if let by = view.createdBy { print("  created for HPP session \(by)\(view.createdAt.map { " at \($0.formatted(.iso8601))" } ?? "")") }
            for charge in view.charges {
                print(
                    "  charge \(charge.reference ?? "—"): \(charge.amount ?? 0) \(charge.charge?.currency ?? ""), \(charge.state.rawValue), \(charge.attempts) attempt(s)\(charge.result.map { ", order \($0)" } ?? "")\(charge.state == .failed ? ", \(charge.lastError ?? "")" : "")"
                )
            }
            if let cancel = view.cancellation {
                print("  cancellation: \(cancel.state.rawValue)\(cancel.lastError.map { ", \($0)" } ?? "")")
            }
        }
    }

    struct Cancel: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "cancel",
            abstract: "Cancels the customer token at Klarna, once: no charge of it is made afterwards.",
            discussion:
                "Recorded as an intent the daemon sends; asked again, it is the same cancellation. Exit 0: cancelled, or recorded and still under way when --wait ran out (said so); 1: not cancelled."
        )

        @Argument(help: "The customer token (from the outbox).") var token: String
        @OptionGroup var named: AccountOption
        @OptionGroup var waiting: WaitOption
        @OptionGroup var options: ConfigOptions

        func validate() throws { try validateToken(token) }

        func run() async throws {
            let settings = try await options.load(needsKlarnaPassword: false)
            let account = try settings.commandAccount(named.account)
            let desk = TokenDesk(store: try await options.openStore(settings, readOnly: false))
            let requester = OperatorDesk.requester(uid: getuid(), via: "the command line")
            switch try await desk.cancel(token, account: account.id, by: requester, wait: .seconds(waiting.wait)) {
            case .repeated(let intent):
                print(
                    "the cancellation of customer token \(Redact.tail(token)) was asked for before (\(intent.state.rawValue)): the same one, not another"
                )
            case .recorded(let intent) where intent.state == .confirmed:
                print("Klarna cancelled customer token \(Redact.tail(token))")
            case .recorded(let intent) where intent.state == .failed:
                printError("klarna-reconciler: customer token \(Redact.tail(token)) not cancelled: \(intent.lastError ?? "no reason recorded")")
                throw ExitCode.failure
            case .recorded(let intent):
                print(IntentRequest.underWay(intent))
            }
        }
    }
}

/// How a token shows on one line.
enum TokenView {
    static func line(_ view: CustomerTokenView) -> String {
        let placed = view.charges.filter { $0.state == .confirmed }.count
        let failed = view.charges.filter { $0.state == .failed }.count
        let open = view.charges.count - placed - failed
        let cancelled = view.cancellation.map { $0.state == .confirmed ? ", cancelled" : ", cancellation \($0.state.rawValue)" } ?? ""
        return
            "\(view.token)  account \(view.account)  charges: \(placed) placed, \(failed) not made, \(open) under way\(cancelled)\(view.createdBy.map { "  created for \($0)" } ?? "")"
    }
}
