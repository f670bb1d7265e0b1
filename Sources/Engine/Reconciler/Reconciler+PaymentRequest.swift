import Foundation
import KlarnaAPI
import ReconcilerCore
import ReconcilerStore

/// Klarna Network payment requests: read until final, then record the outcome.
extension Reconciler {
    func processPaymentRequest(_ id: String, hinted: Bool) async throws -> StepResult {
        guard let request = try await store.paymentRequest(id), request.isOpen else { return StepResult(next: nil) }
        return try await on(request.account) { try await processPaymentRequest(request, hinted: hinted) }
    }

    private func processPaymentRequest(_ loaded: TrackedPaymentRequest, hinted: Bool) async throws -> StepResult {
        var request = loaded
        let id = request.paymentRequestID
        if hinted { request = request.hinted(now: clock.now) }
        if let due = request.nextDueAt, !isDue(due) { return StepResult(next: due) }
        var change = Change()
        let result = try await klarna(&change, hinted ? .hinted : .routine, { client in try await client.readPaymentRequest(id: id) })
        let now = clock.now
        let step: TrackedPaymentRequest.Step
        switch result {
        case .success(let read):
            step = request.applying(
                state: read.state, expiresAt: read.expiresAt, sessionToken: read.klarnaNetworkSessionToken, now: now,
                recheck: settings.polling.maxInterval)
        case .failure(let error) where error.answer.endsWhatWasRead:
            // Klarna deletes payment requests when they expire.
            step = request.applying(state: .expired, expiresAt: nil, sessionToken: nil, now: now, recheck: settings.polling.maxInterval)
        case .failure(let error):
            step = request.readFailed(
                Self.short(error), now: now, retryAfter: readDelay(failures: request.consecutiveFailures + 1, error),
                grace: settings.polling.expiryGrace)
        }
        change.paymentRequests = [step.request]
        if let outcome = step.outcome { change.outcomes = [outcome] }
        for event in step.events {
            EventLog.log(event, metadata: ["payment_request_id": .string(id)], logger: logger)
        }
        try await commit(change, now: now)
        return StepResult(next: step.request.isOpen ? step.request.nextDueAt : nil)
    }
}
