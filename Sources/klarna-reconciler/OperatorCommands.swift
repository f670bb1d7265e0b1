import ArgumentParser
import Daemon
import Engine
import Foundation
import KlarnaAPI
import ReconcilerCore
import ReconcilerStore

extension ReconcilerCore.PlaceOrderMode: ExpressibleByArgument {}
extension CapturePolicy: ExpressibleByArgument {}
extension PaymentPurpose: ExpressibleByArgument {}

/// Klarna ids are UUIDs or `krn:` names; anything printable without spaces up to 255 characters is accepted.
func validID(_ id: String) -> Bool {
    (1...255).contains(id.count) && id.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value != 0x7F && $0.value < 0x80 }
}

struct TrackCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "track", abstract: "Registers an HPP session for the daemon to follow to its end.")

    @Argument(help: "The HPP session id.") var hppSessionID: String
    @Option(name: .customLong("kp-session"), help: "The KP (payment) session id behind it.") var kpSessionID: String
    @Option(help: "How the HPP session was created: NONE (default), PLACE_ORDER or CAPTURE_ORDER.") var mode: ReconcilerCore.PlaceOrderMode = .none
    @Option(help: "The merchant's own reference (merchant_reference1 on the order).") var reference: String?
    @Option(help: "immediate, on_request or never (default: capture.default_policy).") var capture: CapturePolicy?
    @Option(help: "buy (default), tokenize or buy_and_tokenize.") var intent: PaymentPurpose = .buy
    @OptionGroup var named: AccountOption
    @OptionGroup var options: ConfigOptions

    func validate() throws {
        guard validID(hppSessionID) else { throw ValidationError("HPP_SESSION_ID must be 1–255 printable ASCII characters without spaces") }
        guard validID(kpSessionID) else { throw ValidationError("--kp-session must be 1–255 printable ASCII characters without spaces") }
        if let reference, reference.count > 255 { throw ValidationError("--reference is at most 255 characters (Klarna's limit)") }
    }

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: false)
        let account = try settings.commandAccount(named.account)
        let store = try await options.openStore(settings, readOnly: false)
        let now = Date()
        var session = TrackedSession(
            hppSessionID: hppSessionID, kpSessionID: kpSessionID, mode: mode, merchantReference: reference,
            capturePolicy: capture ?? account.capturePolicy, purpose: intent, trackedAt: now)
        session.account = account.id
        let description =
            "account \(account.id), mode \(mode.rawValue), capture \(session.capturePolicy.rawValue), intent \(intent.rawValue)"
        switch try await store.track(session, event: DomainEvent(.tracked, "tracking requested by the command line (\(description))"), at: now) {
        case .tracked:
            print("tracking HPP session \(hppSessionID) (KP session \(kpSessionID), \(description))")
        case .existing(let existing) where existing.account != session.account:
            printError(
                "klarna-reconciler: HPP session \(hppSessionID) is tracked already as account \(existing.account)'s, not \(session.account)'s; nothing changed"
            )
            throw ExitCode.failure
        case .existing(let existing):
            print(
                "HPP session \(hppSessionID) is already tracked since \(existing.trackedAt.formatted(.iso8601)) (\(existing.phase.rawValue)); nothing changed"
            )
        }
    }
}

