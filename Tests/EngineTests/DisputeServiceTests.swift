import Foundation
import KlarnaAPI
import KlarnaSandbox
import Logging
import ReconcilerStore
import SQLiteBackend
import Testing
import TestSupport
@testable import Engine
@testable import Ingest
@testable import ReconcilerCore

/// The dispute service against the sandbox's Disputes API v4 over real sockets, with a real store (each test on
/// SQLite and on PostgreSQL) whose orders the engine captured, on one manual clock: each sync driven directly. Every
/// change is one outcome, every warning comes once at its lead time, and every operator's action reaches Klarna once.
@Suite("Dispute service")
struct DisputeServiceTests {
    static let settings = DisputeSettings(
        enabled: true, syncInterval: .seconds(3_600), warnBefore: [.seconds(72 * 3_600), .seconds(24 * 3_600)],
        firstSyncLookback: .seconds(120 * 86_400), retry: RetryPolicy(initialDelay: .seconds(1), maxDelay: .seconds(20), maxAttempts: 4),
        longestCall: .seconds(31))

    @Test(
        "A dispute from its signed webhook: the hint is read at once and its opening is one outcome with Klarna's deadline; the webhook again is a repeat, and the list finds nothing new",
        arguments: StoreKind.allCases)
    func fromWebhook(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let orderID = try await h.capturedOrder(10_000)
            let service = h.disputeService()
            let ingestor = h.disputeIngestor(bell: service.bell)
            let opened = try h.sandbox.openDispute(order: orderID, reason: "PURCHASE_UNAUTHORIZED", amount: 4_000)
            let hook = try #require(h.sandbox.webhooks().last)
            #expect(hook.eventType == "payment.dispute.state-change.initiated")
            #expect(await ingestor.ingest(hook.delivery, source: "socket").word == "accepted")
            #expect(try await h.store.disputeHints(account: .default, limit: 10) == [opened.paymentDisputeId])

            let report = try await service.sync(list: false)
            #expect(report.hinted == 1 && report.outcomes == 1)
            let outcomes = try await h.disputeOutcomes()
            #expect(outcomes.map(\.kind) == [.disputeOpened])
            #expect(outcomes.first?.disputeID == opened.paymentDisputeId && outcomes.first?.orderID == orderID)
            #expect(sameMillisecond(outcomes.first?.deadline, opened.deadline) && outcomes.first?.amount == 4_000)
            #expect(try await h.store.disputeHints(account: .default, limit: 10).isEmpty)
            let stored = try #require(try await h.store.dispute(opened.paymentDisputeId))
            #expect(stored.state == .initiated && !stored.orphan && stored.apiVersion == "v4" && stored.reason == "PURCHASE_UNAUTHORIZED")

            #expect(await ingestor.ingest(hook.delivery, source: "socket").word == "repeat")
            #expect(try await service.sync(list: false).hinted == 0)
            #expect(try await service.sync().outcomes == 0, "the list reads it again and finds nothing new")
            #expect(try await h.disputeOutcomes().count == 1)
            let events = try await h.store.timeline(for: orderID).events.map(\.kind)
            #expect(events.contains(EventKind.disputeOpened.rawValue))
            #expect(h.logs.all.contains { $0.contains("message_id=\(MessageID.disputeOpened.rawValue)") && $0.contains("dispute_id=") })
        }
    }

    @Test(
        "From polling alone (no webhook ever arrives): opening, evidence (upload and represent), a preliminary loss, an appeal and the final win are one outcome each, in order",
        arguments: StoreKind.allCases)
    func pollingAndLifecycle(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let orderID = try await h.capturedOrder(12_000)
            let service = h.disputeService()
            let dispute = try h.sandbox.openDispute(order: orderID).paymentDisputeId
            #expect(try await service.sync().listed == 1)
            #expect(try await h.disputeOutcomes().map(\.kind) == [.disputeOpened])

            let evidence = try #require(
                try? DisputeEvidence.checked(
                    fileName: "/tmp/receipt.pdf", file: Data("%PDF-1.4 receipt".utf8), description: "the receipt",
                    additionalInformation: "delivered on time"
                ).get())
            #expect(try await h.ask(.evidence, dispute, evidence: evidence) != nil)
            #expect(try await service.sync(list: false).actions == 1)
            #expect(h.sandbox.dispute(dispute)?.state == "REPRESENTMENT")
            #expect(try await h.disputeOutcomes().map(\.kind) == [.disputeOpened, .disputeChanged])
            #expect(try await h.actions(dispute).map(\.state) == [.done])
            // Asked again once Klarna took it: done from the read, as accept-loss asked again is; nothing sent, nothing refused.
            #expect(try await h.ask(.evidence, dispute, evidence: evidence) != nil)
            try await service.sync(list: false)
            #expect(try await h.actions(dispute).map(\.state) == [.done, .done])
            #expect(try await h.disputeOutcomes().map(\.kind) == [.disputeOpened, .disputeChanged])

            h.clock.advance(by: .seconds(600))
            try h.sandbox.decideDispute(dispute, outcome: "LOST")
            #expect(try await service.sync().outcomes == 1)
            let appealDue = try #require(try await h.store.dispute(dispute)?.deadline)
            #expect(try await h.disputeOutcomes().last?.disputeState == "PRE_ARBITRATION")
            #expect(try await h.disputeOutcomes().last?.deadline == appealDue)

            #expect(try await h.ask(.appeal, dispute, information: "the parcel was signed for") != nil)
            try await service.sync(list: false)
            #expect(h.sandbox.dispute(dispute)?.state == "ARBITRATION")
            h.clock.advance(by: .seconds(600))
            try h.sandbox.decideDispute(dispute, outcome: "WON")
            try await service.sync()
            try await service.sync()
            #expect(
                try await h.disputeOutcomes().map(\.kind) == [.disputeOpened, .disputeChanged, .disputeChanged, .disputeChanged, .disputeWon])
            #expect(h.sandbox.requests().filter { $0.route == "disputes.represent" }.count == 1)
            #expect(h.sandbox.requests().filter { $0.route == "disputes.appeal" }.count == 1)
            #expect(try await h.store.dispute(dispute)?.isOpen == false)
        }
    }

    @Test(
        "Deadline warnings at 72 h and 24 h on a manual clock, each once; an extension by Klarna moves them and they come again; the missed deadline is read at once and is one loss",
        arguments: StoreKind.allCases)
    func warnings(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let orderID = try await h.capturedOrder(8_000)
            let service = h.disputeService()
            let opened = try h.sandbox.openDispute(order: orderID, reason: "PURCHASE_UNAUTHORIZED")
            let deadline = try #require(opened.deadline)
            try await service.sync()
            #expect(sameMillisecond(try await h.store.nextDisputeLook(account: .default), deadline.addingTimeInterval(-72 * 3_600)))

            h.clock.advance(to: deadline.addingTimeInterval(-72 * 3_600 - 1))
            #expect(try await service.sync(list: false).looked == 0)
            h.clock.advance(by: .seconds(1))
            #expect(try await service.sync(list: false).outcomes == 1)
            #expect(try await h.disputeOutcomes().map(\.kind) == [.disputeOpened, .disputeDeadline])
            h.clock.advance(by: .seconds(3_600))
            #expect(try await service.sync(list: false).outcomes == 0, "never twice")
            h.clock.advance(to: deadline.addingTimeInterval(-24 * 3_600))
            #expect(try await service.sync(list: false).outcomes == 1)
            #expect(try await h.disputeOutcomes().last?.reason.contains("24 h") == true)

            // Klarna extends the deadline by three days: one change, and both warnings again for the new deadline.
            let extended = deadline.addingTimeInterval(3 * 86_400)
            try h.sandbox.extendDispute(opened.paymentDisputeId, until: extended)
            #expect(try await service.sync().outcomes == 1)
            #expect(try await h.disputeOutcomes().last?.kind == .disputeChanged)
            #expect(sameMillisecond(try await h.disputeOutcomes().last?.deadline, extended))
            h.clock.advance(to: extended.addingTimeInterval(-72 * 3_600))
            #expect(try await service.sync(list: false).outcomes == 1)
            h.clock.advance(to: extended.addingTimeInterval(-24 * 3_600))
            #expect(try await service.sync(list: false).outcomes == 1)

            // Nobody answered: just after the deadline the dispute is read, Klarna has closed it lost.
            h.clock.advance(to: extended.addingTimeInterval(DisputeRules.afterDeadline))
            #expect(try await service.sync(list: false).outcomes == 1)
            #expect(
                try await h.disputeOutcomes().map(\.kind) == [
                    .disputeOpened, .disputeDeadline, .disputeDeadline, .disputeChanged, .disputeDeadline, .disputeDeadline, .disputeLost,
                ])
            #expect(try await h.store.nextDisputeLook(account: .default) == nil)
        }
    }

    @Test(
        "A dispute of an order this daemon never tracked is recorded as an orphan, with its outcome, and nothing on any timeline",
        arguments: StoreKind.allCases)
    func orphan(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let orderID = try await h.capturedOrder(5_000)
            let other = try await h.openEmptyStore()
            let service = h.disputeService(store: other)
            let dispute = try h.sandbox.openDispute(order: orderID).paymentDisputeId
            try await service.sync()
            #expect(try await other.dispute(dispute)?.orphan == true)
            let outcomes = try await other.undeliveredOutcomes(now: h.clock.now, limit: 10).map(\.outcome)
            #expect(outcomes.map(\.kind) == [.disputeOpened] && outcomes.first?.reason.contains("does not track") == true)
        }
    }

    @Test(
        "accept-loss exactly once: a reset after Klarna acted is resolved by a read after the longest call (no second POST); asked again it is done from the read alone",
        arguments: StoreKind.allCases)
    func acceptLossAfterReset(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let orderID = try await h.capturedOrder(9_000)
            let service = h.disputeService()
            let dispute = try h.sandbox.openDispute(order: orderID).paymentDisputeId
            try await service.sync()
            h.sandbox.addFault(SandboxFault(route: "disputes.accept_loss", kind: .reset, afterEffect: true))
            #expect(try await h.ask(.acceptLoss, dispute) != nil)
            try await service.sync(list: false)
            #expect(try await h.actions(dispute).map(\.state) == [.sent])
            #expect(h.sandbox.dispute(dispute)?.outcome == "LOST", "Klarna acted; the answer was lost")
            try await service.sync(list: false)
            #expect(h.acceptLossPosts == 1, "not sent again before the longest call has passed")
            h.clock.advance(by: .seconds(32))
            try await service.sync(list: false)
            #expect(try await h.actions(dispute).map(\.state) == [.done])
            #expect(h.acceptLossPosts == 1)
            #expect(try await h.disputeOutcomes().map(\.kind) == [.disputeOpened, .disputeLost])

            #expect(try await h.ask(.acceptLoss, dispute) != nil)
            try await service.sync(list: false)
            #expect(try await h.actions(dispute).map(\.state) == [.done, .done])
            #expect(h.acceptLossPosts == 1)
        }
    }

    @Test(
        "accept-loss: a 503 before Klarna acted is sent again after a read; a dispute in a state that does not take it is refused without a call; Klarna's 409 is reported, never retried",
        arguments: StoreKind.allCases)
    func acceptLossRefusals(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let service = h.disputeService()
            let first = try h.sandbox.openDispute(order: try await h.capturedOrder(7_000)).paymentDisputeId
            let second = try h.sandbox.openDispute(order: try await h.capturedOrder(6_000)).paymentDisputeId
            let third = try h.sandbox.openDispute(order: try await h.capturedOrder(5_000)).paymentDisputeId
            try await service.sync()

            h.sandbox.addFault(SandboxFault(route: "disputes.accept_loss", kind: .status, status: 503))
            #expect(try await h.ask(.acceptLoss, first) != nil)
            try await service.sync(list: false)
            #expect(h.sandbox.dispute(first)?.state == "INITIATED")
            h.clock.advance(by: .seconds(32))
            try await service.sync(list: false)
            #expect(h.sandbox.dispute(first)?.outcome == "LOST" && h.acceptLossPosts == 2)
            #expect(try await h.actions(first).map(\.state) == [.done])

            // Evidence first: REPRESENTMENT takes no accept-loss; the read says so before any call.
            let evidence = try DisputeEvidence.checked(
                fileName: "a.png", file: Data([0x89, 0x50, 0x4E, 0x47, 1]), description: nil, additionalInformation: nil
            )
            .get()
            #expect(try await h.ask(.evidence, second, evidence: evidence) != nil)
            try await service.sync(list: false)
            #expect(try await h.ask(.acceptLoss, second) != nil)
            try await service.sync(list: false)
            #expect(try await h.actions(second).map(\.state) == [.done, .refused])
            #expect(h.acceptLossPosts == 2)
            #expect(try await h.disputeOutcomes().filter { $0.kind == .disputeActionFailed }.map(\.disputeID) == [second])

            h.sandbox.addFault(SandboxFault(route: "disputes.accept_loss", kind: .status, status: 409, errorCode: "RESOURCE_CONFLICT"))
            #expect(try await h.ask(.acceptLoss, third) != nil)
            try await service.sync(list: false)
            h.clock.advance(by: .seconds(600))
            try await service.sync(list: false)
            #expect(try await h.actions(third).map(\.state) == [.refused])
            #expect(try await h.actions(third).first?.note?.contains("409") == true)
            #expect(h.acceptLossPosts == 3, "the 409 is the last call")
            #expect(h.sandbox.dispute(third)?.state == "INITIATED")
            #expect(try await h.ask(.acceptLoss, third)?.state == .requested, "asked again, it is a new action")
            #expect(try await h.store.dueDisputeActions(account: .default, at: h.clock.now, limit: 10).count == 1)
        }
    }
    @Test(
        "One dispute Klarna cannot serve holds up no other: a 500 on its read leaves it alone for a while and the next hint is read; a 404 drops its hint; a 403 (the account) fails the sync",
        arguments: StoreKind.allCases)
    func oneDisputeFailing(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let service = h.disputeService()
            let ingestor = h.disputeIngestor(bell: service.bell)
            let first = try h.sandbox.openDispute(order: try await h.capturedOrder(4_000)).paymentDisputeId
            let second = try h.sandbox.openDispute(order: try await h.capturedOrder(3_000)).paymentDisputeId
            for hook in h.sandbox.webhooks() { #expect(await ingestor.ingest(hook.delivery, source: "socket").accepted) }
            h.sandbox.addFault(SandboxFault(route: "disputes.read", kind: .status, status: 500))
            let report = try await service.sync(list: false)
            #expect(report.hinted == 2 && report.outcomes == 1)
            #expect(try await h.store.dispute(second) != nil)
            #expect(try await h.store.dispute(first) == nil)
            #expect(try await h.store.disputeHints(account: .default, limit: 10) == [first])
            #expect(try await service.sync(list: false).hinted == 0, "left alone for a while")
            h.clock.advance(by: .seconds(2))
            #expect(try await service.sync(list: false).outcomes == 1)
            #expect(try await h.store.disputeHints(account: .default, limit: 10).isEmpty)

            let unknown =
                #"{"metadata":{"event_type":"payment.dispute.state-change.closed","event_id":"x-1"},"payload":{"payment_dispute_id":"krn:none:1"}}"#
            let signed = SigningKeys.sign(body: Array(unknown.utf8), key: Array("sandbox-webhook-secret".utf8))
            let delivery = Delivery(
                route: .klarnaNetwork, headers: [("Klarna-Signature", signed), ("Klarna-Signing-Key-Id", "sandbox-signing-key-1")],
                body: Array(unknown.utf8))
            #expect(await ingestor.ingest(delivery, source: "socket").accepted)
            try await service.sync(list: false)
            #expect(try await h.store.disputeHints(account: .default, limit: 10).isEmpty, "Klarna does not know it: dropped")

            h.sandbox.addFault(SandboxFault(route: "disputes.list", kind: .status, status: 403, errorCode: "OPERATION_FORBIDDEN"))
            await #expect(throws: KlarnaAPIError.self) { try await service.sync() }
        }
    }

    @Test(
        "accept-loss answered 429 (Klarna did nothing): the dispute is read again after the longest call, and the loss is sent again once",
        arguments: StoreKind.allCases)
    func acceptLossRateLimited(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let service = h.disputeService()
            let dispute = try h.sandbox.openDispute(order: try await h.capturedOrder(6_500)).paymentDisputeId
            try await service.sync()
            h.sandbox.addFault(SandboxFault(route: "disputes.accept_loss", kind: .rateLimit, retryAfterSeconds: 2))
            #expect(try await h.ask(.acceptLoss, dispute) != nil)
            try await service.sync(list: false)
            #expect(try await h.actions(dispute).map(\.state) == [.sent])
            #expect(h.sandbox.dispute(dispute)?.state == "INITIATED")
            h.clock.advance(by: .seconds(32))
            try await service.sync(list: false)
            #expect(try await h.actions(dispute).map(\.state) == [.done])
            #expect(h.acceptLossPosts == 2)
            #expect(try await h.disputeOutcomes().map(\.kind) == [.disputeOpened, .disputeLost])
        }
    }

    @Test(
        "A daemon killed between the evidence's upload and its submission: the next one uploads again (the first file stays unused) and submits once",
        arguments: StoreKind.allCases)
    func crashBetweenUploadAndSubmission(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let service = h.disputeService()
            let dispute = try h.sandbox.openDispute(order: try await h.capturedOrder(8_500)).paymentDisputeId
            try await service.sync()
            let evidence = try DisputeEvidence.checked(
                fileName: "receipt.pdf", file: Data("%PDF-1.4".utf8), description: "receipt", additionalInformation: nil
            ).get()
            let asked = try #require(try await h.ask(.evidence, dispute, evidence: evidence))
            // What the killed daemon left: marked sent, its upload made at Klarna, its attachment id never written.
            var sent = try #require(try await h.store.disputeAction(asked.id))
            sent.state = .sent
            sent.attempts = 1
            sent.sentAt = h.clock.now
            sent.nextAt = h.clock.now.addingTimeInterval(31)
            #expect(try await h.store.update(DisputeActionWrite(action: sent, expectedRevision: sent.revision), at: h.clock.now))
            _ = try await h.client.addDisputeAttachment(
                id: dispute, fileName: "receipt.pdf", contentType: "application/pdf", file: Data("%PDF-1.4".utf8))

            h.clock.advance(by: .seconds(32))
            try await h.disputeService().sync(list: false)
            #expect(try await h.actions(dispute).map(\.state) == [.done])
            #expect(h.sandbox.dispute(dispute)?.state == "REPRESENTMENT")
            #expect(h.sandbox.requests(route: "disputes.add_attachment").count == 2)
            #expect(h.sandbox.requests(route: "disputes.represent").count == 1)
        }
    }

    @Test("A held payment's dispute gets no answer until it is released; then one, after a fresh read", arguments: StoreKind.allCases)
    func held(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let orderID = try await h.capturedOrder(5_500)
            let service = h.disputeService()
            let dispute = try h.sandbox.openDispute(order: orderID).paymentDisputeId
            try await service.sync()
            var hold = Change()
            hold.holds = [(key: .order(orderID), by: "uid 1000 (alice)")]
            try await h.store.commit(hold, at: h.clock.now)
            #expect(try await h.ask(.acceptLoss, dispute) != nil)
            try await service.sync(list: false)
            #expect(h.acceptLossPosts == 0)
            #expect(try await h.actions(dispute).first?.note?.contains("held") == true)
            var release = Change()
            release.releases = [.order(orderID)]
            try await h.store.commit(release, at: h.clock.now)
            h.clock.advance(by: DisputeService.heldRecheck)
            try await service.sync(list: false)
            #expect(h.acceptLossPosts == 1)
            #expect(try await h.actions(dispute).map(\.state) == [.done])
        }
    }

    @Test(
        "A daemon killed after marking an accept-loss sent, its call landing at Klarna: the next daemon reads only after the longest call, finds the loss, and sends nothing",
        arguments: StoreKind.allCases)
    func crashAfterTheSentMark(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let orderID = try await h.capturedOrder(9_500)
            let service = h.disputeService()
            let dispute = try h.sandbox.openDispute(order: orderID).paymentDisputeId
            try await service.sync()
            let asked = try #require(try await h.ask(.acceptLoss, dispute))
            // What the killed daemon left: the action marked sent, and its call reaching Klarna.
            var sent = asked
            sent.state = .sent
            sent.attempts = 1
            sent.sentAt = h.clock.now
            sent.nextAt = h.clock.now.addingTimeInterval(31)
            #expect(try await h.store.update(DisputeActionWrite(action: sent, expectedRevision: asked.revision), at: h.clock.now))
            try await h.client.acceptDisputeLoss(id: dispute)

            let next = h.disputeService()
            h.clock.advance(by: .seconds(10))
            #expect(try await next.sync(list: false).actions == 0, "not due before the longest call has passed")
            h.clock.advance(by: .seconds(22))
            try await next.sync(list: false)
            #expect(try await h.actions(dispute).map(\.state) == [.done])
            #expect(h.acceptLossPosts == 1, "the killed daemon's call only")
            #expect(try await h.disputeOutcomes().map(\.kind) == [.disputeOpened, .disputeLost])
        }
    }

    @Test(
        "The first list after disputes are switched on records disputes closed before without an outcome; those still open are announced",
        arguments: StoreKind.allCases)
    func firstList(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let closed = try h.sandbox.openDispute(order: try await h.capturedOrder(4_000)).paymentDisputeId
            try await h.client.acceptDisputeLoss(id: closed)
            let open = try h.sandbox.openDispute(order: try await h.capturedOrder(3_000)).paymentDisputeId
            let service = h.disputeService()
            #expect(try await service.sync().listed == 2)
            #expect(try await h.disputeOutcomes().map(\.disputeID) == [open])
            #expect(try await h.store.dispute(closed)?.outcome == "LOST")
            // From then on a dispute first seen closed is news.
            let later = try h.sandbox.openDispute(order: try await h.capturedOrder(2_000)).paymentDisputeId
            try await h.client.acceptDisputeLoss(id: later)
            h.clock.advance(by: .seconds(60))
            try await service.sync()
            #expect(try await h.disputeOutcomes().map(\.kind) == [.disputeOpened, .disputeLost])
        }
    }

    @Test(
        "A dispute's money in Klarna's payouts: its fee, the amount held while open, the hold released and a lost dispute's REVERSAL; the settlement sync matches the REVERSAL of the loss the daemon saw, with no finding, and the payouts add up",
        arguments: StoreKind.allCases)
    func inThePayouts(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let lostOrder = try await h.capturedOrder(10_000)
            let wonOrder = try await h.capturedOrder(6_000)
            let service = h.disputeService()
            let lost = try h.sandbox.openDispute(order: lostOrder, amount: 4_000).paymentDisputeId
            let won = try h.sandbox.openDispute(order: wonOrder, holdPolicy: "ON_DISPUTE_INITIATED").paymentDisputeId
            try await service.sync()
            let currency = try #require(try await h.store.dispute(won)?.currency)
            #expect(try await h.store.disputeHealth(account: .default).heldByCurrency == [currency: 6_000])
            let opened = try h.sandbox.settle().flatMap(\.transactions)
            #expect(opened.filter { $0.detailedType == "DISPUTE_FEE" }.map(\.orderId) == [lostOrder, wonOrder])
            #expect(opened.filter { $0.type == "HOLDBACK" }.map(\.amount) == [6_000])

            #expect(try await h.ask(.acceptLoss, lost) != nil)
            let evidence = try DisputeEvidence.checked(
                fileName: "proof.jpg", file: Data([0xFF, 0xD8, 0xFF, 0xE0]), description: nil, additionalInformation: nil
            )
            .get()
            #expect(try await h.ask(.evidence, won, evidence: evidence) != nil)
            try await service.sync(list: false)
            try h.sandbox.decideDispute(won, outcome: "WON")
            try await service.sync()
            #expect(try await h.store.disputeHealth(account: .default).heldByCurrency.values.allSatisfy { $0 == 0 })
            let closed = try h.sandbox.settle().flatMap(\.transactions)
            #expect(closed.filter { $0.type == "REVERSAL" }.map(\.amount) == [4_000])
            #expect(closed.filter { $0.type == "REVERSAL" }.map(\.reversalReference) == [lost])
            #expect(closed.filter { $0.type == "RELEASE" }.map(\.amount) == [6_000])
            #expect(try h.sandbox.settle().isEmpty, "nothing is paid out twice")

            let settlements = h.settlementService()
            #expect(try await settlements.sync().reconciled == 2)
            #expect(try await h.settlementOutcomes().isEmpty, "no reversal finding for the loss the daemon saw, and the formula holds")
            let recorded = try await h.store.settlementLines(orderIDs: [lostOrder])
            #expect(recorded.contains { $0.line.kind == .reversal && $0.note.contains("close lost") })
        }
    }
}

