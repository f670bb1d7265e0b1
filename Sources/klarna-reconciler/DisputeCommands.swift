import ArgumentParser
import Engine
import Foundation
import ReconcilerCore
import ReconcilerStore

struct DisputesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "disputes", abstract: "Klarna's disputes of the shop's payments, nearest deadline first (disputes.enabled).")

    @Flag(help: "Only disputes not closed.") var open = false
    @Option(name: .customLong("due-within"), help: "Only disputes whose deadline falls within DAYS from now.") var dueWithin: Int?
    @Option(help: "Only this account's disputes (an id of accounts:); by default every account's, with totals by account.") var account: AccountID?
    @Flag(help: "Print JSON.") var json = false
    @OptionGroup var options: ConfigOptions

    func validate() throws {
        if let dueWithin, !(0...3_650).contains(dueWithin) { throw ValidationError("--due-within must be 0 to 3650 days") }
    }

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: false)
        let now = Date()
        let views: [DisputeView]
        if let client = try await ControlClient.find(settings) {
            var query = "/v2/disputes?open=\(open)"
            if let dueWithin { query += "&due_within_days=\(dueWithin)" }
            if let account { query += "&account=\(account)" }
            guard let answer = try await client.get([DisputeView].self, query) else {
                throw ControlClient.Failed(description: "the daemon has no /v2/disputes: restart it after an upgrade")
            }
            views = answer
        } else {
            let store = try await options.openStore(settings, readOnly: true)
            views = try await OperatorDesk(store: store).disputes(
                openOnly: open, dueWithin: dueWithin.map { .seconds($0 * 86_400) }, account: account, now: now)
        }
        if json { return try printJSON(views) }
        if views.isEmpty {
            let followed = settings.accounts.contains(where: \.disputesEnabled)
            print(
                (account.map { "no disputes for account \($0)" } ?? "no disputes")
                    + (followed ? "" : " (disputes.enabled is false: the daemon does not follow them)"))
            return
        }
        let namesAccounts = views.contains { $0.dispute.account != .default }
        for view in views {
            let dispute = view.dispute
            let due = dispute.deadline.map { "deadline \($0.formatted(.iso8601)) (\(relative($0, now)))" } ?? "no deadline"
            print(
                "\(dispute.id)  \(dispute.state.rawValue)\(dispute.outcome.map { " \($0)" } ?? "")  \(due)\(namesAccounts ? "  account \(dispute.account)" : "")"
            )
            print(
                "  order \(dispute.orderID ?? "?")\(dispute.orphan ? " (not tracked: an orphan)" : ""), \(dispute.reason ?? "no reason"), \(dispute.amount.map(String.init) ?? "?") \(dispute.currency ?? "")\(dispute.heldAmount > 0 ? ", held" : ""), updated \(dispute.updatedAt.map { $0.formatted(.iso8601) } ?? "—")"
            )
            for action in view.actions {
                print(
                    "  \(action.kind.word) asked by \(action.requestedBy) at \(action.requestedAt.formatted(.iso8601)): \(action.state.rawValue)\(action.note.map { ", \($0)" } ?? "")"
                )
            }
        }
        print(DisputeTotals.line("Total", views.map(\.dispute)))
        if namesAccounts {
            for (account, disputes) in Dictionary(grouping: views.map(\.dispute), by: \.account).sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                print(DisputeTotals.line("  account \(account)", disputes))
            }
        }
    }
}

/// The totals under `disputes`: how many, how many open, and what is disputed and held per currency.
enum DisputeTotals {
    /// `Total: 3 disputes, 2 open; disputed 9000 EUR, 3000 USD; held 6000 EUR`.
    static func line(_ title: String, _ disputes: [TrackedDispute]) -> String {
        var disputed: [String: Int] = [:]
        var held: [String: Int] = [:]
        for dispute in disputes {
            let currency = dispute.currency ?? "?"
            disputed[currency] = Minor.add(disputed[currency] ?? 0, dispute.amount ?? 0)
            if dispute.heldAmount > 0 { held[currency] = Minor.add(held[currency] ?? 0, dispute.heldAmount) }
        }
        func amounts(_ byCurrency: [String: Int]) -> String {
            byCurrency.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
        }
        let open = disputes.filter(\.isOpen).count
        return "\(title): \(SettlementReportRenderer.counted(disputes.count, "dispute")), \(open) open; disputed \(amounts(disputed))"
            + (held.isEmpty ? "" : "; held \(amounts(held))")
    }
}

