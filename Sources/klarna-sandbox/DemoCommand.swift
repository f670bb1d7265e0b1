import ArgumentParser
import ChildProcess
import Foundation
import HTTPServer
import KlarnaAPI
import KlarnaSandbox
import Logging
import ReconcilerCore
import ReconcilerStore
import SQLiteBackend

struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Runs the Klarna sandbox and the daemon in a temporary folder, tracks sample payments and shows what happened."
    )

    @Flag(name: .long, help: "Keep the temporary folder (config, store, outbox, daemon log) afterwards.")
    var keep = false

    func run() async throws {
        let folder = NSTemporaryDirectory() + "klarna-reconciler-demo-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let demo = try await Demo(folder: folder)
        defer {
            demo.stopDaemon()
            if !keep { try? FileManager.default.removeItem(atPath: folder) }
        }
        try await demo.run()
        print(keep ? "\nEverything is in \(folder)" : "\n(run with --keep to look at the config, store, outbox and daemon log)")
    }
}

/// The scripted tour: each step says what the shop does and what the daemon made of it.
final class Demo: @unchecked Sendable {
    let folder: String
    /// The shop's second Klarna account, in the US: another merchant with its own credentials (docs/accounts.md).
    static let usMerchant = SandboxMerchant(id: "K200002", username: "K200002_us", password: "us-sandbox-secret")
    let sandbox = KlarnaSandbox(configuration: .init(otherMerchants: [Demo.usMerchant]))
    let baseURL: String
    private let serving: Task<Void, any Error>
    private var daemon: ChildProcess?
    /// The daemon's binary, installed or built beside this one.
    private static let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        .deletingLastPathComponent().appendingPathComponent("klarna-reconciler")

    init(folder: String) async throws {
        self.folder = folder
        let sandbox = self.sandbox
        let server = try await HTTPServer.bind(
            .tcp(host: "127.0.0.1", port: 0), configuration: KlarnaSandbox.serverConfiguration, logger: Logger(label: "demo.sandbox")
        ) { await sandbox.handle($0) }
        serving = Task { try await server.run() }
        baseURL = "http://127.0.0.1:\(server.port!)"
    }

    deinit { serving.cancel() }