struct CaptureCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "capture", abstract: "Asks the daemon to capture an order whose capture policy is on_request.")

    @Argument(help: "The Klarna order id.") var orderID: String
    @Option(help: "Amount in minor units (cents); default: the remaining authorized amount.") var amount: Int?
    @OptionGroup var options: ConfigOptions

    func validate() throws {
        guard validID(orderID) else { throw ValidationError("ORDER_ID must be 1–255 printable ASCII characters without spaces") }
        if let amount, amount <= 0 { throw ValidationError("--amount must be a positive number of minor units") }
    }

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: false)
        let store = try await options.openStore(settings, readOnly: false)
        switch try await store.requestCapture(orderID: orderID, amount: amount, at: Date()) {
        case .accepted(let id):
            print(
                "capture of \(amount.map(String.init) ?? "the remaining amount") requested for order \(orderID) (request \(id)); the daemon performs it once Klarna accepts the order"
            )
        case .unknownOrder:
            printError("klarna-reconciler: order \(orderID) is not tracked (track its HPP session first)")
            throw ExitCode.failure
        case .refused(let reason):
            printError("klarna-reconciler: \(reason)")
            throw ExitCode.failure
        }
    }
}

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status", abstract: "One screen: counts by state, oldest open item, next deadline, Klarna health, backlog.")

    @Flag(help: "Print JSON.") var json = false
    @Option(help: "Only this account's sessions and orders (an id of accounts:); the other lines are the daemon's.") var account: AccountID?
    @OptionGroup var options: ConfigOptions

    func validate() throws {
    }

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: false)
        let now = Date()
        var summary: StatusSummary
        if let client = try await ControlClient.find(settings) {
            guard let answer = try await client.get(StatusSummary.self, "/v2/status") else {
                throw ControlClient.Failed(description: "the daemon has no /v2/status: restart it after an upgrade")
            }
            summary = answer
        } else {
            summary = try await OperatorDesk(store: try await options.openStore(settings, readOnly: true)).status(now: now)
        }
        if let account {
            // An account no longer configured still shows what the store holds of it.
            if summary.accounts?[account.rawValue] == nil { _ = try settings.configuredAccount(account) }
            let counts = summary.accounts?[account.rawValue] ?? StatusSummary.AccountCounts()
            summary.sessionsByPhase = counts.sessionsByPhase
            summary.ordersByPhase = counts.ordersByPhase
            summary.accounts = summary.accounts?.filter { $0.key == account.rawValue }
        }
        // The disk is read here, beside the daemon, as the daemon judges it: a full one makes the command fail.
        let disk = DiskSetup.pressure(settings)
        if json {
            try printJSON(summary)
            if disk.pressure != nil { throw ExitCode.failure }
            return
        }
        func counts(_ values: [String: Int]) -> String {
            values.isEmpty ? "none" : values.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
        }
        func when(_ date: Date?) -> String {
            guard let date else { return "—" }
            return "\(date.formatted(.iso8601)) (\(relative(date, now)))"
        }
        print("store:          \(settings.storeDescription)")
        print("sessions:       \(counts(summary.sessionsByPhase))\(account.map { " (account \($0))" } ?? "")")
        print("orders:         \(counts(summary.ordersByPhase))\(account.map { " (account \($0))" } ?? "")")
        // Totals by account: every account configured or with payments in the store.
        let known = Set(settings.accounts.map(\.id.rawValue)).union(summary.accounts.map { Array($0.keys) } ?? [])
        if account == nil, known.count > 1 || known.first != AccountID.default.rawValue {
            for name in known.sorted() {
                let of = summary.accounts?[name] ?? StatusSummary.AccountCounts()
                let sessions = of.sessionsByPhase.values.reduce(0, +), orders = of.ordersByPhase.values.reduce(0, +)
                let configured = settings.account(AccountID(rawValue: name) ?? .default) == nil ? " (not configured: its work waits)" : ""
                print(
                    "account \(name): \(sessions) session(s): \(counts(of.sessionsByPhase)); \(orders) order(s): \(counts(of.ordersByPhase))\(configured)"
                )
            }
        }
        print("intents:        \(counts(summary.intentsByState))")
        print("outcomes:       \(counts(summary.outcomesByKind))")
        print("oldest open:    \(summary.oldestOpenID.map { "\($0) since \(when(summary.oldestOpenSince))" } ?? "—")")
        print("next due:       \(when(summary.nextDueAt))")
        print("next deadline:  \(summary.nextDeadlineWhat.map { "\($0) at \(when(summary.nextDeadline))" } ?? "—")")
        print("backlog:        \(summary.backlog) due now, \(summary.undeliveredOutcomes) outcomes not yet in the outbox")
        print("held:           \(summary.held)\(summary.held > 0 ? " (klarna-reconciler list --state held; release ID)" : "")")
        print("Klarna success: \(when(summary.lastKlarnaSuccess))")
        print("Klarna error:   \(when(summary.lastKlarnaError))\(summary.lastKlarnaErrorDetail.map { " \($0)" } ?? "")")
        print(
            "refused input:  \(summary.rejectionsLastDay) in the last 24 h\(summary.lastRejection.map { "; last \($0)" } ?? "") (spool files: klarna-reconciler quarantine list)"
        )
        let free = disk.readings.map { "\($0.role.rawValue) \(ByteCount($0.availableBytes)) free" }.joined(separator: ", ")
        print("disk:           \(disk.pressure.map { "\($0.summary); deliveries are refused (503 disk_full) until space returns" } ?? free)")
        if disk.pressure != nil { throw ExitCode.failure }
    }
}