struct DisputeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dispute", abstract: "Answers a Klarna dispute, exactly once: accept the loss, submit evidence, or appeal.",
        subcommands: [AcceptLoss.self, Evidence.self, Appeal.self])

    struct AcceptLoss: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "accept-loss",
            abstract: "Accepts the loss of a dispute (INITIATED or PRE_ARBITRATION). Irreversible: the amount goes back to the customer.")

        @Argument(help: "The dispute id (payment_dispute_id).") var id: String
        @OptionGroup var action: ActionOptions

        func validate() throws { try action.validate(id) }
        func run() async throws { try await action.submit(DisputeAction.Kind.acceptLoss, id: id) }
    }

    struct Evidence: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "evidence",
            abstract: "Submits a file of evidence for a dispute (INITIATED): PDF, JPEG, PNG or DOCX, at most 7 MB, checked before anything is sent.")

        @Argument(help: "The dispute id (payment_dispute_id).") var id: String
        @Option(help: "The file (its name's extension must match its content).") var file: String
        @Option(help: "What the file shows (at most 1000 characters).") var description: String?
        @Option(help: "The shop's account of the case (at most 5000 characters).") var information: String?
        @OptionGroup var action: ActionOptions

        func validate() throws { try action.validate(id) }

        func run() async throws {
            let bytes: Data
            do {
                // The size first: a file far beyond Klarna's limit is refused without being read.
                let size = (try FileManager.default.attributesOfItem(atPath: file)[.size] as? NSNumber)?.intValue ?? 0
                guard size <= DisputeEvidence.maxSize else {
                    printError("klarna-reconciler: evidence refused before sending: \(DisputeEvidence.tooLarge(file, size: size))")
                    throw ExitCode(64)
                }
                bytes = try Data(contentsOf: URL(fileURLWithPath: file))
            } catch let exit as ExitCode {
                throw exit
            } catch {
                printError("klarna-reconciler: cannot read \(file): \(error.localizedDescription)")
                throw ExitCode.failure
            }
            switch DisputeEvidence.checked(fileName: file, file: bytes, description: description, additionalInformation: information) {
            case .failure(let problem):
                printError("klarna-reconciler: evidence refused before sending: \(problem)")
                throw ExitCode(64)
            case .success(let evidence):
                try await action.submit(.evidence, id: id, evidence: evidence)
            }
        }
    }

    struct Appeal: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "appeal", abstract: "Appeals a preliminary loss (PRE_ARBITRATION) with the shop's account of the case.")

        @Argument(help: "The dispute id (payment_dispute_id).") var id: String
        @Option(help: "Why the decision is wrong (1–10000 characters).") var information: String
        @OptionGroup var action: ActionOptions

        func validate() throws {
            try action.validate(id)
            if let problem = DisputeAction.informationProblem(information) { throw ValidationError("--information: \(problem)") }
        }

        func run() async throws { try await action.submit(.appeal, id: id, information: information) }
    }

    /// What every action takes: how long to wait, and the configuration.
    struct ActionOptions: ParsableArguments {
        @Option(help: "Seconds to wait for the daemon's answer (0: do not wait).") var wait: Int = 30
        @OptionGroup var options: ConfigOptions

        func validate(_ id: String) throws {
            guard DisputeAction.validDisputeID(id) else {
                throw ValidationError("ID must be 1–\(DisputeAction.maxDisputeIDLength) printable ASCII characters without spaces")
            }
            guard wait >= 0 else { throw ValidationError("--wait must be 0 or more seconds") }
        }

        /// Records the action in the store for the daemon's dispute service (it looks every 2 seconds), waits, and
        /// says how it ended. Exit 0: done, or under way when the wait ran out; 1: refused or failed.
        func submit(_ kind: DisputeAction.Kind, id: String, evidence: DisputeEvidence? = nil, information: String? = nil) async throws {
            let settings = try await options.load(needsKlarnaPassword: false)
            let store = try await options.openStore(settings, readOnly: false)
            let requester = OperatorDesk.requester(uid: getuid(), via: "the command line")
            let action = DisputeAction(
                disputeID: id, orderID: try await store.dispute(id)?.orderID, kind: kind, requestedAt: Date(), requestedBy: requester,
                evidence: evidence, information: information)
            switch try await OperatorDesk(store: store).request(action, now: Date(), wait: .seconds(wait)) {
            case .refused(let reason):
                printError("klarna-reconciler: \(reason)")
                throw ExitCode.failure
            case .recorded(let action, let existing):
                if existing, action.kind != kind {
                    printError(
                        "klarna-reconciler: \(action.kind.word) of dispute \(id) is under way (asked by \(action.requestedBy), \(action.state.rawValue)): one answer at a time, so this \(kind.word) is not recorded; ask again once it has ended"
                    )
                    throw ExitCode.failure
                }
                if existing { print("\(kind.word) of dispute \(id) was asked for already (by \(action.requestedBy)): that one goes on") }
                switch action.state {
                case .done:
                    print("\(action.kind.word) of dispute \(id): done (\(action.note ?? "Klarna took it"))")
                case .refused, .failed:
                    printError(
                        "klarna-reconciler: \(action.kind.word) of dispute \(id) \(action.state.rawValue): \(action.note ?? "no reason recorded")")
                    throw ExitCode.failure
                case .requested, .sent:
                    print(
                        "\(action.kind.word) of dispute \(id) recorded, not finished yet (\(action.state.rawValue), \(action.attempts) attempt(s)): the daemon goes on; `klarna-reconciler disputes` follows it"
                    )
                }
            }
        }
    }
}