extension EngineHarness {
    /// A dispute service on this harness's sandbox, clock and logs, over `store` (the harness's by default).
    func disputeService(store: (any ReconcilerStore)? = nil) -> DisputeService {
        DisputeService(
            store: store ?? self.store, client: client, clock: clock, rateLimiter: nil, settings: DisputeServiceTests.settings,
            logger: logs.logger(), random: SeededRandomSource(seed: 3))
    }

    /// The daemon's ingest path for signed webhooks, with the sandbox's signing key.
    func disputeIngestor(bell: Doorbell) -> Ingestor {
        let keys = SigningKeys(["sandbox-signing-key-1": Array("sandbox-webhook-secret".utf8)])
        return Ingestor(
            reader: WebhookReader(tokens: nil, policy: .require, signingKeys: keys), store: store, defaultCapturePolicy: .immediate,
            clock: clock, logger: logs.logger(), disputeBells: DisputeBells([.default: bell]), wake: { _, _ in })
    }

    /// An operator's action as the command line records it; the recorded action.
    func ask(
        _ kind: DisputeAction.Kind, _ disputeID: String, evidence: DisputeEvidence? = nil, information: String? = nil
    ) async throws -> DisputeAction? {
        let action = DisputeAction(
            disputeID: disputeID, orderID: nil, kind: kind, requestedAt: clock.now, requestedBy: "test", evidence: evidence,
            information: information)
        guard case .recorded(let recorded, _) = try await OperatorDesk(store: store).request(action, now: clock.now, wait: .zero) else {
            return nil
        }
        return recorded
    }

