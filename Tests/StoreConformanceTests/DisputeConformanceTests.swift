import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore
import ReconcilerStore

/// What every store promises of disputes, on SQLite and on PostgreSQL: a dispute written only over the revision its
/// writer read (so a change's outcome is written once by one of two daemons), the hints a webhook's ingest leaves until
/// a write of the dispute, the looks and actions due, and the operators' requests and reports.
@Suite("Store conformance: disputes")
struct DisputeConformanceTests {
    let t0 = Fixtures.t0

    func read(
        _ id: String, order: String? = "o-1", _ state: DisputeState = .initiated, due: TimeInterval = 7 * 86_400, updated: TimeInterval = 0
    )
        -> DisputeObservation
    {
        DisputeObservation(
            id: id, orderID: order, state: state, reason: "PURCHASE_UNAUTHORIZED", amount: 4_000, currency: "EUR", holdPolicy: "ON_DISPUTE_INITIATED",
            responseDueAt: state == .initiated ? t0.addingTimeInterval(due) : nil, updatedAt: t0.addingTimeInterval(updated))
    }

    /// What the service writes for `observation` over `known`.
    func write(_ observation: DisputeObservation, over known: TrackedDispute?, tracked: Bool = true) -> DisputeWrite {
        let step = DisputeRules.apply(observation, to: known, orderTracked: tracked, now: t0)
        let dispute = step.dispute
        return DisputeWrite(
            dispute: dispute, raw: #"{"payment_dispute_id":"\#(observation.id)"}"#,
            nextLookAt: DisputeRules.nextLook(dispute, leads: [.seconds(72 * 3_600)], now: t0), expectedRevision: known?.revision,
            readStartedAt: t0,
            outcomes: step.change.map { [Outcome(dispute, change: $0)] } ?? [], events: step.events)
    }

    func hint(_ id: String, event: String, account: AccountID = .default) -> IngestRecord {
        IngestRecord(
            dedupeKey: "kn-event:\(event)", kind: "klarna_dispute", source: "socket", summary: "dispute webhook",
            action: .hintDispute(DisputeHint(disputeID: id, account: account)))
    }

