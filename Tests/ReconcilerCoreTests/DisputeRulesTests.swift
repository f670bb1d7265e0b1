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

@Suite("Dispute actions: decided from a read before every attempt")
struct DisputeActionRulesTests {
    let t0 = Fixtures.t0

    func action(
        _ kind: DisputeAction.Kind, state: DisputeAction.State = .requested, attempts: Int = 0, sentAt: Date? = nil, conflict: Bool = false
    )
        -> DisputeAction
    {
        var action = DisputeAction(disputeID: "d-1", orderID: "o-1", kind: kind, requestedAt: t0, requestedBy: "test")
        action.state = state
        action.attempts = attempts
        action.sentAt = sentAt
        action.conflict = conflict
        return action
    }

    func read(_ state: DisputeState, outcome: String? = nil, previous: DisputeState? = nil, evidence: [String] = []) -> DisputeObservation {
        DisputeObservation(id: "d-1", orderID: "o-1", state: state, previousState: previous, outcome: outcome, evidenceAttachmentIDs: evidence)
    }

    func next(_ action: DisputeAction, _ read: DisputeObservation, now: TimeInterval = 0) -> DisputeActionStep {
        DisputeActionRules.next(action, read: read, maxAttempts: 3, longestCall: .seconds(31), now: t0.addingTimeInterval(now))
    }

    @Test("Sent only where the state takes it; done from the read alone once its effect shows; refused otherwise, without a call")
    func decisions() {
        #expect(next(action(.acceptLoss), read(.initiated)) == .send)
        #expect(next(action(.acceptLoss), read(.preArbitration)) == .send)
        if case .refuse(let why) = next(action(.acceptLoss), read(.representment)) {
            #expect(why.contains("INITIATED or PRE_ARBITRATION") && why.contains("REPRESENTMENT"))
        } else {
            Issue.record("accept-loss in REPRESENTMENT must be refused")
        }
        guard case .done = next(action(.acceptLoss), read(.closed, outcome: "lost")) else { Issue.record("a loss shows it done"); return }
        guard case .refuse = next(action(.acceptLoss), read(.closed, outcome: "WON")) else { Issue.record("a won dispute takes no loss"); return }
        guard case .refuse = next(action(.evidence), read(.preArbitration)) else { Issue.record("evidence only in INITIATED"); return }
        #expect(next(action(.appeal), read(.preArbitration)) == .send)
    }

    @Test(
        "An attempt without a clear answer: nothing until the longest call has passed, then the read decides; out of attempts, failed; Klarna's 409 never sent again"
    )
    func unclear() {
        let sent = action(.acceptLoss, state: .sent, attempts: 1, sentAt: t0)
        #expect(next(sent, read(.initiated), now: 10) == .wait(until: t0.addingTimeInterval(31)))
        #expect(next(sent, read(.initiated), now: 31) == .send)
        guard case .done = next(sent, read(.closed, outcome: "LOST"), now: 31) else { Issue.record("the lost answer's effect shows"); return }
        guard case .fail = next(action(.acceptLoss, state: .sent, attempts: 3, sentAt: t0), read(.initiated), now: 40) else {
            Issue.record("out of attempts"); return
        }
        guard case .refuse(let why) = next(action(.acceptLoss, state: .sent, attempts: 1, sentAt: t0, conflict: true), read(.initiated), now: 40)
        else { Issue.record("a 409 is never retried"); return }
        #expect(why.contains("409"))
    }

    @Test("Appeal done in ARBITRATION or closed from it, never after a 409; evidence done when Klarna shows its attachment")
    func reached() {
        guard
            case .done = next(action(.appeal, state: .sent, attempts: 1, sentAt: t0), read(.closed, outcome: "WON", previous: .arbitration), now: 40)
        else { Issue.record("closed from ARBITRATION after the appeal"); return }
        guard
            case .refuse = next(
                action(.appeal, state: .sent, attempts: 1, sentAt: t0), read(.closed, outcome: "LOST", previous: .preArbitration), now: 40)
        else { Issue.record("the window closed before the appeal"); return }
        guard case .refuse = next(action(.appeal, state: .sent, attempts: 1, sentAt: t0, conflict: true), read(.arbitration), now: 40)
        else { Issue.record("after a 409 the appeal is not ours"); return }
        var evidence = action(.evidence, state: .sent, attempts: 1, sentAt: t0)
        evidence.evidence = DisputeEvidence(
            fileName: "a.pdf", contentType: "application/pdf", file: Data(), description: nil, additionalInformation: nil)
        evidence.evidence?.attachmentID = "att-1"
        guard case .done = next(evidence, read(.representment, evidence: ["att-1"]), now: 40) else { Issue.record("its attachment shows"); return }
        guard case .refuse = next(evidence, read(.representment, evidence: ["att-9"]), now: 40) else {
            Issue.record("another's evidence is not ours"); return
        }
    }

