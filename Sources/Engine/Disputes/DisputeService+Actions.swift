import Foundation
import KlarnaAPI
import Logging
import ReconcilerCore
import ReconcilerStore

/// The operators' actions on disputes, exactly once: every attempt starts with a read of the dispute, which is
/// applied like any read and decides (``DisputeActionRules``) whether to send; the action is marked sent before the
/// call, by a write conditional on the revision read, so of two daemons only one sends; an unclear answer is resolved
/// by the next read, after the longest a call lasts.
extension DisputeService {
    /// How often an action on a held payment looks whether it was released.
    static let heldRecheck: Duration = .seconds(30)

    /// Moves `action` on by one decision; returns the outcomes recorded.
    func drive(_ action: DisputeAction) async throws -> Int {
        let started = clock.now
        let read: PaymentDispute
        switch try await self.read(action.disputeID, .inMotion) {
        case .read(let found):
            read = found
        case .refused(let why):
            let sent =
                action.attempts > 0
                ? "after \(action.attempts) attempt(s) whose last answer was not clear: whether Klarna took it is unknown" : "nothing sent"
            return try await finish(
                action, .refuse("Klarna will not show dispute \(action.disputeID) (\(why)): \(sent)"),
                dispute: try await store.dispute(action.disputeID))
        case .later(let until):
            var waiting = action
            waiting.nextAt = until
            _ = try await store.update(DisputeActionWrite(action: waiting, expectedRevision: action.revision), at: clock.now)
            return 0
        }
        var outcomes = try await apply(read, readStartedAt: started)
        let observation = DisputeObservation(read)
        let now = clock.now
        let settings = self.settings
        switch DisputeActionRules.next(
            action, read: observation, maxAttempts: settings.retry.maxAttempts, longestCall: settings.longestCall, now: now)
        {
        case .send:
            if let orderID = action.orderID ?? observation.orderID, try await store.isHeld(order: orderID) {
                // An operator holds the payment: no answer goes to Klarna until it is released.
                var waiting = action
                waiting.nextAt = now.addingTimeInterval(Self.heldRecheck.timeInterval)
                waiting.note = "order \(orderID) is held: sent once it is released"
                _ = try await store.update(DisputeActionWrite(action: waiting, expectedRevision: action.revision), at: now)
                return outcomes
            }
            outcomes += try await send(action)
        case .wait(let until):
            var waiting = action
            waiting.nextAt = until
            _ = try await store.update(DisputeActionWrite(action: waiting, expectedRevision: action.revision), at: now)
        case let step:
            outcomes += try await finish(action, step, dispute: try await store.dispute(action.disputeID))
        }
        return outcomes
    }

    /// Marks the action sent (unless another daemon moved it), makes the call, and records how it ended. The rate
    /// token is spent before the mark, so the longest a call lasts counts from the call's start: after it, a daemon
    /// that finds the action `sent` may read and decide again.
    private func send(_ action: DisputeAction) async throws -> Int {
        try await rateLimiter?.spend(.inMotion)
        guard var sent = try await markSent(action) else { return 0 }
        let result: DisputeCallResult
        switch action.kind {
        case .acceptLoss:
            result = await call { try await client.acceptDisputeLoss(id: action.disputeID) }
        case .appeal:
            let text = action.information ?? ""
            result = await call { try await client.appealDispute(id: action.disputeID, additionalInformation: text) }
        case .evidence:
            guard var evidence = sent.evidence else { return try await finish(sent, .refuse("the action has no evidence file"), dispute: nil) }
            if evidence.attachmentID == nil {
                let upload = evidence
                var attachment: String?
                let uploaded = await call {
                    attachment = try await client.addDisputeAttachment(
                        id: action.disputeID, fileName: upload.fileName, contentType: upload.contentType, file: upload.file)
                }
                guard uploaded == .taken, let attachment else { return try await ended(sent, uploaded) }
                evidence.attachmentID = attachment
                sent.evidence = evidence
            }
            // The submission is a second call: marked sent again (with the attachment), so its own longest call counts.
            try await rateLimiter?.spend(.inMotion)
            guard let marked = try await markSent(sent, again: true) else { return 0 }
            sent = marked
            let chosen = evidence
            result = await call {
                try await client.representDispute(
                    id: action.disputeID, attachmentID: chosen.attachmentID ?? "", description: chosen.description,
                    additionalInformation: chosen.additionalInformation)
            }
        }
        return try await ended(sent, result)
    }