    func run() async throws {
        step(1, "A Klarna sandbox on \(baseURL) and the daemon in \(folder)")
        try writeConfig()
        try await startDaemon()
        detail("daemon ready (pid \(daemon!.processIdentifier)); config.yaml, state/state.sqlite and outbox/ live in the folder")

        step(2, "The shop creates payments and tells the daemon to track them (klarna-reconciler track …)")
        let lines = [
            SandboxOrderLine(name: "Running shoes", quantity: 1, unitPrice: 19_900, totalAmount: 19_900, taxRate: 1_900, totalTaxAmount: 3_177)
        ]
        func payment(
            _ reference: String, mode: String = "NONE", fraud: String? = nil, completes: String = "COMPLETED", after: Double = 1.5,
            intent: String? = nil
        ) throws -> CreatedSession {
            let created = try sandbox.createSession(
                SessionSpec(
                    purchaseCurrency: "EUR", purchaseCountry: "DE", locale: "de-DE", orderLines: lines, merchantReference: reference,
                    placeOrderMode: mode, intent: intent, fraudStatus: fraud, fraudDecisionAfterSeconds: fraud == nil ? nil : 4,
                    fraudDecision: fraud == nil ? nil : "ACCEPTED",
                    schedule: [ScheduleStep(afterSeconds: 0.5, status: "IN_PROGRESS"), ScheduleStep(afterSeconds: after, status: completes)]))
            references[created.hppSessionId] = reference
            return created
        }
        func usPayment(_ reference: String) throws -> CreatedSession {
            let created = try sandbox.createSession(
                SessionSpec(
                    purchaseCurrency: "USD", purchaseCountry: "US", locale: "en-US", orderLines: lines, merchantReference: reference,
                    schedule: [ScheduleStep(afterSeconds: 0.5, status: "IN_PROGRESS"), ScheduleStep(afterSeconds: 1.5, status: "COMPLETED")],
                    merchant: Demo.usMerchant.id))
            references[created.hppSessionId] = reference
            return created
        }
        let payments: [(String, CreatedSession, [String])] = [
            ("NONE, capture immediate", try payment("shop-1001"), []),
            ("PLACE_ORDER (HPP places the order)", try payment("shop-1002", mode: "PLACE_ORDER"), ["--mode", "PLACE_ORDER"]),
            ("CAPTURE_ORDER (HPP also captures)", try payment("shop-1003", mode: "CAPTURE_ORDER"), ["--mode", "CAPTURE_ORDER"]),
            ("the consumer cancels", try payment("shop-1004", completes: "CANCELLED"), []),
            ("fraud review PENDING, then ACCEPTED", try payment("shop-1005", fraud: "PENDING"), []),
            ("capture on request", try payment("shop-1006"), ["--capture", "on_request"]),
            ("completes while Klarna is down", try payment("shop-1007", after: 2.5), []),
            (
                "a subscription: the first month bought and the payment method tokenized for the renewals",
                try payment("shop-sub-3001", intent: "buy_and_tokenize"), ["--intent", "buy_and_tokenize"]
            ),
            ("the shop's US account: its own credentials and budget", try usPayment("shop-us-2001"), ["--account", "us"]),
        ]
        for (what, created, options) in payments {
            let output = try await cli(
                ["track", created.hppSessionId, "--kp-session", created.kpSessionId, "--reference", referenceOf(created)] + options)
            detail("\(referenceOf(created)): \(what)")
            detail("  \(output.trimmingCharacters(in: .whitespacesAndNewlines))")
        }

        step(3, "Klarna has an outage: every call answers 503 for three seconds")
        sandbox.addFault(SandboxFault(route: "*", kind: .status, status: 503, count: nil))
        try await Task.sleep(for: .seconds(3))
        sandbox.clearFaults()
        let failed = sandbox.requests().filter { $0.fault != nil }.count
        detail("\(failed) calls failed with 503; the daemon backed off and retried (see the timeline below)")

        step(4, "The shop ships shop-1006 and asks for the capture (klarna-reconciler capture ORDER_ID)")
        let store = try SQLiteStore(path: "\(folder)/state/state.sqlite", readOnly: true)
        let onRequest = try await waitFor("shop-1006 to be placed") {
            try await store.timeline(for: "shop-1006").orders.first { $0.phase == .awaitingCapture }?.orderID
        }
        detail(try await cli(["capture", onRequest]).trimmingCharacters(in: .whitespacesAndNewlines))

        step(5, "Webhooks: a forwarder hands Klarna's callbacks to the daemon over the unix socket and through the spool")
        let viaSocket = try payment("shop-1008")
        try sandbox.setHPPStatus(viaSocket.hppSessionId, "COMPLETED")
        let callbackURL = try await cli([
            "callback-url", "--kind", "hpp-status", "--kp-session", viaSocket.kpSessionId, "--base", "https://shop.example/klarna/hpp-status",
        ])
        .trimmingCharacters(in: .whitespacesAndNewlines)
        detail("shop-1008 was never tracked; its HPP session was created with this status_update URL (klarna-reconciler callback-url):")
        detail("  \(callbackURL.replacingOccurrences(of: viaSocket.kpSessionId, with: "…"))")
        let query = String(callbackURL[callbackURL.index(after: callbackURL.firstIndex(of: "?")!)...])
            .replacingOccurrences(of: "{{session_id}}", with: viaSocket.hppSessionId)
        let event = #"{"event_id":"demo-event-1","session":{"session_id":"\#(viaSocket.hppSessionId)","status":"COMPLETED"}}"#
        for attempt in 1...2 {
            let answer = try await run(
                URL(fileURLWithPath: "/usr/bin/curl"),
                [
                    "-s", "--unix-socket", "\(folder)/ingest.sock", "-X", "POST", "-H", "Content-Type: application/json", "--data-binary", event,
                    "http://localhost/v1/webhooks/hpp-status?\(query)",
                ])
            detail("curl --unix-socket ingest.sock … (delivery \(attempt)): \(answer.trimmingCharacters(in: .whitespacesAndNewlines))")
        }
        let viaSpool = try payment("shop-1009")
        let request = #"{"hpp_session_id":"\#(viaSpool.hppSessionId)","kp_session_id":"\#(viaSpool.kpSessionId)","merchant_reference":"shop-1009"}"#
        try request.write(toFile: "\(folder)/spool/tmp/0001-track.json", atomically: false, encoding: .utf8)
        guard rename("\(folder)/spool/tmp/0001-track.json", "\(folder)/spool/new/0001-track.json") == 0 else {
            throw DemoFailure(description: "cannot write to the spool")
        }
        detail("shop-1009: a track request written to spool/tmp/ and renamed into spool/new/")
        try "{ this is not JSON".write(toFile: "\(folder)/spool/tmp/0002-broken.json", atomically: false, encoding: .utf8)
        _ = rename("\(folder)/spool/tmp/0002-broken.json", "\(folder)/spool/new/0002-broken.json")
        _ = try await waitFor("the broken spool file to be quarantined") { () -> Bool? in
            FileManager.default.fileExists(atPath: "\(folder)/spool/quarantine/0002-broken.json.reason") ? true : nil
        }
        detail("a broken file in spool/new/ went to quarantine/ (klarna-reconciler quarantine list):")
        detail("  " + (try await cli(["quarantine", "list"])).trimmingCharacters(in: .whitespacesAndNewlines))
        let tracked = payments + [("HPP callback over the socket", viaSocket, []), ("track request through the spool", viaSpool, [])]

        step(6, "Waiting until every payment has reached its end")
        _ = try await waitFor("every payment to finish", timeout: .seconds(120)) { () -> Bool? in
            let summary = try await store.summary(now: Date())
            let open =
                (summary.sessionsByPhase["polling"] ?? 0) + (summary.sessionsByPhase["authorized"] ?? 0)
                + summary.ordersByPhase.filter { $0.key != "closed" }.values.reduce(0, +)
            return open == 0 && summary.undeliveredOutcomes == 0 ? true : nil
        }
        for (_, created, _) in tracked {
            let timeline = try await store.timeline(for: created.hppSessionId)
            let outcomes = timeline.outcomes.map { $0.outcome.kind.rawValue }.joined(separator: ", ")
            detail("\(referenceOf(created)): \(outcomes)")
        }

        step(7, "The customer sends the shoes of shop-1001 back: klarna-reconciler refund ORDER_ID --amount --reference")
        let returned = try await waitFor("shop-1001's order") { try await store.timeline(for: "shop-1001").orders.first?.orderID }
        let refund = ["refund", returned, "--amount", "19900", "--reference", "rma-1001", "--description", "Running shoes returned"]
        detail(try await cli(refund).trimmingCharacters(in: .whitespacesAndNewlines).replacingOccurrences(of: "\n", with: "\n   "))
        detail("asked again with the same reference (a retry by the shop): the same refund, not another")
        detail("  " + (try await cli(refund).split(separator: "\n").first.map(String.init) ?? ""))
        _ = try await waitFor("the refund's outcome in the outbox") { () -> Bool? in
            try await store.undeliveredOutcomes(now: Date(), limit: 100).isEmpty ? true : nil
        }

        step(8, "A month later shop-sub-3001's subscription renews: klarna-reconciler charge TOKEN --amount --currency --reference")
        let subscription = try await waitFor("shop-sub-3001's customer token") {
            try await store.timeline(for: "shop-sub-3001").sessions.first?.customerTokenID
        }
        detail("the customer token Klarna created at the first purchase: \(Redact.tail(subscription)) (in full in the outbox only)")
        let renewal = ["charge", subscription, "--amount", "19900", "--currency", "EUR", "--reference", "shop-sub-3001-2027-01"]
        detail(try await cli(renewal).trimmingCharacters(in: .whitespacesAndNewlines).replacingOccurrences(of: "\n", with: "\n   "))
        detail("asked again with the same reference (the shop's scheduler ran twice): the same charge, not another")
        detail("  " + (try await cli(renewal).split(separator: "\n").first.map(String.init) ?? ""))
        let renewed = try await waitFor("the renewal's capture") { () -> [String]? in
            let kinds = try await store.timeline(for: "shop-sub-3001-2027-01").outcomes.map(\.outcome.kind)
            return kinds.contains(.captured) ? kinds.map(\.rawValue) : nil
        }
        detail("outcomes of the renewal's order: \(renewed.joined(separator: ", "))")

        step(9, "A customer disputes shop-1002's purchase: Klarna's signed webhook reaches the daemon, which reads the dispute")
        let disputedOrder = try await waitFor("shop-1002's order") { try await store.timeline(for: "shop-1002").orders.first?.orderID }
        // 70 hours to answer: inside the 72-hour warning already, as a dispute the shop hears of late.
        let dispute = try sandbox.openDispute(order: disputedOrder, reason: "PRODUCTS_OR_SERVICES_NOT_RECEIVED", respondWithin: .seconds(70 * 3_600))
        guard let hook = sandbox.webhooks().last else { throw DemoFailure(description: "the sandbox sent no dispute webhook") }
        let delivered = try await run(
            URL(fileURLWithPath: "/usr/bin/curl"),
            [
                "-s", "--unix-socket", "\(folder)/ingest.sock", "-X", "POST", "-H", "Content-Type: application/json", "-H",
                "Klarna-Signature: \(hook.signature)", "-H", "Klarna-Signing-Key-Id: \(hook.signingKeyId)", "--data-binary", hook.body,
                "http://localhost/v1/webhooks/klarna",
            ])
        detail("\(hook.eventType), signed (HMAC-SHA256, key \(hook.signingKeyId)): \(delivered.trimmingCharacters(in: .whitespacesAndNewlines))")
        let warned = try await waitFor("the dispute's deadline warning") { () -> [String]? in
            let kinds = try await store.timeline(for: disputedOrder).outcomes.map(\.outcome.kind)
            return kinds.contains(.disputeDeadline) ? kinds.filter(\.isDispute).map(\.rawValue) : nil
        }
        detail("outcomes: \(warned.joined(separator: ", ")) (the warning at 72 h: the deadline is 70 h away)")
        print(try await cli(["disputes", "--open"]).split(separator: "\n").map { "   " + $0 }.joined(separator: "\n"))
        let receipt = "\(folder)/delivery-receipt.pdf"
        try "%PDF-1.4\n% a signed delivery receipt\n".write(toFile: receipt, atomically: true, encoding: .utf8)
        detail("the shop answers with its delivery receipt (klarna-reconciler dispute evidence ID --file delivery-receipt.pdf):")
        let answered = try await cli(["dispute", "evidence", dispute.paymentDisputeId, "--file", receipt, "--description", "signed delivery receipt"])
        detail("  " + answered.trimmingCharacters(in: .whitespacesAndNewlines))
        guard sandbox.dispute(dispute.paymentDisputeId)?.state == "REPRESENTMENT",
            sandbox.requests().filter({ $0.route == "disputes.represent" }).count == 1
        else {
            throw DemoFailure(description: "the evidence did not reach Klarna exactly once")
        }

        step(10, "The outbox: one JSON file per outcome, for the shop's backend")
        let files = (try FileManager.default.contentsOfDirectory(atPath: "\(folder)/outbox/new")).sorted()
        for file in files { detail(file) }

        step(11, "klarna-reconciler status")
        print(try await cli(["status"]).split(separator: "\n").map { "   " + $0 }.joined(separator: "\n"))

        step(12, "klarna-reconciler show shop-1007 (the payment that completed during the outage)")
        print(try await cli(["show", "shop-1007"]).split(separator: "\n").map { "   " + $0 }.joined(separator: "\n"))

        step(13, "What Klarna saw")
        let effects = sandbox.effects()
        detail(
            "side effects: "
                + Dictionary(grouping: effects, by: \.kind).map { "\($0.value.count) \($0.key.rawValue)" }.sorted().joined(separator: ", "))
        let orders: [String: [SandboxEffect]] = Dictionary(grouping: effects.filter { $0.kind == .orderPlaced }) { $0.kpSessionId ?? "" }
        let captures: [String: [SandboxEffect]] = Dictionary(grouping: effects.filter { $0.kind == .captured }) { $0.orderId ?? "" }
        guard orders.values.allSatisfy({ $0.count == 1 }), captures.values.allSatisfy({ $0.count == 1 }),
            effects.filter({ $0.kind == .refunded }).count == 1, effects.filter({ $0.kind == .tokenCharged }).count == 1
        else {
            throw DemoFailure(description: "a side effect happened twice")
        }

        step(14, "Klarna pays out what was captured, less its fees and the refund, and a sale for an order nobody placed")
        let orphan = try sandbox.inventTransaction(amount: 4_200, currency: "EUR", purchaseCountry: "DE")
        detail("order \(orphan): paid by a customer at Klarna, never seen by the shop (POST /_sandbox/settlements/invent)")
        let made = try sandbox.settle()
        for payout in made {
            let fees = payout.transactions.filter { $0.type == "FEE" }.count
            let account = payout.merchantId == Demo.usMerchant.id ? "the US account's" : "the default account's"
            detail(
                "payout \(payout.paymentReference), \(account): \(payout.transactions.count) transactions (\(fees) FEE), net \(payout.totals.settlementAmount) \(payout.currencyCode) (POST /_sandbox/settlements/payouts)"
            )
        }
        // Klarna pays each merchant on its own; each account's settlement sync lists its own payouts.
        let payouts = made
        // The daemon syncs settlements when it starts, then every settlements.sync_interval_minutes (at least one).
        try await restartDaemon()
        detail("daemon restarted (pid \(daemon!.processIdentifier)): it syncs settlements at start, then every settlements.sync_interval_minutes")
        let recorded = try await waitFor("the daemon to fetch and match the payout") { () -> [PayoutReconciliation]? in
            var found: [PayoutReconciliation] = []
            for payout in payouts {
                guard let one = try await store.payouts(since: nil, paymentReference: payout.paymentReference, account: nil).first else { return nil }
                found.append(one)
            }
            return found
        }
        guard recorded.contains(where: { $0.findings(.orphan).contains { $0.orderID == orphan } }),
            recorded.contains(where: { $0.lines.contains { $0.line.kind == .fee } }),
            recorded.contains(where: { $0.lines.contains { $0.line.kind == .return && $0.source == .daemon } })
        else {
            let found = recorded.map {
                "\($0.report.paymentReference): lines \($0.lines.map(\.line.kind)), findings \($0.report.findings.map(\.kind))"
            }
            throw DemoFailure(
                description:
                    "the daemon recorded the payout without the orphan, a FEE line or the refund's RETURN matched: \(found.joined(separator: "; "))")
        }
        for (payout, one) in zip(payouts, recorded) where (payout.merchantId == Demo.usMerchant.id) != (one.account.rawValue == "us") {
            throw DemoFailure(
                description: "payout \(payout.paymentReference) of merchant \(payout.merchantId) was recorded as account \(one.account)'s")
        }
        detail(
            "the daemon fetched each account's payouts with that account's credentials and matched every line against that account's ledger, the refund's RETURN by its refund id"
        )

        step(15, "klarna-reconciler settlements")
        print(try await cli(["settlements"]).split(separator: "\n").map { "   " + $0 }.joined(separator: "\n"))

        let stopped = stopDaemon()
        print("\nDaemon stopped with SIGTERM: exit \(stopped).")
        print(
            "Done: every payment ended; no order was placed, captured, refunded or charged twice; the dispute was warned of and answered once; Klarna's payout, refund included, was matched against the ledger."
        )
    }

