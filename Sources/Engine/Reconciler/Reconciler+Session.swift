import Foundation
import KlarnaAPI
import ReconcilerCore
import ReconcilerStore

/// HPP sessions: polling until the status is final, then moving an authorized session on to its intents.
extension Reconciler {
    func processSession(_ id: String, hinted: Bool) async throws -> WorkResult {
        guard let session = try await store.session(id), session.isOpen else { return WorkResult(next: nil) }
        return try await LogContext.about(session) { try await processSession(session, hinted: hinted) }
    }

    private func processSession(_ loaded: TrackedSession, hinted: Bool) async throws -> WorkResult {
        var session = loaded
        let id = session.hppSessionID
        if hinted, session.phase == .polling { session = session.hinted(now: clock.now) }
        // A session can take several steps in one turn: COMPLETED, then straight on to placing the order.
        for _ in 0..<4 {
            if let due = session.nextDueAt, !isDue(due) { return WorkResult(next: due) }
            switch session.phase {
            case .polling:
                let (next, handOff) = try await poll(session)
                if let handOff { return WorkResult(next: nil, wake: [.order(handOff)]) }
                guard let next, next.phase == .authorized else { return WorkResult(next: next?.isOpen == true ? next?.nextDueAt : nil) }
                session = next
            case .authorized:
                let result = try await advanceAuthorized(session)
                guard result.wake.isEmpty, let next = try await store.session(id), next.isOpen, next.nextDueAt.map(isDue) == true else {
                    return result
                }
                session = next
            case .ordered, .closed:
                return WorkResult(next: nil)
            }
        }
        return WorkResult(next: session.nextDueAt)
    }

    /// Reads the HPP session once and commits what it says. Returns the new session, or the order it handed off to.
    private func poll(_ session: TrackedSession) async throws -> (TrackedSession?, String?) {
        let now = clock.now
        var change = Change()
        let step: SessionStep
        var detail: [String: String] = [:]
        switch try await klarna(&change, { try await client.readHPPSession(id: session.hppSessionID) }) {
        case .success(let hpp):
            step = session.applying(
                .session(status: hpp.status.rawValue, updatedAt: hpp.updatedAt, expiresAt: hpp.expiresAt,
                         authorizationToken: hpp.authorizationToken, orderID: hpp.orderID, klarnaReference: hpp.klarnaReference),
                now: now, schedule: settings.polling)
        case .failure(let error) where error.status == 404:
            step = session.applying(.notFound, now: now, schedule: settings.polling)
            detail = Self.detail(error)
        case .failure(let error):
            step = session.readFailed(Self.short(error), now: now, retryAfter: readDelay(failures: session.consecutiveFailures + 1, error), schedule: settings.polling)
            detail = Self.detail(error)
        }
        record(step, into: &change, detail: detail)
        if let handOff = step.handOff { change.newOrders.append(step.session.order(for: handOff, createdAt: now)) }
        try await commit(change, now: now)
        return (step.session, step.handOff?.orderID)
    }

    private func advanceAuthorized(_ session: TrackedSession) async throws -> WorkResult {
        if session.purpose.createsCustomerToken, session.customerTokenID == nil {
            return try await driveSessionIntent(.customerToken, session)
        }
        if session.purpose.placesOrder, session.orderID == nil {
            return try await driveSessionIntent(.placeOrder, session)
        }
        // Tokenize only, and the token exists.
        var change = Change()
        record(session.tokenizeFinished(), into: &change)
        try await commit(change, now: clock.now)
        return WorkResult(next: nil)
    }
}
