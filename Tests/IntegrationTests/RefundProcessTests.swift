import Foundation
import KlarnaSandbox
import PostgresBackend
import ReconcilerCore
import ReconcilerStore
import Testing
import TestSupport

/// Refunds through the running daemon: the shop's backend over the socket, the operator on the command line, a
/// `kill -9` while Klarna's answer is on its way; on SQLite and on PostgreSQL.
@Suite("Refunds through the daemon", .serialized)
struct RefundProcessTests {
    /// A payment placed and captured in full through the daemon; its order id.
    static func capturedOrder(_ fixture: DaemonFixture, amount: Int, reference: String) async throws -> String {
        let payment = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: amount, merchantReference: reference, schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        let tracked = try await fixture.cli(["track", payment.hppSessionId, "--kp-session", payment.kpSessionId, "--reference", reference])
        #expect(tracked.status == 0, "\(tracked.errors)")
        try await waitUntil(timeout: .seconds(30)) { fixture.sandbox.effects(kind: .orderPlaced).contains { $0.kpSessionId == payment.kpSessionId } }
        let order = try #require(fixture.sandbox.effects(kind: .orderPlaced).first { $0.kpSessionId == payment.kpSessionId }?.orderId)
        try await waitUntil(timeout: .seconds(30)) { fixture.sandbox.effects(kind: .captured).contains { $0.orderId == order } }
        return order
    }