    @Test(
        "A dispute is written once over the revision read: a second writer of the same change writes nothing, its outcome is one, and the order's timeline tells it",
        arguments: Backend.allCases)
    func revisions(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            var change = Change()
            change.newOrders = [Fixtures.order("o-1", session: nil, reference: nil, policy: .immediate, currency: "EUR")]
            try await s.store.commit(change, at: t0)
            #expect(try await s.store.trackedOrders(among: ["o-1", "o-404"], account: .default) == ["o-1"])
            #expect(try await !s.store.isHeld(order: "o-1"))
            var hold = Change()
            hold.holds = [(key: .order("o-1"), by: "uid 1000 (alice)")]
            try await s.store.commit(hold, at: t0)
            #expect(try await s.store.isHeld(order: "o-1"))
            #expect(try await s.store.dispute("d-1") == nil)

            let first = write(read("d-1"), over: nil)
            #expect(try await s.store.record(first, at: t0))
            let other = try await s.openAnother()
            #expect(try await !other.record(first, at: t0), "the same new dispute again: written already")
            let stored = try #require(try await s.store.dispute("d-1"))
            #expect(stored.revision == 0 && stored.state == .initiated && stored.heldAmount == 4_000)

            let moved = write(read("d-1", .representment, updated: 10), over: stored)
            #expect(try await s.store.record(moved, at: t0))
            #expect(try await !other.record(moved, at: t0), "written over a revision that moved")
            #expect(try await s.store.dispute("d-1")?.revision == 1)
            let outcomes = try await s.store.undeliveredOutcomes(now: t0, limit: 10).map(\.outcome.kind)
            #expect(outcomes == [.disputeOpened, .disputeChanged])
            let events = try await s.store.timeline(for: "o-1").events.map(\.kind)
            #expect(events == [EventKind.disputeOpened.rawValue, EventKind.disputeChanged.rawValue])

            // An orphan's events go nowhere; its outcome is kept.
            #expect(try await s.store.record(write(read("d-2", order: "o-404"), over: nil, tracked: false), at: t0))
            #expect(try await s.store.dispute("d-2")?.orphan == true)
            #expect(try await s.store.undeliveredOutcomes(now: t0, limit: 10).count == 3)
        }
    }

    @Test(
        "A webhook's hint stays until the dispute is written or forgotten; the looks due and the health come from the open disputes",
        arguments: Backend.allCases)
    func hintsLooksHealth(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            #expect(try await s.store.ingest(hint("d-1", event: "e-1"), at: t0) == .accepted(wake: []))
            #expect(try await s.store.ingest(hint("d-1", event: "e-1"), at: t0) == .repeated(firstSeen: t0))
            _ = try await s.store.ingest(hint("d-1", event: "e-2"), at: t0.addingTimeInterval(1))
            _ = try await s.store.ingest(hint("d-9", event: "e-3"), at: t0.addingTimeInterval(2))
            #expect(try await s.store.disputeHints(account: .default, limit: 10) == ["d-1", "d-9"])
            #expect(try await s.store.disputeHints(account: .default, limit: 1) == ["d-1"])
            try await s.store.forgetDisputeHints(["d-9"])
            // A webhook that came while the read was under way is answered by a read of its own.
            _ = try await s.store.ingest(hint("d-1", event: "e-4"), at: t0.addingTimeInterval(5))
            #expect(try await s.store.record(write(read("d-1"), over: nil), at: t0))
            #expect(try await s.store.disputeHints(account: .default, limit: 10) == ["d-1"])
            let known = try #require(try await s.store.dispute("d-1"))
            var again = write(read("d-1", updated: 1), over: known)
            again.readStartedAt = t0.addingTimeInterval(6)
            #expect(try await s.store.record(again, at: t0))
            #expect(try await s.store.disputeHints(account: .default, limit: 10).isEmpty)

            #expect(try await s.store.record(write(read("d-2", due: 3 * 86_400), over: nil), at: t0))
            #expect(try await s.store.record(write(read("d-3", .closed), over: nil), at: t0))
            let look = t0.addingTimeInterval(-72 * 3_600 + 3 * 86_400)
            #expect(try await s.store.nextDisputeLook(account: .default) == look)
            #expect(try await s.store.disputesToLook(account: .default, at: look.addingTimeInterval(-1), limit: 10).isEmpty)
            #expect(try await s.store.disputesToLook(account: .default, at: look, limit: 10).map(\.id) == ["d-2"])
            #expect(
                try await s.store.disputesToLook(account: .default, at: t0.addingTimeInterval(8 * 86_400), limit: 10).map(\.id) == ["d-2", "d-1"])

            let health = try await s.store.disputeHealth(account: .default)
            #expect(health.openByState == ["INITIATED": 2] && health.heldByCurrency == ["EUR": 8_000])
            #expect(health.nextDeadline == t0.addingTimeInterval(3 * 86_400) && health.listedThrough == nil)
            try await s.store.listed(through: t0.addingTimeInterval(60), account: .default)
            try await s.store.listed(through: t0, account: .default)
            #expect(try await s.store.disputeHealth(account: .default).listedThrough == t0.addingTimeInterval(60), "never moves back")

            #expect(try await s.store.disputes(openOnly: false, dueBefore: nil, account: nil).map(\.id) == ["d-2", "d-1", "d-3"])
            #expect(try await s.store.disputes(openOnly: true, dueBefore: t0.addingTimeInterval(4 * 86_400), account: nil).map(\.id) == ["d-2"])
            #expect(try await s.store.disputes(orderIDs: ["o-1"]).count == 3)
            #expect(try await s.store.disputes(orderIDs: ["o-1"]).map(\.id) == ["d-1", "d-2", "d-3"])
            #expect(try await s.store.disputes(orderIDs: ["o-2"]).isEmpty)
        }
    }

    @Test(
        "Accounts: each account's hints, looks, actions, health and last list are its own; a dispute is tied only to its account's order",
        arguments: Backend.allCases)
    func byAccount(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            let us = try #require(AccountID(rawValue: "us"))
            var change = Change()
            var usOrder = Fixtures.order("o-us", session: nil, reference: nil, policy: .immediate, currency: "USD")
            usOrder.account = us
            change.newOrders = [Fixtures.order("o-1", session: nil, reference: nil, policy: .immediate, currency: "EUR"), usOrder]
            try await s.store.commit(change, at: t0)
            #expect(try await s.store.trackedOrders(among: ["o-1", "o-us"], account: us) == ["o-us"])
            #expect(try await s.store.trackedOrders(among: ["o-1", "o-us"], account: .default) == ["o-1"])

            _ = try await s.store.ingest(hint("d-eu", event: "e-1"), at: t0)
            _ = try await s.store.ingest(hint("d-us", event: "e-2", account: us), at: t0)
            #expect(try await s.store.disputeHints(account: us, limit: 10) == ["d-us"])
            #expect(try await s.store.disputeHints(account: .default, limit: 10) == ["d-eu"])

            var usWrite = write(read("d-us", order: "o-us", due: 2 * 86_400), over: nil)
            usWrite.dispute.account = us
            #expect(try await s.store.record(usWrite, at: t0))
            #expect(try await s.store.record(write(read("d-eu", due: 5 * 86_400), over: nil), at: t0))
            #expect(try await s.store.dispute("d-us")?.account == us)
            #expect(try await s.store.disputeHints(account: us, limit: 10).isEmpty)
            #expect(try await s.store.disputeHints(account: .default, limit: 10).isEmpty)

            #expect(try await s.store.disputes(openOnly: true, dueBefore: nil, account: us).map(\.id) == ["d-us"])
            #expect(try await s.store.disputes(openOnly: true, dueBefore: nil, account: .default).map(\.id) == ["d-eu"])
            #expect(try await s.store.disputes(openOnly: true, dueBefore: nil, account: nil).map(\.id) == ["d-us", "d-eu"])
            let later = t0.addingTimeInterval(10 * 86_400)
            #expect(try await s.store.disputesToLook(account: us, at: later, limit: 10).map(\.id) == ["d-us"])
            #expect(try await s.store.disputesToLook(account: .default, at: later, limit: 10).map(\.id) == ["d-eu"])
            #expect(try await s.store.nextDisputeLook(account: us) == t0.addingTimeInterval(-72 * 3_600 + 2 * 86_400))
            #expect(try await s.store.nextDisputeLook(account: .default) == t0.addingTimeInterval(-72 * 3_600 + 5 * 86_400))
            #expect(try await s.store.nextDisputeLook(account: AccountID(rawValue: "oc")!) == nil)

            let health = try await s.store.disputeHealth(account: us)
            #expect(health.openByState == ["INITIATED": 1] && health.nextDeadline == t0.addingTimeInterval(2 * 86_400))
            try await s.store.listed(through: t0.addingTimeInterval(60), account: us)
            #expect(try await s.store.disputeHealth(account: us).listedThrough == t0.addingTimeInterval(60))
            #expect(try await s.store.disputeHealth(account: .default).listedThrough == nil, "one account's list is not another's")

            let action = DisputeAction(disputeID: "d-us", orderID: nil, kind: .acceptLoss, requestedAt: t0, requestedBy: "test")
            guard case .recorded(let recorded) = try await s.store.request(action, at: t0) else { Issue.record("not recorded"); return }
            #expect(try await s.store.dueDisputeActions(account: us, at: later, limit: 10).map(\.id) == [recorded.id])
            #expect(try await s.store.dueDisputeActions(account: .default, at: later, limit: 10).isEmpty)
        }
    }

    @Test(
        "An operator's action is recorded once per kind while under way, written only over the revision read, and its refusal's outcome once",
        arguments: Backend.allCases)
    func actions(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            let ask = DisputeAction(disputeID: "d-1", orderID: nil, kind: .acceptLoss, requestedAt: t0, requestedBy: "test")
            await #expect(throws: DisputeActionProblem.self) { try await s.store.request(ask, at: t0) }
            #expect(try await s.store.record(write(read("d-1"), over: nil), at: t0))
            guard case .recorded(let recorded) = try await s.store.request(ask, at: t0) else { Issue.record("not recorded"); return }
            #expect(recorded.orderID == "o-1", "the dispute's order, for the timeline")
            #expect(try await s.store.request(ask, at: t0) == .existing(recorded))
            let appeal = DisputeAction(disputeID: "d-1", orderID: nil, kind: .appeal, requestedAt: t0, requestedBy: "test", information: "no")
            #expect(try await s.store.request(appeal, at: t0) == .existing(recorded), "one answer at a time per dispute")
            #expect(try await s.store.record(write(read("d-2", due: 3 * 86_400), over: nil), at: t0))
            let evidence = DisputeEvidence(
                fileName: "a.pdf", contentType: "application/pdf", file: Data("%PDF".utf8), description: nil, additionalInformation: nil)
            let withFile = DisputeAction(disputeID: "d-2", orderID: "o-1", kind: .evidence, requestedAt: t0, requestedBy: "test", evidence: evidence)
            guard case .recorded(let other) = try await s.store.request(withFile, at: t0) else { Issue.record("not recorded"); return }
            #expect(other.evidence?.file.isEmpty == true, "answers never carry the file")
            #expect(try await s.store.disputeAction(other.id)?.evidence?.file == Data("%PDF".utf8), "the service reads it whole")

            let due = try await s.store.dueDisputeActions(account: .default, at: t0, limit: 10)
            #expect(due.map(\.id) == [recorded.id, other.id])
            var sent = due[0]
            sent.state = .sent
            sent.attempts = 1
            sent.nextAt = t0.addingTimeInterval(31)
            #expect(try await s.store.update(DisputeActionWrite(action: sent, expectedRevision: 0), at: t0))
            #expect(try await !s.store.update(DisputeActionWrite(action: sent, expectedRevision: 0), at: t0), "another daemon took it")
            #expect(try await s.store.dueDisputeActions(account: .default, at: t0, limit: 10).map(\.id) == [other.id])
            #expect(try await s.store.nextDisputeLook(account: .default) == t0)

            var refused = sent
            refused.state = .refused
            refused.nextAt = nil
            let outcome = Outcome(refused, failed: "wrong state", dispute: try await s.store.dispute("d-1"))
            #expect(
                try await s.store.update(
                    DisputeActionWrite(action: refused, expectedRevision: 1, outcome: outcome, event: DomainEvent(.operatorRefused, "refused")),
                    at: t0))
            #expect(try await s.store.disputeAction(recorded.id)?.state == .refused)
            var done = try #require(try await s.store.disputeAction(other.id))
            done.state = .done
            done.nextAt = nil
            #expect(try await s.store.update(DisputeActionWrite(action: done, expectedRevision: done.revision), at: t0))
            #expect(try await s.store.disputeAction(other.id)?.evidence?.file.isEmpty == true, "the file leaves the store when the action ends")
            #expect(try await s.store.disputeActions(disputeIDs: ["d-1", "d-2"]).map(\.kind) == [.acceptLoss, .evidence])
            #expect(try await s.store.undeliveredOutcomes(now: t0, limit: 10).map(\.outcome.kind).contains(.disputeActionFailed))
            guard case .recorded = try await s.store.request(ask, at: t0) else {
                Issue.record("a finished action does not stand in for a new one")
                return
            }
        }
    }
}
