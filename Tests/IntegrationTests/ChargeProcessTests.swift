import Engine
import Foundation
import KlarnaSandbox
import PostgresBackend
import ReconcilerCore
import ReconcilerStore
import Testing
import TestSupport

/// Charges of customer tokens through the running daemon: the shop's backend over the socket, the operator on the
/// command line, a `kill -9` while Klarna's answer is on its way; on SQLite and on PostgreSQL.
@Suite("Charges through the daemon", .serialized)
struct ChargeProcessTests {
    /// The socket's charge route and the `charge` command against one daemon: accepted once, repeats and conflicts
    /// answered, hostile bodies refused naming the field, one order at Klarna per reference, captured once, outcomes
    /// in the outbox.
    static func socketAndCommandLine(_ fixture: DaemonFixture) async throws {
        let token = try fixture.sandbox.createCustomerToken(currency: "EUR")
        let route = "/v1/customer-tokens/\(token)/charges"
        let first = try await fixture.post(route, #"{"reference":"sub-1-2026-12","amount":1990,"currency":"EUR","tax_amount":318}"#)
        #expect(first.status == 202 && first.body.contains(#""status":"accepted""#), "\(first.body)")
        #expect(!first.body.contains(token), "the token is not echoed whole: \(first.body)")
        let again = try await fixture.post(route, #"{"reference":"sub-1-2026-12","amount":1990,"currency":"EUR"}"#)
        #expect(again.status == 202 && again.body.contains(#""status":"repeat""#), "\(again.body)")
        let conflict = try await fixture.post(route, #"{"reference":"sub-1-2026-12","amount":2990,"currency":"EUR"}"#)
        #expect(conflict.status == 409 && conflict.body.contains("reference_conflict"), "\(conflict.body)")
        for (body, word) in [
            (#"{"reference":"x","currency":"EUR"}"#, "amount is required"), (#"{"amount":100,"currency":"EUR"}"#, "reference is required"),
            (#"{"amount":100,"reference":"x"}"#, "currency is required"), (#"{"amount":100,"reference":"x","currency":"euro"}"#, "currency must be"),
            (#"{"amount":100,"reference":"x","currency":"EUR","tax_amount":200}"#, "tax_amount must be"),
            (
                #"{"amount":100,"reference":"x","currency":"EUR","order_lines":[{"name":"a","quantity":1,"unit_price":50,"total_amount":50}]}"#,
                "order_lines"
            ),
            (#"{"amount":100,"reference":"x","currency":"EUR","order_lines":[{"name":1}]}"#, "order_lines"),
            (#"{"amount":100,"reference":"x","currency":"EUR","capture":"later"}"#, "capture must be one of"),
            ("[1]", "JSON object"),
        ] {
            let refused = try await fixture.post(route, body)
            #expect(refused.status == 400 && refused.body.contains(word), "\(body): \(refused.status) \(refused.body)")
        }
        // A wrong method is refused, and the refusal (recorded, logged) names the token by its tail.
        let wrongMethod = try await fixture.post(route, "", method: "GET")
        #expect(
            wrongMethod.status == 404 && wrongMethod.body.contains(Redact.tail(token)) && !wrongMethod.body.contains(token), "\(wrongMethod.body)")
        let unknown = try await fixture.post(route, #"{"amount":100,"reference":"x","currency":"EUR","account":"nobody"}"#)
        #expect(unknown.status == 422 && unknown.body.contains("unknown_account"), "\(unknown.body)")
        try await waitUntil(timeout: .seconds(30)) { fixture.outboxFiles().contains { $0.hasSuffix("charge_placed.json") } }
        let order = try #require(fixture.sandbox.effects(kind: .tokenCharged).first?.orderId)
        try await waitUntil(timeout: .seconds(30)) { fixture.sandbox.effects(kind: .captured).contains { $0.orderId == order } }
        let placed = try #require(fixture.outboxFiles().first { $0.hasSuffix("charge_placed.json") })
        let text = try String(contentsOfFile: fixture.outboxNew + "/" + placed, encoding: .utf8)
        #expect(text.contains("sub-1-2026-12") && text.contains(order), "\(text)")
        // The order is found by the charge's reference, its merchant reference.
        try await waitUntil(timeout: .seconds(30)) { try await fixture.cli(["show", "sub-1-2026-12"]).output.contains("captured") }
        let show = try await fixture.cli(["show", "sub-1-2026-12"])
        #expect(show.output.contains(order) && show.output.contains("charge_placed"), "\(show.output)")

        let command = try await fixture.cli(["charge", token, "--amount", "1990", "--currency", "EUR", "--reference", "sub-1-2027-01"])
        #expect(command.status == 0, "\(command.errors)")
        #expect(command.output.contains("charged 1990 EUR: order "), "\(command.output)")
        #expect(!command.output.contains(token) && !command.errors.contains(token), "the token is shown by its tail")
        let repeated = try await fixture.cli(["charge", token, "--amount", "1990", "--currency", "EUR", "--reference", "sub-1-2027-01"])
        #expect(repeated.status == 0 && repeated.output.contains("the same charge, not another"), "\(repeated.output)")
        try fixture.sandbox.declineCharges(of: token, [.rejected])
        let declined = try await fixture.cli(["charge", token, "--amount", "1990", "--currency", "EUR", "--reference", "sub-1-2027-02"])
        #expect(declined.status == 1 && declined.errors.contains("charge not made"), "\(declined.output) \(declined.errors)")
        let badLines = try await fixture.cli(["charge", token, "--amount", "0", "--currency", "EUR", "--reference", "x"])
        #expect(badLines.status != 0 && badLines.errors.contains("--amount"), "\(badLines.errors)")

        #expect(fixture.sandbox.effects(kind: .tokenCharged).count == 2)
        #expect(fixture.sandbox.effects(kind: .captured).filter { $0.amount == 1_990 }.count == 2)
        try await waitUntil(timeout: .seconds(30)) { fixture.outboxFiles().contains { $0.hasSuffix("charge_declined.json") } }
        let samples = try await MetricsTests.parse(try await fixture.post("/metrics", "", method: "GET").body, in: fixture.directory)
        #expect(MetricsTests.value(samples, "klarna_reconciler_outcomes_total", ["kind": "charge_placed"]) == 2)
        #expect(MetricsTests.value(samples, "klarna_reconciler_outcomes_total", ["kind": "charge_declined"]) == 1)
        #expect(MetricsTests.value(samples, "klarna_reconciler_charges_total", ["outcome": "placed"]) == 2)
        #expect(MetricsTests.value(samples, "klarna_reconciler_charges_total", ["outcome": "declined"]) == 1)
        #expect(MetricsTests.value(samples, "klarna_reconciler_intents_finished_total", ["kind": "charge", "state": "confirmed"]) == 2)
        // The operator's view of the token, read through the daemon, and its cancellation, once.
        let listed = try await fixture.cli(["tokens"])
        #expect(listed.status == 0 && listed.output.contains(Redact.tail(token)) && !listed.output.contains(token), "\(listed.output)")
        let shown = try await fixture.cli(["token", "show", token])
        #expect(
            shown.output.contains("status at Klarna: ACTIVE") && shown.output.contains("charge sub-1-2026-12: 1990 EUR, confirmed"), "\(shown.output)"
        )
        let cancelled = try await fixture.cli(["token", "cancel", token])
        #expect(cancelled.status == 0 && cancelled.output.contains("Klarna cancelled customer token"), "\(cancelled.output) \(cancelled.errors)")
        let cancelAgain = try await fixture.cli(["token", "cancel", token])
        #expect(cancelAgain.status == 0 && cancelAgain.output.contains("the same one, not another"), "\(cancelAgain.output)")
        #expect(fixture.sandbox.effects(kind: .customerTokenCancelled).count == 1)
        let afterwards = try await fixture.cli(["charge", token, "--amount", "1990", "--currency", "EUR", "--reference", "sub-1-2027-03"])
        #expect(afterwards.status == 1 && afterwards.errors.contains("not ACTIVE"), "\(afterwards.output) \(afterwards.errors)")
        let json = try await fixture.cli(["token", "show", token, "--json"])
        #expect(json.output.contains(#""status" : "CANCELLED""#) || json.output.contains(#""status":"CANCELLED""#), "\(json.output)")
        #expect(!fixture.daemonLog.contains(token), "the journal shows the token by its tail only")
    }

    /// A `kill -9` while Klarna's answer to a charge is on its way: after the restart the charge is sent again with the
    /// same key, Klarna answers as it did, and there is one order. `store` reads the daemon's state.
    static func killedWhileAnswered(_ fixture: DaemonFixture, store: any WorkStore) async throws {
        let token = try fixture.sandbox.createCustomerToken(currency: "SEK")
        let placedBefore = fixture.sandbox.effects(kind: .tokenCharged).count
        _ = fixture.sandbox.addFault(SandboxFault(route: "ct.create_order", kind: .holdAnswer, holdSeconds: 30, count: 1))
        #expect(
            try await fixture.post("/v1/customer-tokens/\(token)/charges", #"{"reference":"kill-1","amount":4500,"currency":"SEK"}"#).status == 202)
        try await waitUntil(timeout: .seconds(30)) { fixture.sandbox.effects(kind: .tokenCharged).count == placedBefore + 1 }
        try await fixture.kill9()
        let key = IdempotencyKey.make(.charge, "\(token.utf8.count):\(token):kill-1")
        #expect(try await store.intent(key)?.state == .sent)
        try await fixture.start()
        try await waitUntil(timeout: .seconds(30)) { try await store.intent(key)?.state == .confirmed }
        #expect(fixture.sandbox.effects(kind: .tokenCharged).count == placedBefore + 1, "one order")
        let requests = fixture.sandbox.requests(route: "ct.create_order").filter { $0.path.contains(token) }
        #expect(requests.count == 2 && requests.last?.replayed == true, "sent again with the same key, answered as before")
        #expect(Set(requests.map(\.idempotencyKey)) == [key])
        let order = try #require(try await store.intent(key)?.result)
        try await waitUntil(timeout: .seconds(30)) { fixture.sandbox.effects(kind: .captured).contains { $0.orderId == order } }
    }

    @Test(
        "SQLite: charges over the socket and the command line, each once, refused naming the field, captured once; then a kill -9 while Klarna's answer to one is on its way: after the restart it is sent again with the same key, one order"
    )
    func sqlite() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        try await Self.socketAndCommandLine(fixture)
        try await Self.killedWhileAnswered(fixture, store: try fixture.readStore())
        #expect(try await fixture.stop() == 0)
    }

    @Test("PostgreSQL: the same on a real server, the restarted daemon taking the killed one's lease after it lapses (3 s)")
    func postgres() async throws {
        let (fixture, server, database) = try await PostgresDaemonTests.fixture(store: ["lease_seconds: 3"])
        try await fixture.start()
        try await Self.socketAndCommandLine(fixture)
        let store = try await PostgresDaemonTests.open(server, database)
        defer { store.close() }
        try await Self.killedWhileAnswered(fixture, store: store)
        #expect(try await fixture.stop() == 0)
    }
}
