import ArgumentParser
import Engine
import Foundation
import ReconcilerCore
import ReconcilerStore

struct RefundCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "refund",
        abstract: "Refunds captured money on an order, exactly once per reference.",
        discussion: """
            The refund is recorded durably, then sent by the daemon: it reads the order first and refuses what Klarna would \
            (more than captured minus refunded, a cancelled order), and sends it with one Klarna-Idempotency-Key on every \
            attempt. The same reference again is the same refund; with another amount it is refused. Exit 0: refunded, or \
            recorded and still under way when --wait ran out (said so); 1: refused or failed.
            """)

    @Argument(help: "The Klarna order id.") var orderID: String
    @Option(help: "Amount in minor units (cents).") var amount: Int
    @Option(help: "The shop's reference for this refund (1–255 characters); Klarna repeats it in settlements.") var reference: String
    @Option(help: "Shown to the customer (at most 255 characters).") var description: String?
    @OptionGroup var waiting: WaitOption
    @OptionGroup var options: ConfigOptions

    func validate() throws {
        guard validID(orderID) else { throw ValidationError("ORDER_ID must be 1–255 printable ASCII characters without spaces") }
        guard amount > 0 else { throw ValidationError("--amount must be a positive number of minor units") }
        if let problem = RefundAsk.textProblem(reference) { throw ValidationError("--reference \(problem)") }
        if let description, let problem = RefundAsk.textProblem(description) { throw ValidationError("--description \(problem)") }
    }

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: false)
        let store = try await options.openStore(settings, readOnly: false)
        let ask = RefundAsk(orderID: orderID, amount: amount, reference: reference, description: description)
        let key = IdempotencyKey.make(.refund, ask.keyTarget)
        let record = IngestRecord(
            dedupeKey: nil, kind: "refund_request", source: "the command line",
            summary: "refund of \(amount) requested for order \(orderID), reference \(reference)", action: .refund(ask, key: key),
            callerWakes: false)
        let request = IntentRequest(record: record, key: key, what: "refund")
        let intent = try await request.submit(
            to: store, wait: waiting.wait,
            accepted: "refund of \(amount) on order \(orderID) recorded (reference \(reference), idempotency key \(key))",
            repeated: { "reference \(reference) on order \(orderID) was recorded at \($0.formatted(.iso8601)): the same refund, not another" })
        guard let intent else { return }
        switch intent.state {
        case .confirmed:
            print("refunded \(intent.amount ?? 0) on order \(orderID): refund \(intent.result ?? "without an id")")
        case .failed:
            printError("klarna-reconciler: refund failed: \(intent.lastError ?? "no reason recorded")")
            throw ExitCode.failure
        case .intended, .sent, .ambiguous:
            print("\(IntentRequest.underWay(intent)); `klarna-reconciler show \(orderID)` follows it")
        }
    }
}
