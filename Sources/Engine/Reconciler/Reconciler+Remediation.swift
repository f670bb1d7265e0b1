import Foundation
import ReconcilerCore
import ReconcilerStore

/// Operator requests (hold, release, retry, cancel, release-remaining): applied at the start of the key's step, in
/// the one task that owns the key, so a request never races the step it changes. The core's rules decide whether
/// each still applies; every answer is recorded on the timeline and in the journal with who asked.
extension Reconciler {
    /// Applies `controls.pending` oldest first, each in its own commit. Returns whether the key is held afterwards
    /// and which other keys now have work (an order recorded by `retry --order-id`).
    func applyOperatorRequests(_ key: WorkKey, _ controls: OperatorControls) async throws -> (held: Bool, wake: [WorkKey]) {
        var held = controls.held
        var wake: [WorkKey] = []
        for request in controls.pending {
            let now = clock.now
            var change = Change()
            let owner = try await owners(key)
            let answer = try await apply(request, owner: owner, held: &held, wake: &wake, into: &change, now: now)
            let by = ["operator_request": "\(request.id)", "requested_by": request.requestedBy]
            switch answer {
            case .success(let note):
                change.answeredRequests.append((request.id, .done, note))
            case .failure(let refusal):
                change.answeredRequests.append((request.id, .refused, refusal.reason))
                change.events.append(
                    NewEvent(
                        hppSessionID: owner.session, orderID: owner.order,
                        DomainEvent(
                            .operatorRefused, "\(request.action.word) requested by \(request.requestedBy) refused: \(refusal.reason)"), detail: by))
            }
            // The applied request's own event carries who asked too.
            for index in change.events.indices where change.events[index].event.kind == .operatorAction {
                change.events[index].detail.merge(by) { $1 }
            }
            try await commit(change, now: now)
        }
        return (held, wake)
    }

    /// `owner`: the ids the key's events are filed under.
    private func apply(
        _ request: OperatorRequest, owner: (session: String?, order: String?), held: inout Bool, wake: inout [WorkKey], into change: inout Change,
        now: Date
    ) async throws -> Result<String, RemediationRefusal> {
        let who = request.requestedBy
        func note(_ message: String) {
            change.events.append(NewEvent(hppSessionID: owner.session, orderID: owner.order, DomainEvent(.operatorAction, message)))
        }
        switch request.action {
        case .hold:
            if held { return .failure(RemediationRefusal("already held")) }
            guard try await isOpen(request.key) else { return .failure(RemediationRefusal("nothing to hold: it ended meanwhile")) }
            change.holds.append((request.key, who))
            note("held by \(who): no Klarna call until it is released")
            held = true
            return .success("held")
        case .release:
            guard held else { return .failure(RemediationRefusal("not held")) }
            change.releases.append(request.key)
            // A side effect that was waiting for its next attempt is not sent as it was: someone may have acted at
            // Klarna while the payment was held, so the order is read before anything else.
            if case .order(let id) = request.key, let key = try await store.order(id)?.activeIntent, let intent = try await store.intent(key),
                intent.state == .intended
            {
                change.intents.append(intent.ambiguous("released by \(who): read Klarna before sending again", now: now))
            }
            note("released by \(who): work goes on, reading Klarna first")
            held = false
            return .success("released")
        case .retry, .cancel, .releaseRemaining:
            if held { return .failure(RemediationRefusal("the payment is held: release it first")) }
        }
        switch (request.action, request.key) {
        case (.retry, .session(let id)):
            guard let session = try await store.session(id) else {
                return .failure(.notTracked("HPP session \(id) is not tracked"))
            }
            if let refusal = session.retryRefusal(orderID: request.orderID, now: now) { return .failure(refusal) }
            if let orderID = request.orderID, let known = try await store.order(orderID) {
                return .failure(
                    RemediationRefusal("order \(orderID) is tracked already (HPP session \(known.hppSessionID ?? "none")): not a lost one"))
            }
            let (step, intent) = session.retried(intents: try await store.intents(subject: id), orderID: request.orderID, by: who, now: now)
            record(step, into: &change)
            if let intent { change.intents.append(intent) }
            if let handOff = step.handOff {
                var order = step.session.order(for: handOff, createdAt: now)
                order.namedByOperator = true
                change.newOrders.append(order)
                wake.append(.order(handOff.orderID))
                return .success("order \(handOff.orderID) recorded; following it")
            }
            return .success("re-driven: reading Klarna first")
        case (.retry, .order(let id)):
            guard let order = try await store.order(id) else { return .failure(.notTracked("order \(id) is not tracked")) }
            if let refusal = order.retryRefusal { return .failure(refusal) }
            let intents = try await store.intents(subject: id)
            let (step, intent) = order.retried(intents: intents, by: who, now: now)
            record(step, into: &change)
            if let intent { change.intents.append(intent) }
            return .success("re-driven: reading the order first")
        case (.cancel, .order(let id)), (.releaseRemaining, .order(let id)):
            guard let order = try await store.order(id) else { return .failure(.notTracked("order \(id) is not tracked")) }
            if let refusal = request.action == .cancel ? order.cancelRefusal : order.releaseRemainingRefusal { return .failure(refusal) }
            let kind: Intent.Kind = request.action == .cancel ? .cancelOrder : .releaseRemaining
            let key = IdempotencyKey.make(kind, id)
            var intent = Intent(key: key, kind: kind, subject: id, now: now)
            if let existing = try await store.intent(key) {
                // Asked before: if that attempt ended without the effect, take it up again after a read (same key).
                guard existing.state == .failed || existing.state == .ambiguous else {
                    return .failure(
                        RemediationRefusal("\(request.action.word) of order \(id) was asked for before and is \(existing.state.rawValue)"))
                }
                intent = existing.ambiguous("asked again by \(who)", now: now)
            }
            record(order.operatorIntent(request.action, key: key, by: who, now: now), into: &change)
            change.intents.append(intent)
            return .success("\(request.action.word) started (intent \(key))")
        default:
            return .failure(RemediationRefusal("\(request.action.word) does not apply to \(request.key)"))
        }
    }

    private func isOpen(_ key: WorkKey) async throws -> Bool {
        switch key {
        case .session(let id): try await store.session(id)?.isOpen ?? false
        case .order(let id):
            if try await store.order(id)?.isOpen ?? false { true } else { try await pendingRefund(of: id) != nil }
        case .paymentRequest, .customerToken: false
        }
    }

    /// The ids a key's events are filed under.
    private func owners(_ key: WorkKey) async throws -> (session: String?, order: String?) {
        switch key {
        case .session(let id): (id, nil)
        case .order(let id): (try await store.order(id)?.hppSessionID, id)
        case .paymentRequest, .customerToken: (nil, nil)
        }
    }
}
