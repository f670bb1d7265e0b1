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
    /// Moves `action` on by one decision; returns the outcomes recorded.
    func drive(_ action: DisputeAction) async throws -> Int {
        let read: PaymentDispute
        do {
            read = try await klarna(.inMotion) { try await client.readDispute(id: action.disputeID) }
        } catch let error as KlarnaAPIError where error.status == 404 {
            return try await finish(action, .refuse("Klarna does not know dispute \(action.disputeID) (404)"), dispute: nil)
        }
        var outcomes = try await apply(read)
        let observation = DisputeObservation(read)
        let now = clock.now
        let settings = self.settings
        switch DisputeActionRules.next(
            action, read: observation, maxAttempts: settings.retry.maxAttempts, longestCall: settings.longestCall, now: now)
        {
        case .send:
            outcomes += try await send(action, read: observation, now: now)
        case .wait(let until):
            var waiting = action
            waiting.nextAt = until
            _ = try await store.update(DisputeActionWrite(action: waiting, expectedRevision: action.revision), at: now)
        case let step:
            outcomes += try await finish(action, step, dispute: try await store.dispute(action.disputeID))
        }
        return outcomes
    }

    /// Marks the action sent (unless another daemon moved it), makes the call, and records how it ended.
    private func send(_ action: DisputeAction, read: DisputeObservation, now: Date) async throws -> Int {
        var sent = action
        sent.state = .sent
        sent.attempts += 1
        sent.sentAt = now
        sent.conflict = false
        // If this daemon dies in the call, the next look comes once the call can no longer take effect.
        sent.nextAt = now.addingTimeInterval(settings.longestCall.timeInterval)
        guard try await store.update(DisputeActionWrite(action: sent, expectedRevision: action.revision), at: now) else {
            logger.info("\(action.kind.word) of dispute \(action.disputeID) was taken by another daemon", metadata: metadata(action))
            return 0
        }
        sent.revision = action.revision + 1
        logger.notice(
            "sending \(action.kind.word) of dispute \(action.disputeID) (attempt \(sent.attempts), asked by \(action.requestedBy))",
            metadata: metadata(action).merging([MessageID.metadataKey: .string(MessageID.sideEffectSent.rawValue)]) { $1 })
        let result = await call(&sent)
        let ended = DisputeActionRules.afterCall(sent, result: result, retry: settings.retry, random: random, now: clock.now)
        switch result {
        case .taken:
            let note = "Klarna took the \(action.kind.word) of dispute \(action.disputeID) (asked by \(action.requestedBy))"
            guard
                try await store.update(
                    DisputeActionWrite(action: ended, expectedRevision: sent.revision, event: DomainEvent(.operatorAction, note)), at: clock.now)
            else { return 0 }
            logger.notice("\(note)", metadata: metadata(action).merging([MessageID.metadataKey: .string(MessageID.operatorAction.rawValue)]) { $1 })
            // The dispute as it stands now: its change (closed, REPRESENTMENT, ARBITRATION) is recorded with its outcome.
            return try await apply(try await klarna(.inMotion) { try await client.readDispute(id: action.disputeID) })
        case .refused:
            return try await finish(sent, .refuse(ended.note ?? "refused"), dispute: try await store.dispute(action.disputeID))
        case .conflict, .unclear:
            logger.warning(
                "\(action.kind.word) of dispute \(action.disputeID): \(ended.note ?? "no clear answer"); the dispute is read before anything else",
                metadata: metadata(action).merging([MessageID.metadataKey: .string(MessageID.sideEffectUnclear.rawValue)]) { $1 })
            _ = try await store.update(DisputeActionWrite(action: ended, expectedRevision: sent.revision), at: clock.now)
            return 0
        }
    }

    /// The call for `action`, and how it ended. Evidence is two calls: the upload's attachment id is kept on the action
    /// (written at once), so a retry after a lost represent does not upload again.
    private func call(_ action: inout DisputeAction) async -> DisputeCallResult {
        do {
            switch action.kind {
            case .acceptLoss:
                try await klarna(.inMotion) { try await client.acceptDisputeLoss(id: action.disputeID) }
            case .appeal:
                let text = action.information ?? ""
                let id = action.disputeID
                try await klarna(.inMotion) { try await client.appealDispute(id: id, additionalInformation: text) }
            case .evidence:
                guard var evidence = action.evidence else { return .refused(status: 400, "the action has no evidence file") }
                if evidence.attachmentID == nil {
                    let upload = evidence
                    let id = action.disputeID
                    let attachment = try await klarna(.inMotion) {
                        try await client.addDisputeAttachment(id: id, fileName: upload.fileName, contentType: upload.contentType, file: upload.file)
                    }
                    evidence.attachmentID = attachment
                    var uploaded = action
                    uploaded.evidence = evidence
                    if try await store.update(DisputeActionWrite(action: uploaded, expectedRevision: action.revision), at: clock.now) {
                        uploaded.revision = action.revision + 1
                    }
                    action = uploaded
                }
                let chosen = evidence
                let id = action.disputeID
                try await klarna(.inMotion) {
                    try await client.representDispute(
                        id: id, attachmentID: chosen.attachmentID ?? "", description: chosen.description,
                        additionalInformation: chosen.additionalInformation)
                }
            }
            return .taken
        } catch let error as KlarnaAPIError {
            let message = Reconciler.short(error)
            switch error.status {
            case 409?: return .conflict(message)
            case let status? where (400..<500).contains(status) && status != 429 && status != 408: return .refused(status: status, message)
            default: return .unclear(message, retryAfter: error.rateLimit.hint)
            }
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
