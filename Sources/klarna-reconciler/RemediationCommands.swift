import ArgumentParser
import Engine
import Foundation
import Ingest
import ReconcilerCore
import ReconcilerStore

/// `hold`, `release`, `retry`, `cancel` and `release-remaining`: each records a request the daemon applies in the
/// payment's next step, then waits for its answer. Exit 0 when applied, 1 when refused (the reason on stderr), 75
/// (EX_TEMPFAIL) when the daemon did not answer in time: the request stays queued and is applied when it runs.
struct RemediationOptions: ParsableArguments {
    @Option(help: "Seconds to wait for the daemon's answer.") var wait: Int = 10
    @OptionGroup var options: ConfigOptions

    func validate() throws {
        guard (0...60).contains(wait) else { throw ValidationError("--wait is 0 to 60 seconds") }
    }

    func run(_ action: OperatorAction, id: String, orderID: String? = nil) async throws {
        guard validID(id) else { throw ValidationError("ID must be 1–255 printable ASCII characters without spaces") }
        let settings = try await options.load(needsKlarnaPassword: false)
        if let client = try await ControlClient.find(settings) {
            return try await run(action, id: id, orderID: orderID, through: client)
        }
        let store = try await options.openStore(settings, readOnly: false)
        let requester = OperatorDesk.requester(uid: getuid(), via: "the command line")
        let answer = try await OperatorDesk(store: store).request(action, id: id, orderID: orderID, by: requester, now: Date(), wait: .seconds(wait))
        switch answer {
        case .refused(let refusal):
            printError("klarna-reconciler: \(action.word) \(id) refused: \(refusal.status == 404 ? "nothing tracked matches \(id)" : refusal.reason)")
            throw ExitCode.failure
        case .queued(let requests):
            printError(
                "klarna-reconciler: \(action.word) \(id) recorded (request \(requests.map { "\($0.id)" }.joined(separator: ", "))) but the daemon did not answer within \(wait) s; it applies it when it runs (klarna-reconciler show \(id))"
            )
            throw ExitCode(75)
        case .answered(let requests, let payment):
            var refused = false
            for request in requests {
                if request.state == .refused {
                    refused = true
                    printError("klarna-reconciler: \(action.word) of \(request.key) refused: \(request.note ?? "")")
                } else {
                    print("\(request.key): \(request.note ?? request.state.rawValue)")
                }
            }
            for order in payment.orders where requests.contains(where: { $0.key == .order(order.orderID) }) {
                print(
                    "order \(order.orderID) is now \(order.outcome?.rawValue ?? order.phase.rawValue)\(order.activeIntent.map { " (intent \($0) under way)" } ?? "")"
                )
            }
            if refused { throw ExitCode.failure }
        }
    }
}

extension RemediationOptions {
    /// Through the running daemon's control socket: the same answers, the same exit codes.
    func run(_ action: OperatorAction, id: String, orderID: String?, through client: ControlClient) async throws {
        let body = try orderID.map { Array(try JSONSerialization.data(withJSONObject: ["order_id": $0])) }
        let answer = try await client.send("POST", "/v2/payments/\(ControlClient.escape(id))/\(action.word)?wait=\(wait)", body: body)
        if let reply = try? OperatorJSON.decoder().decode(ControlHTTP.OperatorReply.self, from: Data(answer.body)) {
            for part in reply.requests {
                if part.state == .refused {
                    printError("klarna-reconciler: \(action.word) of \(part.target) refused: \(part.note ?? "")")
                } else if reply.status != .queued {
                    print("\(part.target): \(part.note ?? part.state.rawValue)")
                }
            }
            for order in reply.payment ?? [] {
                print("order \(order.orderID) is now \(order.state)\(order.activeIntent.map { " (intent \($0) under way)" } ?? "")")
            }
            switch reply.status {
            case .done: return
            case .queued:
                printError(
                    "klarna-reconciler: \(action.word) \(id) recorded (request \(reply.requests.map { "\($0.id)" }.joined(separator: ", "))) but the daemon did not answer within \(wait) s; it applies it when it gets to it (klarna-reconciler show \(id))"
                )
                throw ExitCode(75)
            case .refused: throw ExitCode.failure
            }
        }
        let error = (try? JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: String]) ?? [:]
        printError("klarna-reconciler: \(action.word) \(id) refused: \(error["detail"] ?? "HTTP \(answer.status)")")
        throw answer.status == 400 ? ExitCode(64) : ExitCode.failure
    }
}

struct HoldCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hold", abstract: "Stops every Klarna call for a payment until it is released.")
    @Argument(help: "An HPP session id, KP session id, order id or merchant reference.") var id: String
    @OptionGroup var remediation: RemediationOptions
    func run() async throws { try await remediation.run(.hold, id: id) }
}

struct ReleaseCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "release", abstract: "Lets a held payment go on; it reads Klarna first.")
    @Argument(help: "An HPP session id, KP session id, order id or merchant reference.") var id: String
    @OptionGroup var remediation: RemediationOptions
    func run() async throws { try await remediation.run(.release, id: id) }
}

struct RetryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "retry",
        abstract: "Re-drives a payment that ended needs_attention or expired: reads Klarna first, then goes on from what it finds.")
    @Argument(help: "An HPP session id, KP session id, order id or merchant reference.") var id: String
    @Option(name: .customLong("order-id"), help: "The order Klarna placed for a create-order whose answer was lost (find it in the Merchant Portal).")
    var orderID: String?
    @OptionGroup var remediation: RemediationOptions

    func validate() throws {
        if let orderID, !validID(orderID) { throw ValidationError("--order-id must be 1–255 printable ASCII characters without spaces") }
    }

    func run() async throws { try await remediation.run(.retry, id: id, orderID: orderID) }
}

struct CancelCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel", abstract: "Cancels an order with nothing captured at Klarna (OM cancel, as an intent with an idempotency key).")
    @Argument(help: "The Klarna order id (or another id of its payment).") var orderID: String
    @OptionGroup var remediation: RemediationOptions
    func run() async throws { try await remediation.run(.cancel, id: orderID) }
}

struct ReleaseRemainingCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "release-remaining",
        abstract: "Releases what a partial capture left authorized (OM release-remaining-authorization, as an intent).")
    @Argument(help: "The Klarna order id (or another id of its payment).") var orderID: String
    @OptionGroup var remediation: RemediationOptions
    func run() async throws { try await remediation.run(.releaseRemaining, id: orderID) }
}
