import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore
import ReconcilerStore

/// The same operations on both stores give equal results, order included: where the two backends still carry logic of
/// their own, a drift between them shows here.
@Suite("Store conformance: the two stores compared")
struct StoreComparisonTests {
    let t0 = Fixtures.t0

    /// `operations` on a fresh store of each backend; each backend's answer.
    func onBoth<T: Sendable>(_ operations: @Sendable (any ReconcilerStore) async throws -> T) async throws -> [Backend: T] {
        var answers: [Backend: T] = [:]
        for backend in Backend.allCases {
            answers[backend] = try await StoreUnderTest.with(backend) { s in try await operations(s.store) }
        }
        return answers
    }

    /// A dispute Klarna closed against the shop, as the dispute service writes it.
    func lost(_ id: String, order: String) -> DisputeWrite {
        let observation = DisputeObservation(
            id: id, orderID: order, state: .closed, reason: "PURCHASE_UNAUTHORIZED", amount: 1_000, currency: "EUR", outcome: "LOST", updatedAt: t0)
        let dispute = DisputeRules.apply(observation, to: nil, orderTracked: true, now: t0).dispute
        return DisputeWrite(dispute: dispute, raw: nil, nextLookAt: nil, expectedRevision: nil, readStartedAt: t0, outcomes: [], events: [])
    }

    @Test("A ledger read's lost disputes: the same on both stores, each order's in dispute id order whatever the order they were recorded in")
    func lostDisputesInOrder() async throws {
        let t0 = self.t0
        let writes = ["d-3", "d-1", "d-2"].map { lost($0, order: "o-1") } + [lost("d-0", order: "o-2")]
        let answers = try await onBoth { store in
            var change = Change()
            change.newOrders = ["o-1", "o-2"].map { Fixtures.order($0, session: nil, reference: nil, policy: .immediate, currency: "EUR") }
            try await store.commit(change, at: t0)
            for write in writes { _ = try await store.record(write, at: t0) }
            let ledger = try await store.ledger(orderIDs: ["o-2", "o-1"], account: .default)
            return ledger.mapValues { $0.lostDisputes.map(\.id) }
        }
        #expect(answers[.sqlite] == answers[.postgres])
        #expect(answers[.sqlite] == ["o-1": ["d-1", "d-2", "d-3"], "o-2": ["d-0"]])
    }
}