    /// `action` marked sent now, written over the revision read; nil when another daemon moved it meanwhile (it
    /// sends, or has). `again`: the second call of one attempt (the evidence's submission), not a new attempt.
    private func markSent(_ action: DisputeAction, again: Bool = false) async throws -> DisputeAction? {
        var sent = action
        let now = clock.now
        sent.state = .sent
        if !again { sent.attempts += 1 }
        sent.sentAt = now
        sent.conflict = false
        // If this daemon dies in the call, the next look comes once the call can no longer take effect.
        sent.nextAt = now.addingTimeInterval(settings.longestCall.timeInterval)
        guard try await store.update(DisputeActionWrite(action: sent, expectedRevision: action.revision), at: now) else {
            logger.info("\(action.kind.word) of dispute \(action.disputeID) was taken by another daemon", metadata: metadata(action))
            return nil
        }
        sent.revision = action.revision + 1
        logger.notice(
            "sending \(action.kind.word) of dispute \(action.disputeID) (attempt \(sent.attempts), asked by \(action.requestedBy))",
            metadata: metadata(action).merging([MessageID.metadataKey: .string(MessageID.sideEffectSent.rawValue)]) { $1 })
        return sent
    }

    /// Records how the call for `sent` ended.
    private func ended(_ sent: DisputeAction, _ result: DisputeCallResult) async throws -> Int {
        let ended = DisputeActionRules.afterCall(sent, result: result, retry: settings.retry, random: random, now: clock.now)
        switch result {
        case .taken:
            let note = "Klarna took the \(sent.kind.word) of dispute \(sent.disputeID) (asked by \(sent.requestedBy))"
            let write = DisputeActionWrite(action: ended, expectedRevision: sent.revision, event: DomainEvent(.operatorAction, note))
            guard try await store.update(write, at: clock.now) else { return 0 }
            logger.notice("\(note)", metadata: metadata(sent).merging([MessageID.metadataKey: .string(MessageID.operatorAction.rawValue)]) { $1 })
            // The dispute as it stands now: its change (closed, REPRESENTMENT, ARBITRATION) is recorded with its outcome.
            let started = clock.now
            return try await apply(try await klarna(.inMotion) { try await client.readDispute(id: sent.disputeID) }, readStartedAt: started)
        case .refused:
            return try await finish(sent, .refuse(ended.note ?? "refused"), dispute: try await store.dispute(sent.disputeID))
        case .conflict, .unclear:
            logger.warning(
                "\(sent.kind.word) of dispute \(sent.disputeID): \(ended.note ?? "no clear answer"); the dispute is read before anything else",
                metadata: metadata(sent).merging([MessageID.metadataKey: .string(MessageID.sideEffectUnclear.rawValue)]) { $1 })
            _ = try await store.update(DisputeActionWrite(action: ended, expectedRevision: sent.revision), at: clock.now)
            return 0
        }
    }

    /// One call for an action (its rate token spent already), and how it ended; a 429 pauses every caller.
    private func call(_ body: () async throws -> Void) async -> DisputeCallResult {
        do {
            try await rateLimiter.heeding(body)
            return .taken
        } catch let error as KlarnaAPIError {
            let message = Reconciler.short(error)
            if error.answer == .conflict { return .conflict(message) }
            // Klarna's other 4xx on the call itself (a file it refuses, a 403 for this action): sending again gets the same.
            if error.answer.refusesTheAction, let status = error.status { return .refused(status: status, message) }
            return .unclear(message, retryAfter: error.rateLimit.hint)
        } catch {
            return .unclear("\(error)", retryAfter: nil)
        }
    }

    /// Ends `action` as `step` says, with its outcome when it did not happen.
    private func finish(_ action: DisputeAction, _ step: DisputeActionStep, dispute: TrackedDispute?) async throws -> Int {
        var ended = action
        ended.nextAt = nil
        let outcome: Outcome?
        let event: DomainEvent
        switch step {
        case .done(let note):
            ended.state = .done
            ended.note = note
            outcome = nil
            event = DomainEvent(.operatorAction, "\(action.kind.word) of dispute \(action.disputeID): \(note)")
        case .refuse(let reason), .fail(let reason):
            ended.state = step == .refuse(reason) ? .refused : .failed
            ended.note = reason
            outcome = Outcome(action, failed: reason, dispute: dispute)
            event = DomainEvent(.operatorRefused, "\(action.kind.word) of dispute \(action.disputeID) \(ended.state.rawValue): \(reason)")
        case .send, .wait:
            return 0
        }
        guard
            try await store.update(
                DisputeActionWrite(action: ended, expectedRevision: action.revision, outcome: outcome, event: event), at: clock.now)
        else { return 0 }
        logger.log(
            level: outcome == nil ? .notice : .warning, "\(event.message)",
            metadata: metadata(action).merging([MessageID.metadataKey: .string(MessageID.operatorAction.rawValue)]) { $1 })
        announce(outcome.map { [$0] } ?? [])
        return outcome == nil ? 0 : 1
    }

    private func metadata(_ action: DisputeAction) -> Logger.Metadata {
        var metadata: Logger.Metadata = ["dispute_id": .string(action.disputeID), "dispute_action": .string(action.kind.rawValue)]
        if let orderID = action.orderID { metadata["order_id"] = .string(orderID) }
        return metadata
    }
}
