import Foundation
import KlarnaSandbox
import Logging
@testable import PostgresBackend
import ReconcilerCore
import ReconcilerStore
@testable import SQLiteBackend
import Testing
import TestSupport

/// Issue 26: one daemon for several Klarna accounts, each with its own credentials, hosts and budget, on both stores;
/// and a store the previous release wrote, whose payments carry on under the default account.
@Suite("Several Klarna accounts in one daemon")
struct AccountsTests {
    @Test(
        "Two accounts on SQLite: each payment ends with its own account's credentials; deliveries name their account or are refused; a callback cannot be moved to another account"
    )
    func sqlite() async throws {
        try await Self.twoAccounts(try await DaemonFixture(twoAccounts: true))
    }

    @Test("Two accounts on PostgreSQL: the same")
    func postgres() async throws {
        let server = try await PostgresServer.shared()
        let database = try await server.createDatabase()
        let fixture = try await DaemonFixture(storeConfig: ["url: \(server.url(database))", "password_file: store-password"], twoAccounts: true)
        try "\(server.password)\n".write(toFile: fixture.directory + "/store-password", atomically: true, encoding: .utf8)
        try await Self.twoAccounts(fixture)
    }

    static func trackBody(_ session: CreatedSession, account: String?) -> String {
        let named = account.map { #","account":"\#($0)""# } ?? ""
        return #"{"hpp_session_id":"\#(session.hppSessionId)","kp_session_id":"\#(session.kpSessionId)"\#(named)}"#
    }

    static func twoAccounts(_ fixture: DaemonFixture) async throws {
        try await fixture.start()
        let completes = [ScheduleStep(afterSeconds: 0.3, status: "COMPLETED")]
        let eu = try fixture.sandbox.createSession(SessionSpec(orderAmount: 4_100, merchantReference: "eu-1", schedule: completes))
        let us = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 5_200, merchantReference: "us-1", schedule: completes, merchant: TwoAccounts.usMerchant.id))

        // With two accounts a track request names one; an unknown one is refused by name.
        let unnamed = try await fixture.post("/v1/sessions", trackBody(eu, account: nil))
        #expect(unnamed.status == 422 && unnamed.body.contains("no_account") && unnamed.body.contains("eu, us"), "\(unnamed.body)")
        let unknown = try await fixture.post("/v1/sessions", trackBody(eu, account: "apac"))
        #expect(unknown.status == 422 && unknown.body.contains("unknown_account"), "\(unknown.body)")
        let withoutAccount = try await fixture.cli(["track", us.hppSessionId, "--kp-session", us.kpSessionId])
        #expect(withoutAccount.status != 0 && withoutAccount.errors.contains("--account is required"), "\(withoutAccount.errors)")

        #expect(try await fixture.post("/v1/sessions", trackBody(eu, account: "eu")).status == 202)
        let tracked = try await fixture.cli(["track", us.hppSessionId, "--kp-session", us.kpSessionId, "--account", "us"])
        #expect(tracked.status == 0 && tracked.output.contains("account us"), "\(tracked.errors)")

        // eu captures at once; us by its own capture policy (on_request), after a capture request.
        try await waitUntil(timeout: .seconds(30)) {
            Self.captured(fixture, eu) && fixture.sandbox.effects(kind: .orderPlaced).contains { $0.kpSessionId == us.kpSessionId }
        }
        let usOrder = try #require(fixture.sandbox.effects(kind: .orderPlaced).first { $0.kpSessionId == us.kpSessionId }?.orderId)
        #expect(!fixture.sandbox.effects(kind: .captured).contains { $0.orderId == usOrder }, "us captures on request")
        #expect(try await fixture.cli(["capture", usOrder]).status == 0)
        try await waitUntil(timeout: .seconds(30)) { fixture.sandbox.effects(kind: .captured).contains { $0.orderId == usOrder } }
        let euOrder = try #require(fixture.sandbox.effects(kind: .orderPlaced).first { $0.kpSessionId == eu.kpSessionId }?.orderId)

        // Every call carried its payment's account's credentials: none was refused, each was its merchant's.
        let requests = fixture.sandbox.requests()
        #expect(requests.allSatisfy { $0.status != 401 && $0.status != 404 }, "\(requests.filter { $0.status == 401 || $0.status == 404 })")
        func merchants(_ ids: [String]) -> Set<String?> { Set(requests.filter { r in ids.contains { r.path.contains($0) } }.map(\.merchant)) }
        #expect(merchants([eu.hppSessionId, eu.kpSessionId, euOrder]) == [TwoAccounts.euMerchantID])
        #expect(merchants([us.hppSessionId, us.kpSessionId, usOrder]) == [TwoAccounts.usMerchant.id])
        #expect(fixture.sandbox.effects(kind: .captured).count == 2 && fixture.sandbox.effects(kind: .orderPlaced).count == 2)