struct ListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "Lists sessions, orders and intents, newest first.")

    @Option(
        help:
            "Only this phase or outcome (polling, authorized, ordered, closed, pending_fraud, awaiting_capture, needs_attention, …), intent state (sent, ambiguous, …), or held."
    )
    var state: String?
    @Option(help: "At most this many of each.") var limit: Int = 100
    @Option(help: "Only this account's sessions and orders and their intents (an id of accounts:).") var account: AccountID?
    @Flag(help: "Print JSON.") var json = false
    @OptionGroup var options: ConfigOptions

    func validate() throws {
    }

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: false)
        let listing: StoreListing
        if let client = try await ControlClient.find(settings) {
            guard
                let answer = try await client.get(
                    StoreListing.self,
                    "/v2/payments?limit=\(max(1, limit))" + (state.map { "&state=\(ControlClient.escape($0))" } ?? "")
                        + (account.map { "&account=\($0)" } ?? ""))
            else {
                throw ControlClient.Failed(description: "the daemon has no /v2/payments: restart it after an upgrade")
            }
            listing = answer
        } else {
            listing = try await OperatorDesk(store: try await options.openStore(settings, readOnly: true)).listing(
                state: state, account: account, limit: limit)
        }
        if json { return try printJSON(listing) }
        print("SESSIONS (\(listing.sessions.count))")
        for session in listing.sessions {
            print(
                "  \(session.hppSessionID)  \(session.phase.rawValue)\(session.outcome.map { "/\($0.rawValue)" } ?? "")  hpp \(session.hppStatus?.rawValue ?? "—")  kp \(session.kpSessionID)  account \(session.account)  \(session.merchantReference ?? "")"
            )
        }
        print("ORDERS (\(listing.orders.count))")
        for order in listing.orders {
            print(
                "  \(order.orderID)  \(order.phase.rawValue)\(order.outcome.map { "/\($0.rawValue)" } ?? "")  fraud \(order.fraudStatus?.rawValue ?? "—")  captured \(order.capturedAmount)/\(order.orderAmount.map(String.init) ?? "?") \(order.currency ?? "")  account \(order.account)  \(order.merchantReference ?? "")"
            )
        }
        print("INTENTS (\(listing.intents.count))")
        for intent in listing.intents {
            print(
                "  \(intent.key)  \(intent.kind.rawValue) \(intent.state.rawValue)  attempts \(intent.attempts)  \(intent.subject)\(intent.lastError.map { "  last error: \($0)" } ?? "")"
            )
        }
    }
}

