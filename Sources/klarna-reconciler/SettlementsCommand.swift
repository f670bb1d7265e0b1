import ArgumentParser
import Foundation
import ReconcilerCore
import ReconcilerStore

/// `klarna-reconciler settlements`: the payouts the daemon fetched from Klarna's Settlements API and matched against
/// the ledger, read through the operators' socket when the daemon listens there, else from the store.
struct SettlementsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "settlements",
        abstract: "Klarna's payouts matched against the ledger: matched and unmatched lines and why, fees, findings, net.")

    @Option(help: ArgumentHelp("Only payouts dated on or after this: \(PayoutSince.expected).", valueName: "date")) var since: String?
    @Option(help: ArgumentHelp("Only the payout with this payment reference (as on the bank statement).", valueName: "ref")) var payout: String?
    @Option(help: "Only this account's payouts (an id of accounts:); by default every account's, with totals by account.") var account: AccountID?
    @Flag(help: "Print a JSON array of payout reports.") var json = false
    @Flag(help: "Print CSV (RFC 4180): a header and one row per payout.") var csv = false
    @OptionGroup var options: ConfigOptions

    func validate() throws {
        if json && csv { throw ValidationError("--json and --csv exclude each other") }
        if let since {
            do { _ = try PayoutSince.read(since) } catch { throw ValidationError("--since must be \(PayoutSince.expected), not \(since): \(error)") }
        }
        if let payout, !validID(payout) { throw ValidationError("--payout must be 1–255 printable ASCII characters without spaces") }
    }

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: false)
        let reports: [PayoutReport]
        if let client = try await ControlClient.find(settings) {
            let query = [
                since.map { "since=\(ControlClient.escape($0))" }, payout.map { "payout=\(ControlClient.escape($0))" },
                account.map { "account=\($0)" },
            ].compactMap { $0 }
            guard
                let answer = try await client.get([PayoutReport].self, "/v2/settlements" + (query.isEmpty ? "" : "?" + query.joined(separator: "&")))
            else {
                throw ControlClient.Failed(description: "the daemon has no /v2/settlements: restart it after an upgrade")
            }
            reports = answer
        } else {
            let store = try await options.openStore(settings, readOnly: true)
            reports = try await store.payouts(since: since.flatMap(PayoutSince.parse), paymentReference: payout, account: account).map(\.report)
        }
        let after = (since.map { " dated on or after \($0)" } ?? "") + (account.map { " for account \($0)" } ?? "")
        if let payout, reports.isEmpty {
            printError("klarna-reconciler: no payout \(payout) is recorded\(after) (klarna-reconciler settlements lists those that are)")
            throw ExitCode.failure
        }
        if json { return try printJSON(reports) }
        if csv { return print(SettlementReportRenderer.csv(reports), terminator: "") }
        if reports.isEmpty {
            print(
                "No payouts recorded\(after). The daemon fetches Klarna's payouts only with settlements.enabled: true, once at start and then every settlements.sync_interval_minutes."
            )
            return
        }
        print(SettlementReportRenderer.text(reports))
    }
}
