import Foundation
import ReconcilerCore
import Testing
import TestSupport

@Suite("Dispute rules: what a read changes, and the deadline warnings")
struct DisputeRulesTests {
    let t0 = Fixtures.t0
    let leads: [Duration] = [.seconds(72 * 3_600), .seconds(24 * 3_600)]

    func read(_ state: DisputeState = .initiated, due: Date? = nil, updated: TimeInterval = 0, outcome: String? = nil) -> DisputeObservation {
        DisputeObservation(
            id: "d-1", orderID: "o-1", state: state, reason: "PURCHASE_UNAUTHORIZED", amount: 4_000, currency: "EUR",
            responseDueAt: state == .initiated ? (due ?? t0.addingTimeInterval(7 * 86_400)) : nil,
            appealDueAt: state == .preArbitration ? due : nil, outcome: outcome, updatedAt: t0.addingTimeInterval(updated))
    }

    @Test("A first read opens it; a later state is a change; a stale read changes nothing; closing says won or lost")
    func changes() {
        let opened = DisputeRules.apply(read(), to: nil, orderTracked: true, now: t0)
        #expect(opened.change == .opened && opened.dispute.deadline == t0.addingTimeInterval(7 * 86_400) && !opened.dispute.orphan)
        let moved = DisputeRules.apply(read(.representment, updated: 10), to: opened.dispute, orderTracked: true, now: t0)
        #expect(moved.change == .stateChanged(from: .initiated) && moved.dispute.deadline == nil)
        let stale = DisputeRules.apply(read(.initiated, updated: 5), to: moved.dispute, orderTracked: true, now: t0)
        #expect(stale.change == nil && stale.dispute == moved.dispute)
        let lost = DisputeRules.apply(read(.closed, updated: 20, outcome: "lost"), to: moved.dispute, orderTracked: true, now: t0)
        #expect(lost.change == .lost && lost.dispute.outcome == "LOST" && !lost.dispute.isOpen)
        #expect(DisputeRules.apply(read(), to: nil, orderTracked: false, now: t0).dispute.orphan)
    }

    @Test("Warnings at each lead time once; a dispute first seen late warns once; an extension moves them")
    func warnings() {
        var dispute = DisputeRules.apply(read(), to: nil, orderTracked: true, now: t0).dispute
        let due = t0.addingTimeInterval(7 * 86_400)
        #expect(DisputeRules.warning(dispute, leads: leads, now: t0).lead == nil)
        #expect(DisputeRules.nextWarning(dispute, leads: leads) == due.addingTimeInterval(-72 * 3_600))
        var (warned, lead) = DisputeRules.warning(dispute, leads: leads, now: due.addingTimeInterval(-72 * 3_600))
        #expect(lead == .seconds(72 * 3_600))
        #expect(DisputeRules.warning(warned, leads: leads, now: due.addingTimeInterval(-71 * 3_600)).lead == nil, "never twice")
        (warned, lead) = DisputeRules.warning(warned, leads: leads, now: due.addingTimeInterval(-24 * 3_600))
        #expect(lead == .seconds(24 * 3_600) && DisputeRules.nextWarning(warned, leads: leads) == nil)

        // Seen 10 hours before its deadline: one warning, the nearest lead's.
        dispute.warnedLeads = []
        let late = DisputeRules.warning(dispute, leads: leads, now: due.addingTimeInterval(-10 * 3_600))
        #expect(late.lead == .seconds(24 * 3_600) && DisputeRules.warning(late.0, leads: leads, now: due.addingTimeInterval(-9 * 3_600)).lead == nil)

        // Klarna extends it: the warnings come again for the new deadline.
        let extended = DisputeRules.apply(read(due: due.addingTimeInterval(3 * 86_400), updated: 30), to: warned, orderTracked: true, now: t0)
        #expect(extended.change == .deadlineMoved(from: due) && extended.dispute.warnedLeads.isEmpty)
        #expect(DisputeRules.nextWarning(extended.dispute, leads: leads) == due.addingTimeInterval(3 * 86_400 - 72 * 3_600))
    }
}