    func actions(_ disputeID: String) async throws -> [DisputeAction] { try await store.disputeActions(disputeIDs: [disputeID]) }

    /// Every dispute outcome recorded, oldest first.
    func disputeOutcomes() async throws -> [Outcome] {
        try await store.undeliveredOutcomes(now: clock.now, limit: 10_000).map(\.outcome).filter(\.kind.isDispute)
    }

    var acceptLossPosts: Int { sandbox.requests().filter { $0.route == "disputes.accept_loss" }.count }
}

/// Klarna's dates carry milliseconds; the manual clock finer fractions.
func sameMillisecond(_ a: Date?, _ b: Date?) -> Bool {
    guard let a, let b else { return a == nil && b == nil }
    return abs(a.timeIntervalSince(b)) < 0.001
}

extension ManualClock {
    func advance(to date: Date) {
        let ahead = date.timeIntervalSince(now)
        if ahead > 0 { advance(by: Duration(timeInterval: ahead)) }
    }
}

extension SandboxWebhook {
    /// As a forwarder hands it to the daemon's `POST /v1/webhooks/klarna`.
    var delivery: Delivery {
        Delivery(
            route: .klarnaNetwork, headers: [("Klarna-Signature", signature), ("Klarna-Signing-Key-Id", signingKeyId)], body: Array(body.utf8))
    }
}