        // The same payment tracked again under the other account is refused, over the socket and the command line.
        let retracked = try await fixture.post("/v1/sessions", trackBody(us, account: "eu"))
        #expect(retracked.status == 409 && retracked.body.contains("wrong_account"), "\(retracked.body)")
        let movedByCommand = try await fixture.cli(["track", us.hppSessionId, "--kp-session", us.kpSessionId, "--account", "eu"])
        #expect(movedByCommand.status == 1 && movedByCommand.errors.contains("as account us's"), "\(movedByCommand.errors)")
        let badAccount = try await fixture.post("/v2/payments?account=NOT%20ONE", "", method: "GET", socket: fixture.controlPath)
        #expect(badAccount.status == 400 && badAccount.body.contains("bad_account"), "\(badAccount.body)")

        // Operators see the accounts: totals by account, a list of one account, the account in show, metrics by account.
        let status = try await fixture.cli(["status"])
        #expect(status.output.contains("account eu: 1 session(s)") && status.output.contains("account us: 1 session(s)"), "\(status.output)")
        let usStatus = try await fixture.cli(["status", "--account", "us"])
        #expect(usStatus.output.contains("(account us)") && !usStatus.output.contains("account eu:"), "\(usStatus.output)")
        let usList = try await fixture.cli(["list", "--account", "us"])
        #expect(
            usList.output.contains(us.hppSessionId) && usList.output.contains(usOrder) && !usList.output.contains(eu.hppSessionId), "\(usList.output)"
        )
        let shown = try await fixture.cli(["show", us.hppSessionId])
        #expect(shown.output.contains("account us"), "\(shown.output)")
        let metrics = try await fixture.post("/metrics", "", method: "GET").body
        #expect(metrics.contains(#"klarna_reconciler_klarna_calls_total{account="us",operation="om.create_capture",result="ok"} 1"#), "\(metrics)")
        #expect(metrics.contains(#"klarna_reconciler_klarna_calls_total{account="eu",operation="om.create_capture",result="ok"} 1"#))

        // A callback's URL signs its account: one made for eu cannot act on us's payment, nor can a us URL be moved.
        func callback(_ account: String) async throws -> String {
            let printed = try await fixture.cli([
                "callback-url", "--kind", "hpp-status", "--kp-session", us.kpSessionId, "--base", "http://localhost/v1/webhooks/hpp-status",
                "--account", account,
            ])
            #expect(printed.status == 0, "\(printed.errors)")
            return printed.output.trimmingCharacters(in: .whitespacesAndNewlines).replacingOccurrences(of: "http://localhost", with: "")
                .replacingOccurrences(of: "{{session_id}}", with: us.hppSessionId)
        }
        let event = #"{"event_id":"ev-acc-1","session":{"session_id":"\#(us.hppSessionId)","status":"COMPLETED"}}"#
        let crossed = try await fixture.post(try await callback("eu"), event)
        #expect(crossed.status == 409 && crossed.body.contains("wrong_account") && crossed.body.contains("account us's"), "\(crossed.body)")
        let own = try await callback("us")
        #expect(own.contains("&account=us"))
        let moved = try await fixture.post(own.replacingOccurrences(of: "account=us", with: "account=eu"), event)
        #expect(moved.status == 403 && moved.body.contains("bad_token"), "\(moved.body)")
        #expect(try await fixture.post(own, event).status == 202)

        // check-config names each account and where its secret came from.
        let check = try await fixture.cli(["check-config"])
        #expect(check.status == 0, "\(check.errors)")
        #expect(check.output.contains("accounts: eu, us"))
        #expect(check.output.contains("accounts[us].password: <redacted> (credential klarna-password.us)"), "\(check.output)")
        #expect(check.output.contains("accounts[eu].password: <redacted> (file \(fixture.directory)/klarna-password)"), "\(check.output)")
        #expect(check.output.contains("accounts[us].capture.default_policy: on_request"))
        #expect(!check.output.contains(TwoAccounts.usMerchant.password))
    }

    @Test(
        "Settlements and disputes on SQLite: each account's payouts and disputes are read with its credentials, matched against its own orders, and reported by account"
    )
    func moneySQLite() async throws {
        try await Self.moneyByAccount(try await DaemonFixture(extraConfig: Self.moneyConfig, twoAccounts: true))
    }

    @Test("Settlements and disputes on PostgreSQL: the same")
    func moneyPostgres() async throws {
        let server = try await PostgresServer.shared()
        let database = try await server.createDatabase()
        let fixture = try await DaemonFixture(
            extraConfig: Self.moneyConfig, storeConfig: ["url: \(server.url(database))", "password_file: store-password"], twoAccounts: true)
        try "\(server.password)\n".write(toFile: fixture.directory + "/store-password", atomically: true, encoding: .utf8)
        try await Self.moneyByAccount(fixture)
    }

    /// Both accounts follow their payouts and disputes (`settlements.enabled` and `disputes.enabled` for every account).
    static let moneyConfig = """
        settlements:
          enabled: true
        disputes:
          enabled: true
        """

    static func moneyByAccount(_ fixture: DaemonFixture) async throws {
        try await fixture.start()
        let completes = [ScheduleStep(afterSeconds: 0.3, status: "COMPLETED")]
        let eu = try fixture.sandbox.createSession(SessionSpec(orderAmount: 4_100, merchantReference: "eu-money", schedule: completes))
        let us = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 5_200, merchantReference: "us-money", schedule: completes, merchant: TwoAccounts.usMerchant.id))
        #expect(try await fixture.post("/v1/sessions", trackBody(eu, account: "eu")).status == 202)
        #expect(try await fixture.post("/v1/sessions", trackBody(us, account: "us")).status == 202)
        func order(_ payment: CreatedSession) -> String? {
            fixture.sandbox.effects(kind: .orderPlaced).first { $0.kpSessionId == payment.kpSessionId }?.orderId
        }
        try await waitUntil(timeout: .seconds(30)) { captured(fixture, eu) && order(us) != nil }
        let euOrder = try #require(order(eu)), usOrder = try #require(order(us))
        #expect(try await fixture.cli(["capture", usOrder]).status == 0)
        try await waitUntil(timeout: .seconds(30)) { captured(fixture, us) }

        // us's dispute arrives as a signed webhook naming its merchant: routed to us, read with us's credentials.
        let usDispute = try fixture.sandbox.openDispute(order: usOrder, reason: "PURCHASE_UNAUTHORIZED", respondWithin: .seconds(60 * 3_600))
        let hook = try DisputeProcessTests.webhook(fixture.sandbox)
        #expect(hook.body.contains(TwoAccounts.usMerchant.id))
        #expect(try await fixture.post("/v1/webhooks/klarna", hook.body, headers: hook.headers).status == 202)
        try await waitUntil(timeout: .seconds(30)) { try await disputes(fixture, "us").count == 1 }
        // eu's sends no webhook: eu's list finds it (at the next start, below).
        let euDispute = try fixture.sandbox.openDispute(order: euOrder, reason: "PURCHASE_UNAUTHORIZED", respondWithin: .seconds(60 * 3_600))

        // Klarna pays each merchant out apart; the daemon lists each account's payouts at start.
        let payouts = try fixture.sandbox.settle()
        let usPayout = try #require(payouts.first { $0.merchantId == TwoAccounts.usMerchant.id }?.paymentReference)
        let euPayout = try #require(payouts.first { $0.merchantId == TwoAccounts.euMerchantID }?.paymentReference)
        _ = try await fixture.stop()
        try await fixture.start()
        try await waitUntil(timeout: .seconds(60)) {
            let payouts = try await reports(fixture, nil).count
            let euDisputes = try await disputes(fixture, "eu").count
            return payouts == 2 && euDisputes == 1
        }

        // Each payout is its account's, every line matched against that account's own order: no orphan, no drift.
        let usReports = try await reports(fixture, "us"), euReports = try await reports(fixture, "eu")
        #expect(usReports.map { $0["payment_reference"] as? String } == [usPayout] && usReports.first?["account"] as? String == "us")
        #expect(euReports.map { $0["payment_reference"] as? String } == [euPayout] && euReports.first?["account"] as? String == "eu")
        for report in usReports + euReports {
            let findings = (report["findings"] as? [[String: Any]] ?? []).compactMap { $0["kind"] as? String }
            #expect(!findings.contains("orphan") && !findings.contains("unknown_capture"), "\(findings)")
        }
        // Each dispute is its account's and tied to that account's order.
        let usShown = try #require(try await disputes(fixture, "us").first), euShown = try #require(try await disputes(fixture, "eu").first)
        #expect(
            usShown["id"] as? String == usDispute.paymentDisputeId && usShown["account"] as? String == "us" && usShown["orphan"] as? Bool == false)
        #expect(
            euShown["id"] as? String == euDispute.paymentDisputeId && euShown["account"] as? String == "eu" && euShown["orphan"] as? Bool == false)

        // Every settlement and dispute call carried its account's credentials: each payout and dispute was read as its
        // merchant, and no call was refused.
        let requests = fixture.sandbox.requests()
        func merchants(_ id: String) -> Set<String?> { Set(requests.filter { $0.path.contains(id) }.map(\.merchant)) }
        #expect(merchants(usDispute.paymentDisputeId) == [TwoAccounts.usMerchant.id])
        #expect(merchants(euDispute.paymentDisputeId).isSubset(of: [TwoAccounts.euMerchantID]))
        for route in ["settlements.list_payouts", "settlements.list_transactions", "disputes.list"] {
            let calls = requests.filter { $0.route == route }
            #expect(Set(calls.map(\.merchant)) == [TwoAccounts.euMerchantID, TwoAccounts.usMerchant.id], "\(route): \(calls.map(\.merchant))")
        }
        #expect(requests.allSatisfy { $0.status != 401 && $0.status != 403 }, "\(requests.filter { $0.status == 401 || $0.status == 403 })")

        // Operators see them by account: totals per account and per currency, one account's alone.
        let settlements = try await fixture.cli(["settlements"])
        #expect(settlements.output.contains("account us: 1 payout") && settlements.output.contains("account eu: 1 payout"), "\(settlements.output)")
        let usOnly = try await fixture.cli(["settlements", "--account", "us"])
        #expect(usOnly.output.contains(usPayout) && !usOnly.output.contains(euPayout), "\(usOnly.output)")
        let disputesText = try await fixture.cli(["disputes"])
        #expect(
            disputesText.output.contains("Total: 2 disputes, 2 open") && disputesText.output.contains("account us: 1 dispute, 1 open"),
            "\(disputesText.output)")
        let metrics = try await fixture.post("/metrics", "", method: "GET").body
        #expect(metrics.contains(#"klarna_reconciler_open_disputes{account="us",state="INITIATED"} 1"#), "\(metrics)")
        #expect(metrics.contains(#"klarna_reconciler_open_disputes{account="eu",state="INITIATED"} 1"#))
    }

    /// `settlements --json` (of one account, or all).
    static func reports(_ fixture: DaemonFixture, _ account: String?) async throws -> [[String: Any]] {
        let shown = try await fixture.cli(["settlements", "--json"] + (account.map { ["--account", $0] } ?? []))
        return try JSONSerialization.jsonObject(with: Data(shown.output.utf8)) as? [[String: Any]] ?? []
    }

    /// The disputes of one account as `disputes --json` shows them.
    static func disputes(_ fixture: DaemonFixture, _ account: String) async throws -> [[String: Any]] {
        let shown = try await fixture.cli(["disputes", "--json", "--account", account])
        let views = try JSONSerialization.jsonObject(with: Data(shown.output.utf8)) as? [[String: Any]] ?? []
        return views.compactMap { $0["dispute"] as? [String: Any] }
    }

    @Test(
        "A 429 from Klarna for one account pauses that account alone: the other account's payment goes on at once; the first resumes once Klarna lets it"
    )
    func rateLimitedAccountAlone() async throws {
        let fixture = try await DaemonFixture(twoAccounts: true)
        // Klarna lets eu make one call in 100 s (the daemon's own budget for eu is far higher): eu's calls after its
        // first are answered 429; us has no limit.
        fixture.sandbox.setRateLimit(perSecond: 0.01, merchant: TwoAccounts.euMerchantID)
        try await fixture.start()
        let completes = [ScheduleStep(afterSeconds: 0.3, status: "COMPLETED")]
        let eu = try fixture.sandbox.createSession(SessionSpec(orderAmount: 1_100, schedule: completes))
        let us = try fixture.sandbox.createSession(SessionSpec(orderAmount: 2_200, schedule: completes, merchant: TwoAccounts.usMerchant.id))
        #expect(try await fixture.post("/v1/sessions", Self.trackBody(eu, account: "eu")).status == 202)
        #expect(try await fixture.post("/v1/sessions", Self.trackBody(us, account: "us")).status == 202)
        try await waitUntil(timeout: .seconds(30)) {
            fixture.sandbox.effects(kind: .orderPlaced).contains { $0.kpSessionId == us.kpSessionId }
                && fixture.sandbox.requests().contains { $0.status == 429 }
        }
        let requests = fixture.sandbox.requests()
        let limited = requests.filter { $0.status == 429 }
        #expect(!limited.isEmpty && limited.allSatisfy { $0.merchant == TwoAccounts.euMerchantID }, "\(limited.map(\.merchant))")
        #expect(!fixture.sandbox.effects(kind: .orderPlaced).contains { $0.kpSessionId == eu.kpSessionId }, "eu waits for Klarna")
        // The daemon heeds Klarna's reset (1 s) for eu instead of hammering it: about one call a second at most.
        let euCalls = requests.filter { $0.merchant == TwoAccounts.euMerchantID }
        let span = (euCalls.last?.at ?? Date()).timeIntervalSince(euCalls.first?.at ?? Date())
        #expect(Double(euCalls.count) <= span + 3, "\(euCalls.count) calls of eu in \(span) s")
        fixture.sandbox.setRateLimit(perSecond: nil, merchant: TwoAccounts.euMerchantID)
        try await waitUntil(timeout: .seconds(30)) { Self.captured(fixture, eu) }
    }

    @Test(
        "Upgrade on SQLite: a store the previous release wrote (no account column) migrates in place; its payment carries on under the default account"
    )
    func upgradeSQLite() async throws {
        let fixture = try await DaemonFixture()
        try FileManager.default.createDirectory(atPath: fixture.directory + "/state", withIntermediateDirectories: true)
        let payment = try Self.previousReleasePayment(fixture)
        do {
            let store = try SQLiteStore(path: fixture.storePath)
            _ = try await store.track(Self.session(payment), event: DomainEvent(.tracked, "tracked by the previous release"), at: Date())
        }
        // The previous release's schema: step 11, without what steps 12 and 13 added.
        try SQLiteConnection(path: fixture.storePath, readOnly: false, busyTimeout: .seconds(5))
            .execute("\(Schema.beforeAccounts(time: "REAL")); PRAGMA user_version = \(Migrations.accountsStep - 1)")
        try await fixture.start()
        try await waitUntil(timeout: .seconds(30)) { Self.captured(fixture, payment) }
        let store = try fixture.readStore()
        #expect(try await store.session(payment.hppSessionId)?.account == .default)
        #expect(try await store.sessionAccount(hppSessionID: payment.hppSessionId, kpSessionID: nil) == .default)
        #expect(try Migrations.version(of: SQLiteConnection(path: fixture.storePath, readOnly: true, busyTimeout: .seconds(5))) == Migrations.latest)
    }

    @Test("Upgrade on PostgreSQL: the same")
    func upgradePostgres() async throws {
        let server = try await PostgresServer.shared()
        let database = try await server.createDatabase()
        let fixture = try await DaemonFixture(storeConfig: ["url: \(server.url(database))", "password_file: store-password"])
        try "\(server.password)\n".write(toFile: fixture.directory + "/store-password", atomically: true, encoding: .utf8)
        let payment = try Self.previousReleasePayment(fixture)
        let location = try PostgresLocation(url: server.url(database))
        do {
            let store = try await PostgresStore.open(location, password: server.password, logger: Logger(label: "test"))
            _ = try await store.track(Self.session(payment), event: DomainEvent(.tracked, "tracked by the previous release"), at: Date())
            store.close()
        }
        _ = try await server.psql(
            "\(Schema.beforeAccounts(time: "timestamptz")); DELETE FROM schema_migrations WHERE version >= \(PostgresSchema.accountsStep)",
            database: database)
        try await fixture.start()
        try await waitUntil(timeout: .seconds(30)) { Self.captured(fixture, payment) }
        let store = try await PostgresStore.open(location, password: server.password, migrate: false, logger: Logger(label: "test"))
        defer { store.close() }
        #expect(try await store.session(payment.hppSessionId)?.account == .default)
        #expect(try await store.sessionAccount(hppSessionID: nil, kpSessionID: payment.kpSessionId) == .default)
    }

    /// Whether the sandbox captured the order placed for `payment` (a capture's effect names its order only).
    static func captured(_ fixture: DaemonFixture, _ payment: CreatedSession) -> Bool {
        guard let order = fixture.sandbox.effects(kind: .orderPlaced).first(where: { $0.kpSessionId == payment.kpSessionId })?.orderId else {
            return false
        }
        return fixture.sandbox.effects(kind: .captured).contains { $0.orderId == order }
    }

    static func previousReleasePayment(_ fixture: DaemonFixture) throws -> CreatedSession {
        try fixture.sandbox.createSession(SessionSpec(orderAmount: 2_600, schedule: [ScheduleStep(afterSeconds: 0.3, status: "COMPLETED")]))
    }

    static func session(_ payment: CreatedSession) -> TrackedSession {
        TrackedSession(
            hppSessionID: payment.hppSessionId, kpSessionID: payment.kpSessionId, mode: PlaceOrderMode.none, merchantReference: nil,
            capturePolicy: .immediate, purpose: .buy, trackedAt: Date())
    }
}