struct ShowCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show", abstract: "The whole timeline of one payment: by HPP session, KP session, order id or merchant reference.")

    @Argument(help: "An HPP session id, KP session id, order id or merchant reference.") var id: String
    @Flag(help: "Print JSON.") var json = false
    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: false)
        let story: PaymentStory?
        // nil: the daemon asked serves no settlement lines (one older than this command).
        let settled: [LineReconciliation]?
        if let client = try await ControlClient.find(settings) {
            story = try await client.get(PaymentStory.self, "/v2/payments/\(ControlClient.escape(id))")
            settled = try await client.get([LineReconciliation].self, "/v2/payments/\(ControlClient.escape(id))/settlements")
        } else {
            let store = try await options.openStore(settings, readOnly: true)
            story = try await OperatorDesk(store: store).story(id)
            if let orders = story?.orders, !orders.isEmpty {
                settled = try await store.settlementLines(orderIDs: orders.map(\.orderID))
            } else {
                settled = []
            }
        }
        guard let found = story else {
            printError("klarna-reconciler: nothing tracked matches \(id)")
            throw ExitCode.failure
        }
        let lines = settled?.map(SettlementLineView.init)
        if json { return try printJSON(ShownPayment(story: found, settlementLines: lines)) }
        for (key, hold) in found.holds.sorted(by: { $0.key < $1.key }) {
            print("HELD \(key) since \(hold.since.formatted(.iso8601)) by \(hold.by): no Klarna call until `klarna-reconciler release \(id)`")
        }
        for session in found.sessions {
            print("HPP session \(session.hppSessionID)  (KP session \(session.kpSessionID), account \(session.account))")
            print(
                "  phase \(session.phase.rawValue)\(session.outcome.map { ", outcome \($0.rawValue)" } ?? ""), HPP status \(session.hppStatus?.rawValue ?? "—"), mode \(session.mode?.rawValue ?? "inferred"), capture \(session.capturePolicy.rawValue), intent \(session.purpose.rawValue)"
            )
            print(
                "  reference \(session.merchantReference ?? "—"), tracked \(session.trackedAt.formatted(.iso8601)), read \(session.reads) time\(session.reads == 1 ? "" : "s")\(session.expiresAt.map { ", expires \($0.formatted(.iso8601))" } ?? "")\(session.tokenExpiresAt.map { ", token valid until \($0.formatted(.iso8601))" } ?? "")"
            )
        }
        for order in found.orders {
            print("Order \(order.orderID)  (\(order.klarnaReference ?? "no Klarna reference"), account \(order.account))")
            print(
                "  phase \(order.phase.rawValue)\(order.outcome.map { ", outcome \($0.rawValue)" } ?? ""), status \(order.status?.rawValue ?? "—"), fraud \(order.fraudStatus?.rawValue ?? "—"), captured \(order.capturedAmount) of \(order.orderAmount.map(String.init) ?? "?") \(order.currency ?? ""), capture \(order.capturePolicy.rawValue)\(order.expiresAt.map { ", authorization until \($0.formatted(.iso8601))" } ?? "")"
            )
        }
        let refunds = found.intents.filter { $0.kind == .refund }
        if !refunds.isEmpty { print("Refunds") }
        for refund in refunds {
            print(
                "  \(refund.amount ?? 0) reference \(refund.reference ?? "—"): \(refund.state.rawValue)\(refund.result.map { ", refund id \($0)" } ?? ""), \(refund.attempts) attempt(s), asked \(refund.createdAt.formatted(.iso8601))\(refund.lastError.map { ", last error: \($0)" } ?? "")"
            )
        }
        let disputes = found.disputes ?? []
        if !disputes.isEmpty { print("Disputes") }
        for dispute in disputes {
            print(
                "  \(dispute.id) \(dispute.state.rawValue)\(dispute.outcome.map { " \($0)" } ?? ""), \(dispute.reason ?? "no reason"), \(dispute.amount.map(String.init) ?? "?") \(dispute.currency ?? "")\(dispute.deadline.map { ", deadline \($0.formatted(.iso8601))" } ?? "")"
            )
            for action in (found.disputeActions ?? []) where action.disputeID == dispute.id {
                print("    \(action.kind.word) asked by \(action.requestedBy): \(action.state.rawValue)\(action.note.map { ", \($0)" } ?? "")")
            }
        }
        if !found.intents.isEmpty { print("Intents") }
        for intent in found.intents {
            print(
                "  \(intent.kind.rawValue) \(intent.state.rawValue), \(intent.attempts) attempt(s), key \(intent.key)\(intent.result.map { ", result \($0)" } ?? "")\(intent.lastError.map { ", last error: \($0)" } ?? "")"
            )
        }
        print("Timeline")
        for event in found.events {
            let extras = event.detail.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            print(
                "  \(event.at.formatted(.iso8601))  \(event.kind.count >= 22 ? event.kind : event.kind.padding(toLength: 22, withPad: " ", startingAt: 0)) \(event.message)\(extras.isEmpty ? "" : "  [\(extras)]")"
            )
        }
        if !found.outcomes.isEmpty { print("Outcomes") }
        for stored in found.outcomes {
            print(
                "  \(stored.at.formatted(.iso8601))  \(stored.outcome.kind.rawValue): \(stored.outcome.reason)\(stored.outboxWritten ? "" : " (not yet in the outbox)")"
            )
        }
        guard !found.orders.isEmpty else { return }
        guard let settlementLines = lines else { return print("Settlement lines: the daemon does not serve them (restart it after an upgrade)") }
        print(settlementLines.isEmpty ? "Settlement lines: none (no recorded payout names this payment's orders)" : "Settlement lines")
        for line in settlementLines { print("  " + SettlementReportRenderer.line(line)) }
    }
}

/// `show --json`: the payment's story with its settlement lines beside its other keys (`settlement_lines`; null when
/// the daemon asked does not serve them).
struct ShownPayment: Encodable {
    let story: PaymentStory
    let settlementLines: [SettlementLineView]?

    private enum Keys: String, CodingKey { case settlementLines }

    func encode(to encoder: any Encoder) throws {
        try story.encode(to: encoder)
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(settlementLines, forKey: .settlementLines)
    }
}

/// `--json`: the document the operators' socket serves (``OperatorJSON``), pretty-printed.
func printJSON<T: Encodable>(_ value: T) throws {
    print(String(decoding: try OperatorJSON.encoder(pretty: true).encode(value), as: UTF8.self))
}

func relative(_ date: Date, _ now: Date) -> String {
    let seconds = Int(date.timeIntervalSince(now).rounded())
    let magnitude = abs(seconds)
    let text =
        magnitude < 120
        ? "\(magnitude) s" : magnitude < 7_200 ? "\(magnitude / 60) min" : magnitude < 172_800 ? "\(magnitude / 3_600) h" : "\(magnitude / 86_400) d"
    return seconds > 0 ? "in \(text)" : "\(text) ago"
}
