import ArgumentParser
import Engine
import Foundation
import ReconcilerCore
import ReconcilerStore

struct ChargeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "charge",
        abstract: "Charges a customer token (a renewal), exactly once per reference.",
        discussion: """
            The charge is recorded durably with its order body, then sent by the daemon: it reads the token first (not \
            ACTIVE: nothing is sent), and sends the same body with one Klarna-Idempotency-Key on every attempt. The order \
            Klarna places is then followed like any other (captured by --capture). The same reference again is the same \
            charge; with another amount or currency it is refused. Exit 0: placed, or recorded and still under way when \
            --wait ran out (said so); 1: refused, declined or failed.
            """)

    @Argument(help: "The customer token (kept in the store; shown by its tail).") var token: String
    @Option(help: "Amount in minor units (cents).") var amount: Int
    @Option(help: "ISO 4217 currency of the token, like EUR.") var currency: String
    @Option(help: "The shop's reference for this charge (1–255 characters); merchant_reference1 of its order.") var reference: String
    @Option(help: "Tax in minor units (default 0).") var taxAmount: Int = 0
    @Option(help: "A JSON file with the order lines (Klarna's order_lines); by default one line for the whole amount.") var lines: String?
    @Option(help: "immediate, on_request or never (default: the account's capture policy).") var capture: CapturePolicy?
    @OptionGroup var named: AccountOption
    @OptionGroup var waiting: WaitOption
    @OptionGroup var options: ConfigOptions

    func validate() throws { try validateToken(token) }

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: false)
        let account = try settings.commandAccount(named.account)
        var orderLines: [ChargeLine]?
        if let lines {
            do {
                orderLines = try JSONDecoder().decode([ChargeLine].self, from: Data(contentsOf: URL(fileURLWithPath: lines)))
            } catch {
                throw ValidationError(
                    "--lines \(lines): not a JSON array of order lines (name, quantity, unit_price, total_amount, and optionally tax_rate, total_tax_amount, reference): \(error)"
                )
            }
        }
        let ask = ChargeAsk(
            token: token, reference: reference, amount: amount, currency: currency, taxAmount: taxAmount, lines: orderLines, capture: capture,
            account: account.id)
        if let problem = ask.problem {
            let option = ["amount": "--amount", "currency": "--currency", "tax_amount": "--tax-amount", "reference": "--reference"][problem.field]
            throw ValidationError("\(option ?? "--lines (\(problem.field))") \(problem.reason)")
        }
        let store = try await options.openStore(settings, readOnly: false)
        let key = IdempotencyKey.make(.charge, ask.keyTarget)
        let record = IngestRecord(
            dedupeKey: nil, kind: "charge_request", source: "the command line",
            summary: "charge of \(amount) \(currency) requested for customer token \(Redact.tail(token)), reference \(reference)",
            action: .charge(ask, key: key, capture: capture ?? account.capturePolicy), callerWakes: false)
        let request = IntentRequest(record: record, key: key, what: "charge")
        let intent = try await request.submit(
            to: store, wait: waiting.wait,
            accepted:
                "charge of \(amount) \(currency) to customer token \(Redact.tail(token)) recorded (reference \(reference), idempotency key \(key))",
            repeated: { "reference \(reference) on this customer token was recorded at \($0.formatted(.iso8601)): the same charge, not another" })
        guard let intent else { return }
        switch intent.state {
        case .confirmed:
            print("charged \(intent.amount ?? 0) \(currency): order \(intent.result ?? "without an id") placed; the daemon follows it to its capture")
        case .failed:
            printError("klarna-reconciler: charge not made: \(intent.lastError ?? "no reason recorded")")
            throw ExitCode.failure
        case .intended, .sent, .ambiguous:
            print("\(IntentRequest.underWay(intent)); `klarna-reconciler show \(reference)` follows its order once placed")
        }
    }
}