    @Test("Evidence asked for again after Klarna took evidence is done from the read, as accept-loss asked again is; before any, refused")
    func evidenceAskedAgain() {
        guard case .done(let why) = next(action(.evidence), read(.representment, evidence: ["att-1"])) else {
            Issue.record("Klarna holds evidence and the dispute moved on"); return
        }
        #expect(why.contains("the dispute shows it already") && why.contains("REPRESENTMENT"), "\(why)")
        guard case .done = next(action(.acceptLoss), read(.closed, outcome: "LOST")) else { Issue.record("accept-loss again"); return }
        // No evidence there: the state alone does not take it.
        guard case .refuse = next(action(.evidence), read(.representment)) else { Issue.record("nothing shows evidence taken"); return }
        // Still INITIATED: a new request is sent.
        #expect(next(action(.evidence), read(.initiated, evidence: ["att-1"])) == .send)
    }

    @Test("After a call: taken is done; 409 reads at once; another 4xx is refused; unclear waits its backoff")
    func afterCall() {
        let sent = action(.acceptLoss, state: .sent, attempts: 1, sentAt: t0)
        let policy = RetryPolicy(initialDelay: .seconds(1), maxDelay: .seconds(20), maxAttempts: 3)
        let random = SeededRandomSource(seed: 1)
        #expect(DisputeActionRules.afterCall(sent, result: .taken, retry: policy, random: random, now: t0).state == .done)
        let conflict = DisputeActionRules.afterCall(sent, result: .conflict("409"), retry: policy, random: random, now: t0)
        #expect(conflict.conflict && conflict.nextAt == t0 && conflict.state == .sent)
        #expect(DisputeActionRules.afterCall(sent, result: .refused(status: 400, "bad"), retry: policy, random: random, now: t0).state == .refused)
        let unclear = DisputeActionRules.afterCall(sent, result: .unclear("503", retryAfter: nil), retry: policy, random: random, now: t0)
        #expect(unclear.state == .sent && (unclear.nextAt ?? .distantPast) > t0)
    }

    @Test("Evidence is checked before anything is recorded: type by name and by content, size, texts")
    func evidenceLimits() {
        func check(_ name: String, _ bytes: [UInt8], description: String? = nil) -> String? {
            switch DisputeEvidence.checked(fileName: name, file: Data(bytes), description: description, additionalInformation: nil) {
            case .success: nil
            case .failure(let problem): problem.reason
            }
        }
        #expect(check("/tmp/receipt.pdf", Array("%PDF-1.7".utf8)) == nil)
        #expect(check("photo.JPEG", [0xFF, 0xD8, 0xFF, 0xE1]) == nil)
        #expect(check("a.png", [0x89, 0x50, 0x4E, 0x47]) == nil && check("a.docx", [0x50, 0x4B, 0x03, 0x04]) == nil)
        #expect(check("a.exe", [0x4D, 0x5A])?.contains("PDF, JPEG, PNG or DOCX") == true)
        #expect(check("a.pdf", [0x89, 0x50, 0x4E, 0x47])?.contains("does not look like a PDF") == true)
        #expect(check("a.pdf", [])?.contains("empty") == true)
        #expect(check("a.pdf", Array("%PDF".utf8) + [UInt8](repeating: 0, count: DisputeEvidence.maxSize))?.contains("at most") == true)
        #expect(check("a.pdf", Array("%PDF".utf8), description: String(repeating: "x", count: 1_001))?.contains("1000") == true)
        #expect(DisputeAction.validDisputeID("krn:network:eu1:test:payment:dispute:1"))
        #expect(!DisputeAction.validDisputeID(String(repeating: "x", count: 101)) && !DisputeAction.validDisputeID("a b"))
        #expect(DisputeAction.informationProblem("") != nil && DisputeAction.informationProblem("why") == nil)
    }
}
