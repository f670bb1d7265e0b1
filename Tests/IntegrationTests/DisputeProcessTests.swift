import Crypto
import Foundation
import KlarnaSandbox
import ReconcilerCore
import ReconcilerStore
import Testing
import TestSupport

/// Disputes through the running daemon: Klarna's signed webhook on the ingest socket, the `disputes` and `dispute`
/// commands, the outbox; on SQLite, and with two daemons on one PostgreSQL store, where each change's outcome and each
/// operator's call happen once between them.
@Suite("Disputes through the daemon", .serialized)
struct DisputeProcessTests {
    static let config = """
        disputes:
          enabled: true
          sync_interval_minutes: 1
        """

    /// The sandbox's webhook for the newest change, signed with the fixtures' key as a forwarder passes it on.
    static func webhook(_ sandbox: KlarnaSandbox) throws -> (body: String, headers: [String]) {
        let hook = try #require(sandbox.webhooks().last)
        let mac = HMAC<SHA256>.authenticationCode(for: Array(hook.body.utf8), using: SymmetricKey(data: Array(DaemonFixture.signingKey.utf8)))
        return (
            hook.body,
            [
                "Klarna-Signature: \(mac.map { String(format: "%02x", $0) }.joined())",
                "Klarna-Signing-Key-Id: krn:partner:global:notification:signing-key:1",
            ]
        )
    }

    @Test(
        "SQLite: a dispute's webhook is a hint read at once (dispute_opened and the 72 h warning in the outbox); disputes lists it; accept-loss from the command line reaches Klarna once and ends dispute_lost"
    )
    func sqlite() async throws {
        let fixture = try await DaemonFixture(extraConfig: Self.config)
        try await fixture.start()
        let order = try await RefundProcessTests.capturedOrder(fixture, amount: 9_000, reference: "dispute-1")
        let dispute = try fixture.sandbox.openDispute(order: order, reason: "PURCHASE_UNAUTHORIZED", respondWithin: .seconds(60 * 3_600))
        let hook = try Self.webhook(fixture.sandbox)
        let forged = try await fixture.post("/v1/webhooks/klarna", hook.body, headers: ["Klarna-Signature: 00", hook.headers[1]])
        #expect(forged.status == 400 && forged.body.contains("bad_signature"), "\(forged.body)")
        let delivered = try await fixture.post("/v1/webhooks/klarna", hook.body, headers: hook.headers)
        #expect(delivered.status == 202, "\(delivered.body)")
        try await waitUntil(timeout: .seconds(30)) { fixture.outboxFiles().contains { $0.hasSuffix("dispute_deadline.json") } }
        #expect(fixture.outboxFiles().filter { $0.hasSuffix("dispute_opened.json") }.count == 1)

        let listed = try await fixture.cli(["disputes", "--open", "--due-within", "3", "--json"])
        #expect(listed.status == 0, "\(listed.errors)")
        let views = try #require(try JSONSerialization.jsonObject(with: Data(listed.output.utf8)) as? [[String: Any]])
        let shown = try #require(views.first?["dispute"] as? [String: Any])
        #expect(
            shown["id"] as? String == dispute.paymentDisputeId && shown["state"] as? String == "INITIATED" && shown["order_id"] as? String == order)
        let text = try await fixture.cli(["disputes"])
        #expect(text.output.contains(dispute.paymentDisputeId) && text.output.contains("PURCHASE_UNAUTHORIZED"), "\(text.output)")

        let unknown = try await fixture.cli(["dispute", "accept-loss", "krn:nothing:1", "--wait", "1"])
        #expect(unknown.status == 1 && unknown.errors.contains("not known"), "\(unknown.errors)")
        let refusedFile = try await fixture.cli(["dispute", "evidence", dispute.paymentDisputeId, "--file", fixture.configPath])
        #expect(refusedFile.status == 64 && refusedFile.errors.contains("PDF, JPEG, PNG or DOCX"), "\(refusedFile.errors)")

        let accepted = try await fixture.cli(["dispute", "accept-loss", dispute.paymentDisputeId])
        #expect(accepted.status == 0 && accepted.output.contains("done"), "\(accepted.output) \(accepted.errors)")
        #expect(fixture.sandbox.dispute(dispute.paymentDisputeId)?.outcome == "LOST")
        try await waitUntil(timeout: .seconds(30)) { fixture.outboxFiles().contains { $0.hasSuffix("dispute_lost.json") } }
        let again = try await fixture.cli(["dispute", "accept-loss", dispute.paymentDisputeId])
        #expect(again.status == 0, "\(again.output) \(again.errors)")
        #expect(fixture.sandbox.requests(route: "disputes.accept_loss").count == 1, "the second is done from a read alone")
        let show = try await fixture.cli(["show", "dispute-1"])
        #expect(show.output.contains("Disputes") && show.output.contains("accept-loss asked by"), "\(show.output)")
        #expect(try await fixture.stop() == 0)
    }

    @Test(
        "Two daemons on one PostgreSQL store, the webhook delivered to both and both listing: each change one outcome, the accept-loss one call"
    )
    func postgresCluster() async throws {
        let cluster = try await Cluster(daemons: 2, extraConfig: Self.config)
        try await cluster.start(0)
        try await cluster.start(1)
        let created = try await cluster.payment("dispute-pg", amount: 7_000)
        try await waitUntil(timeout: .seconds(30)) { cluster.sandbox.effects(kind: .orderPlaced).contains { $0.kpSessionId == created.kpSessionId } }
        let order = try #require(cluster.sandbox.effects(kind: .orderPlaced).first { $0.kpSessionId == created.kpSessionId }?.orderId)
        try await waitUntil(timeout: .seconds(30)) { cluster.sandbox.effects(kind: .captured).contains { $0.orderId == order } }
        let dispute = try cluster.sandbox.openDispute(order: order).paymentDisputeId
        let hook = try Self.webhook(cluster.sandbox)
        for fixture in cluster.fixtures {
            let answer = try await fixture.post("/v1/webhooks/klarna", hook.body, headers: hook.headers)
            #expect(answer.status == 202, "\(answer.body)")
        }
        try await waitUntil(timeout: .seconds(30)) { try await cluster.count("SELECT count(*) FROM disputes") == 1 }
        let accepted = try await cluster.fixtures[1].cli(["dispute", "accept-loss", dispute])
        #expect(accepted.status == 0, "\(accepted.output) \(accepted.errors)")
        try await waitUntil(timeout: .seconds(30)) {
            try await cluster.count("SELECT count(*) FROM outcomes WHERE kind = 'dispute_lost'") == 1
        }
        // Both keep listing (every minute) and looking: nothing is written twice.
        #expect(try await cluster.count("SELECT count(*) FROM outcomes WHERE kind = 'dispute_opened'") == 1)
        #expect(try await cluster.count("SELECT count(*) FROM outcomes WHERE kind LIKE 'dispute%'") == 2)
        #expect(cluster.sandbox.requests(route: "disputes.accept_loss").count == 1)
        #expect(try await cluster.count("SELECT count(*) FROM dispute_hints") == 0)
        for fixture in cluster.fixtures { #expect(try await fixture.stop() == 0) }
    }
}