    /// The socket's refund route and the `refund` command against one daemon: accepted once, repeats and conflicts
    /// answered, hostile bodies refused with the reason, one refund at Klarna per reference, outcomes in the outbox.
    static func socketAndCommandLine(_ fixture: DaemonFixture) async throws {
        let order = try await capturedOrder(fixture, amount: 9_000, reference: "refund-1")
        let route = "/v1/orders/\(order)/refunds"
        let first = try await fixture.post(route, #"{"amount":2000,"reference":"rma-1","description":"returned shoes"}"#)
        #expect(first.status == 202, "\(first.body)")
        #expect(first.body.contains(#""status":"accepted""#))
        let again = try await fixture.post(route, #"{"amount":2000,"reference":"rma-1"}"#)
        #expect(again.status == 202 && again.body.contains(#""status":"repeat""#), "\(again.body)")
        let conflict = try await fixture.post(route, #"{"amount":2500,"reference":"rma-1"}"#)
        #expect(conflict.status == 409 && conflict.body.contains("reference_conflict"), "\(conflict.body)")
        for (body, word) in [
            (#"{"reference":"x"}"#, "amount is required"), (#"{"amount":-5,"reference":"x"}"#, "positive whole number"),
            (#"{"amount":100}"#, "reference is required"), (#"{"amount":100,"reference":""}"#, "1–255 characters"), ("[1]", "JSON object"),
        ] {
            let refused = try await fixture.post(route, body)
            #expect(refused.status == 400 && refused.body.contains(word), "\(body): \(refused.body)")
        }
        #expect(try await fixture.post("/v1/orders/nobody/refunds", #"{"amount":100,"reference":"x"}"#).status == 404)
        try await waitUntil(timeout: .seconds(30)) { fixture.outboxFiles().contains { $0.hasSuffix("refunded.json") } }

        let command = try await fixture.cli(["refund", order, "--amount", "3000", "--reference", "cli-1"])
        #expect(command.status == 0, "\(command.errors)")
        #expect(command.output.contains("refunded 3000 on order \(order): refund "), "\(command.output)")
        let repeated = try await fixture.cli(["refund", order, "--amount", "3000", "--reference", "cli-1"])
        #expect(repeated.status == 0 && repeated.output.contains("the same refund, not another"), "\(repeated.output)")
        let tooMuch = try await fixture.cli(["refund", order, "--amount", "4001", "--reference", "cli-2"])
        #expect(tooMuch.status == 1, "\(tooMuch.output)")
        #expect(tooMuch.errors.contains("captured 9000 minus refunded 5000 is 4000"), "\(tooMuch.errors)")

        #expect(fixture.sandbox.effects(kind: .refunded).filter { $0.orderId == order }.map(\.amount) == [2_000, 3_000])
        let keys = fixture.sandbox.requests(route: "om.create_refund").map(\.idempotencyKey)
        #expect(keys.count == 2 && Set(keys).count == 2)
        try await waitUntil(timeout: .seconds(30)) { fixture.outboxFiles().filter { $0.hasSuffix("refunded.json") }.count == 2 }
        try await waitUntil(timeout: .seconds(30)) { fixture.outboxFiles().contains { $0.hasSuffix("refund_failed.json") } }
        let outcome = try #require(fixture.outboxFiles().first { $0.hasSuffix("refunded.json") })
        let text = try String(contentsOfFile: fixture.outboxNew + "/" + outcome, encoding: .utf8)
        #expect(text.contains(#""refund_reference" : "rma-1""#) || text.contains(#""refund_reference":"rma-1""#), "\(text)")
        let show = try await fixture.cli(["show", order])
        #expect(show.output.contains("Refunds") && show.output.contains("2000 reference rma-1: confirmed"), "\(show.output)")
        #expect(show.output.contains("4001 reference cli-2: failed"), "\(show.output)")
        let samples = try await MetricsTests.parse(try await fixture.post("/metrics", "", method: "GET").body, in: fixture.directory)
        #expect(MetricsTests.value(samples, "klarna_reconciler_outcomes_total", ["kind": "refunded"]) == 2)
        #expect(MetricsTests.value(samples, "klarna_reconciler_outcomes_total", ["kind": "refund_failed"]) == 1)
        #expect(MetricsTests.value(samples, "klarna_reconciler_intents_finished_total", ["kind": "refund", "state": "confirmed"]) == 2)
    }

    /// A `kill -9` while Klarna's answer to a refund is on its way: after the restart the order is read, the refund
    /// found by its reference and never sent again. `store` reads the daemon's state.
    static func killedWhileAnswered(_ fixture: DaemonFixture, store: any WorkStore) async throws {
        let order = try await capturedOrder(fixture, amount: 6_000, reference: "refund-kill")
        _ = fixture.sandbox.addFault(SandboxFault(route: "om.create_refund", kind: .holdAnswer, holdSeconds: 30, count: 1))
        #expect(try await fixture.post("/v1/orders/\(order)/refunds", #"{"amount":1500,"reference":"rma-k"}"#).status == 202)
        try await waitUntil(timeout: .seconds(30)) { fixture.sandbox.effects(kind: .refunded).contains { $0.orderId == order } }
        try await fixture.kill9()
        #expect(try await store.intents(subject: order).first { $0.kind == .refund }?.state == .sent)
        let sentBefore = fixture.sandbox.requests(route: "om.create_refund").count
        try await fixture.start()
        try await waitUntil(timeout: .seconds(30)) {
            try await store.intents(subject: order).first { $0.kind == .refund }?.state == .confirmed
        }
        #expect(fixture.sandbox.effects(kind: .refunded).filter { $0.orderId == order }.map(\.amount) == [1_500])
        #expect(fixture.sandbox.requests(route: "om.create_refund").count == sentBefore, "nothing sent after the restart")
        let intent = try #require(try await store.intents(subject: order).first { $0.kind == .refund })
        #expect(intent.result == fixture.sandbox.effects(kind: .refunded).first { $0.orderId == order }?.refundId)
    }

    @Test(
        "SQLite: refunds over the socket and the command line, each once, refused with the reason where Klarna would refuse; then a kill -9 while Klarna's answer to one is on its way: after the restart the order is read, the refund found by its reference, never sent again"
    )
    func sqlite() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        try await Self.socketAndCommandLine(fixture)
        try await Self.killedWhileAnswered(fixture, store: try fixture.readStore())
        #expect(try await fixture.stop() == 0)
    }

    @Test(
        "PostgreSQL: the same on a real server, the restarted daemon taking the killed one's lease after it lapses (3 s)"
    )
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