    /// The shop's reference of each payment, by HPP session id.
    private var references: [String: String] = [:]

    private func referenceOf(_ created: CreatedSession) -> String { references[created.hppSessionId] ?? created.hppSessionId }

    private func writeConfig() throws {
        try "sandbox-secret\n".write(toFile: "\(folder)/klarna-password", atomically: true, encoding: .utf8)
        try "\(Demo.usMerchant.password)\n".write(toFile: "\(folder)/klarna-password.us", atomically: true, encoding: .utf8)
        try "demo-callback-key-\(UUID().uuidString)\n".write(toFile: "\(folder)/callback-key", atomically: true, encoding: .utf8)
        // The sandbox signs its Klarna Network and dispute webhooks with this key.
        let key = KlarnaSandbox.Configuration.SigningKey(id: "sandbox-signing-key-1", secret: "sandbox-webhook-secret")
        try #"{"\#(key.id)": "\#(key.secret)"}"#.write(toFile: "\(folder)/signing-keys", atomically: true, encoding: .utf8)
        try """
        # Written by `klarna-sandbox demo`; see etc/config.yaml for every key.
        klarna:
          request_timeout_seconds: 2
        # Two Klarna accounts: the shop's European one (default: what names no account is its) and its US one.
        accounts:
          - id: default
            base_url: \(baseURL)
            username: sandbox-merchant
            # Klarna's webhooks (disputes, Klarna Network) name the merchant: routed to the account with its id.
            merchant_id: \(KlarnaSandbox.Configuration.primaryMerchantID)
            password_file: klarna-password
          - id: us
            base_url: \(baseURL)
            username: \(Demo.usMerchant.username)
            password_file: klarna-password.us
            # Its payouts and disputes are followed too (settlements.enabled and disputes.enabled below), each with the
            # US credentials and within the US account.
        store:
          path: state/state.sqlite
        outbox:
          dir: outbox
        disk:
          # A demo's store keeps a small reserve; an installed one keeps 1 % of its filesystem, at most 1 GiB.
          reserve_mb: 8
        ingest:
          socket: ingest.sock
          spool_dir: spool
          spool_rescan_seconds: 1
        callback_token:
          key_file: callback-key
        polling:
          dense_interval_seconds: 0.5
          pending_fraud_interval_seconds: 1
        retry:
          initial_delay_ms: 300
          max_delay_seconds: 2
        engine:
          wakeup_interval_ms: 200
          # A create-order cut off by the outage waits this long before Klarna is read again (the shortest allowed).
          create_order_settle_seconds: 30
        settlements:
          enabled: true
          sync_interval_minutes: 60
          settle_within_days: 7
        disputes:
          enabled: true
        webhook_signing:
          keys_file: signing-keys
        """.write(toFile: "\(folder)/config.yaml", atomically: true, encoding: .utf8)
    }

