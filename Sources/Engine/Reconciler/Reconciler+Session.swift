import Foundation
import KlarnaAPI
import ReconcilerCore
import ReconcilerStore

/// HPP sessions: polling until the status is final, then moving an authorized session on to its intents.
extension Reconciler {
    func processSession(_ id: String, hinted: Bool) async throws -> StepResult {
        guard let session = try await store.session(id), session.isOpen else { return StepResult(next: nil) }
        return try await on(session.account) { try await LogContext.about(session) { try await processSession(session, hinted: hinted) } }
    }

    private func processSession(_ loaded: TrackedSession, hinted: Bool) async throws -> StepResult {
        var session = loaded
        let id = session.hppSessionID
        if hinted, session.phase == .polling { session = session.hinted(now: clock.now) }
        var ending: SessionEnding?
        // What a read found, not yet committed: an authorized session goes straight on to its intent, whose first
        // commit records the read too (one fsync fewer before create-order; a crash in between loses only the read).
        var pending = Change()
        // A session can take several steps in one turn: COMPLETED, then straight on to placing the order.
        for _ in 0..<4 {
            if let due = session.nextDueAt, !isDue(due) { return StepResult(next: due, ending: ending) }
            switch session.phase {
            case .polling:
                let urgency = hinted ? .hinted : session.phase.urgency(now: clock.now, deadline: session.expiresAt)
                let (next, handOff, ended, uncommitted) = try await poll(session, urgency)
                ending = ended
                if let handOff { return StepResult(next: nil, wake: [.order(handOff)], ending: ending) }
                guard let next, next.phase == .authorized else {
                    return StepResult(next: next?.isOpen == true ? next?.nextDueAt : nil, ending: ending)
                }
                pending = uncommitted
                session = next
            case .authorized:
                var result = try await advanceAuthorized(session, carrying: pending)
                pending = Change()
                result.ending = ending
                guard result.wake.isEmpty, let next = try await store.session(id), next.isOpen, next.nextDueAt.map(isDue) == true else {
                    return result
                }
                session = next
            case .ordered, .closed:
                return StepResult(next: nil, ending: ending)
            }
        }
        return StepResult(next: session.nextDueAt, ending: ending)
    }

    /// Reads the HPP session once and commits what it says. Returns the new session, or the order it handed off to,
    /// and what the read teaches about how long sessions take. A session that the read authorized and that is due at
    /// once is not committed here: its change is returned for the next step's first commit.
    private func poll(_ session: TrackedSession, _ urgency: Urgency) async throws -> (TrackedSession?, String?, SessionEnding?, uncommitted: Change) {
        let now = clock.now
        var change = Change()
        let step: SessionStep
        var detail: [String: String] = [:]
        switch try await klarna(&change, urgency, { client in try await client.readHPPSession(id: session.hppSessionID) }) {
        case .success(let hpp):
            // A read without a status (the spec requires none) tells no progress: the status seen before stands, and
            // before any a polled session is WAITING. Neither is final, so the session is read again.
            let status = hpp.status ?? session.hppStatus ?? .waiting
            step = session.applying(
                .session(
                    status: status, updatedAt: hpp.updatedAt, expiresAt: hpp.expiresAt,
                    authorizationToken: hpp.authorizationToken, orderID: hpp.orderID, klarnaReference: hpp.klarnaReference),
                now: now, schedule: settings.polling)
        case .failure(let error) where error.answer.endsWhatWasRead:
            step = session.applying(.notFound, now: now, schedule: settings.polling)
            detail = Self.detail(error)
        case .failure(let error):
            step = session.readFailed(
                Self.short(error), now: now, retryAfter: readDelay(failures: session.consecutiveFailures + 1, error), schedule: settings.polling)
            detail = Self.detail(error)
        }
        record(step, into: &change, detail: detail)
        if let handOff = step.handOff { change.newOrders.append(step.session.order(for: handOff, createdAt: now)) }
        let ending = step.ending(from: session, now: now)
        if step.handOff == nil, step.session.phase == .authorized, step.session.nextDueAt.map(isDue) ?? true {
            return (step.session, nil, ending, change)
        }
        try await commit(change, now: now)
        return (step.session, step.handOff?.orderID, ending, Change())
    }

    /// `carrying`: what the read that authorized the session found, committed with this step's first commit.
    private func advanceAuthorized(_ session: TrackedSession, carrying carried: Change) async throws -> StepResult {
        if session.purpose.createsCustomerToken, session.customerTokenID == nil {
            return try await driveSessionIntent(.customerToken, session, carrying: carried)
        }
        if session.purpose.placesOrder, session.orderID == nil {
            return try await driveSessionIntent(.placeOrder, session, carrying: carried)
        }
        // Tokenize only, and the token exists.
        var change = carried
        record(session.tokenizeFinished(), into: &change)
        try await commit(change, now: clock.now)
        return StepResult(next: nil)
    }
}

extension PaymentSession {
    /// Why this KP read cannot be used for the session intent `kind`, or `nil`: the fields that intent's request
    /// requires and the read lacks (the spec's `session_read` requires none). Nothing is sent without them.
    func unusable(for kind: Intent.Kind) -> String? {
        let missing = kind == .placeOrder ? missingOrderFields : missingCustomerTokenFields
        guard !missing.isEmpty else { return nil }
        let what = kind == .placeOrder ? "placing the order" : "creating the customer token"
        return "Klarna's read of the KP session lacks \(missing.joined(separator: ", ")), which \(what) requires: nothing was sent"
    }
}
