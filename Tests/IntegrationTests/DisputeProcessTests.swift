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

    /// The dispute ids `disputes --json` lists with `options`, in its order.
    static func listed(_ fixture: DaemonFixture, _ options: [String]) async throws -> [String] {
        let shown = try await fixture.cli(["disputes", "--json"] + options)
        #expect(shown.status == 0, "\(shown.errors)")
        let views = try JSONSerialization.jsonObject(with: Data(shown.output.utf8)) as? [[String: Any]] ?? []
        return views.compactMap { ($0["dispute"] as? [String: Any])?["id"] as? String }
    }

    @Test(
        "SQLite: a dispute's webhook is a hint read at once (dispute_opened and the 72 h warning in the outbox); disputes lists it, nearest deadline first; /metrics counts, holds and times them; accept-loss over the operators' socket and from the command line each reaches Klarna once and ends dispute_lost"
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

        // A second dispute, due sooner, its amount held: listed first, alone within 2 days, counted in /metrics, and
        // answered over the operators' socket.
        let second = try await RefundProcessTests.capturedOrder(fixture, amount: 4_000, reference: "dispute-2")
        let sooner = try fixture.sandbox.openDispute(
            order: second, amount: 3_000, holdPolicy: "ON_DISPUTE_INITIATED", respondWithin: .seconds(30 * 3_600)
        ).paymentDisputeId
        let soonerHook = try Self.webhook(fixture.sandbox)
        #expect(try await fixture.post("/v1/webhooks/klarna", soonerHook.body, headers: soonerHook.headers).status == 202)
        try await waitUntil(timeout: .seconds(30)) { fixture.outboxFiles().filter { $0.hasSuffix("dispute_opened.json") }.count == 2 }
        #expect(try await Self.listed(fixture, ["--open"]) == [sooner, dispute.paymentDisputeId], "nearest deadline first")
        #expect(try await Self.listed(fixture, ["--due-within", "2"]) == [sooner])
        var samples: [MetricsTests.Sample] = []
        try await waitUntil(timeout: .seconds(30)) {
            samples = try await MetricsTests.parse(try await fixture.post("/metrics", "", method: "GET").body, in: fixture.directory)
            return MetricsTests.value(samples, "klarna_reconciler_open_disputes", ["account": "default", "state": "INITIATED"]) == 2
        }
        let held = samples.filter { $0.name == "klarna_reconciler_disputed_amount_held" && $0.labels["account"] == "default" }
        #expect(held.map(\.value) == [3_000], "the held amount, of the second dispute only: \(held)")
        let next = try #require(MetricsTests.value(samples, "klarna_reconciler_dispute_next_deadline_seconds", ["account": "default"]))
        #expect(next > 29 * 3_600 && next <= 30 * 3_600, "the second dispute's deadline, 30 h after it opened: \(next) s")

        let control = fixture.controlPath
        let noSuchAction = try await fixture.post("/v2/disputes/\(sooner)/refund", "", socket: control)
        #expect(noSuchAction.status == 404 && noSuchAction.body.contains("not_found"), "\(noSuchAction.body)")
        let emptyAppeal = try await fixture.post("/v2/disputes/\(sooner)/appeal", "{}", socket: control)
        #expect(emptyAppeal.status == 400 && emptyAppeal.body.contains("malformed"), "\(emptyAppeal.body)")
        let unknownOverSocket = try await fixture.post("/v2/disputes/krn:nothing:2/accept-loss?wait=1", "", socket: control)
        #expect(unknownOverSocket.status == 404 && unknownOverSocket.body.contains("unknown_dispute"), "\(unknownOverSocket.body)")
        let overSocket = try await fixture.post("/v2/disputes/\(sooner)/accept-loss?wait=20", "", socket: control)
        #expect(overSocket.status == 200 && overSocket.body.contains("done"), "\(overSocket.body)")
        #expect(fixture.sandbox.dispute(sooner)?.outcome == "LOST")
        let socketAgain = try await fixture.post("/v2/disputes/\(sooner)/accept-loss?wait=20", "", socket: control)
        #expect(socketAgain.status == 200, "\(socketAgain.body)")
        #expect(fixture.sandbox.requests(route: "disputes.accept_loss").count == 1, "asked twice over the socket, sent once")

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
        #expect(fixture.sandbox.requests(route: "disputes.accept_loss").count == 2, "one per dispute: the CLI's second is done from a read alone")
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