    /// Starts the daemon, its output appended to daemon.log, and waits for its ready line.
    private func startDaemon() async throws {
        let process = ChildProcess()
        process.executableURL = Self.executable
        process.arguments = ["run", "--config", "\(folder)/config.yaml"]
        if !FileManager.default.fileExists(atPath: "\(folder)/daemon.log") {
            _ = FileManager.default.createFile(atPath: "\(folder)/daemon.log", contents: nil)
        }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: "\(folder)/daemon.log"))
        log.seekToEndOfFile()
        let readyLines = daemonLog.components(separatedBy: " ready: ").count
        process.standardOutput = log
        process.standardError = log
        try process.run()
        daemon = process
        _ = try await waitFor("the daemon to be ready") { () -> Bool? in
            guard process.isRunning else { throw DemoFailure(description: "the daemon exited: \(self.daemonLog)") }
            return self.daemonLog.components(separatedBy: " ready: ").count > readyLines ? true : nil
        }
    }

    /// SIGTERM, then a new start. Waits by polling, never by blocking a thread: the draining daemon may still call
    /// the sandbox, which runs on this process's task pool.
    private func restartDaemon() async throws {
        guard let running = daemon else { return try await startDaemon() }
        running.terminate()
        _ = try await waitFor("the daemon to stop") { running.isRunning ? nil : true }
        try await startDaemon()
    }

    private var daemonLog: String { (try? String(contentsOfFile: "\(folder)/daemon.log", encoding: .utf8)) ?? "" }

    @discardableResult
    func stopDaemon() -> Int32 {
        guard let daemon, daemon.isRunning else { return daemon?.terminationStatus ?? 0 }
        daemon.terminate()
        // Only at the end, when nothing needs the sandbox any more.
        daemon.waitUntilExit()
        return daemon.terminationStatus
    }

    /// Runs this binary with `arguments` against the demo's config and returns what it printed.
    private func cli(_ arguments: [String]) async throws -> String {
        try await run(Self.executable, arguments + ["--config", "\(folder)/config.yaml"])
    }

    /// Runs a program and returns what it printed; fails on a non-zero exit.
    private func run(_ executable: URL, _ arguments: [String]) async throws -> String {
        let process = ChildProcess()
        process.executableURL = executable
        process.arguments = arguments
        // Output to a file and a polled wait: blocking here would starve the sandbox, which runs on this process's
        // task pool and which the daemon may be calling.
        let outputPath = "\(folder)/run-\(UUID().uuidString.prefix(8)).out"
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        process.standardOutput = output
        process.standardError = output
        try process.run()
        _ = try await waitFor("\(executable.lastPathComponent) \(arguments.first ?? "")") { process.isRunning ? nil : true }
        try output.close()
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        try? FileManager.default.removeItem(atPath: outputPath)
        guard process.terminationStatus == 0 else {
            throw DemoFailure(description: "\(executable.lastPathComponent) \(arguments.joined(separator: " ")) failed: \(text)")
        }
        return text
    }

    /// Polls `value` every 100 ms until it is non-nil.
    private func waitFor<T>(_ what: String, timeout: Duration = .seconds(30), _ value: () async throws -> T?) async throws -> T {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let found = try await value() { return found }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw DemoFailure(description: "timed out waiting for \(what); daemon log:\n\(daemonLog.suffix(2_000))")
    }
}

struct DemoFailure: Error, CustomStringConvertible {
    let description: String
}

private func step(_ number: Int, _ text: String) { print("\n\(number). \(text)") }
private func detail(_ text: String) { print("   \(text)") }
