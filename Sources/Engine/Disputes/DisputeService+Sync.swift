import Foundation
import KlarnaAPI
import Logging
import ReconcilerCore
import ReconcilerStore

/// What one dispute sync did.
public struct DisputeSyncReport: Sendable, Equatable {
    /// Disputes the list returned, the hints read, and the disputes read at their warning times or deadlines.
    public var listed = 0
    public var hinted = 0
    public var looked = 0
    /// Outcomes this daemon recorded (changes and warnings).
    public var outcomes = 0
    /// Operators' actions this sync moved on.
    public var actions = 0

    public init() {}
}

extension DisputeService {
    /// Disputes read per step of each kind.
    static let batch = 100
    /// How often a write that met another daemon's is decided again from a fresh read before the sync fails.
    static let writeAttempts = 3

    /// One sync: the disputes webhooks named, the operators' actions that are due, and the disputes whose warning or
    /// deadline has come; then, with `list`, every dispute updated since a day before the last complete list began
    /// (the payment work's reads come before a list's in the rate budget, so what is urgent goes first). One dispute
    /// cannot hold up the others: one Klarna does not know or refuses (404, 400) is dropped from the hints, looked at
    /// again after a list's interval, or its action refused; one whose read fails otherwise (5xx, a timeout, an
    /// answer that cannot be read) is left alone for a growing while (``DisputeBackoff``). What concerns the account
    /// (401, 403, 429), a failed list and the store fail the sync, which is tried again with backoff; what was
    /// recorded before stays.
    @discardableResult
    public func sync(list: Bool = true) async throws -> DisputeSyncReport {
        var report = DisputeSyncReport()
        var forget: [String] = []
        for id in try await store.disputeHints(account: account, limit: Self.batch) where backoff.allows(id, at: clock.now) {
            report.hinted += 1
            let started = clock.now
            switch try await read(id, .hinted) {
            case .read(let read):
                report.outcomes += try await apply(read, readStartedAt: started)
                // Klarna answered for another id (a KRN spelled otherwise): the hint is answered all the same.
                if read.paymentDisputeID != id { forget.append(id) }
            case .refused(let why):
                logger.warning(
                    "dispute \(id) named by a webhook cannot be read (\(why)): its hint is dropped; the list finds it if Klarna has it",
                    metadata: ["dispute_id": .string(id)])
                forget.append(id)
            case .later:
                continue
            }
        }
        if !forget.isEmpty { try await store.forgetDisputeHints(forget) }
        for action in try await store.dueDisputeActions(account: account, at: clock.now, limit: Self.batch) {
            report.actions += 1
            report.outcomes += try await drive(action)
        }
        for dispute in try await store.disputesToLook(account: account, at: clock.now, limit: Self.batch) {
            report.looked += 1
            report.outcomes += try await look(at: dispute)
        }
        if list {
            let health = try await store.disputeHealth(account: account)
            let started = clock.now
            let since =
                health.listedThrough.map { $0.addingTimeInterval(-DisputeSettings.listOverlap) }
                ?? started.addingTimeInterval(-settings.firstSyncLookback.timeInterval)
            let disputes = try await client.allDisputes(updatedSince: since, beforeEachPage: { try await rateLimiter?.spend(.background) })
            report.listed = disputes.count
            for dispute in disputes {
                // The first list after disputes are switched on finds months of closed ones: recorded, not announced.
                report.outcomes += try await apply(dispute, readStartedAt: started, announceClosed: health.listedThrough != nil)
            }
            try await store.listed(through: started, account: account)
        }
        await showHealth()
        return report
    }

    /// How a read of one dispute went.
    enum DisputeRead {
        case read(PaymentDispute)
        /// Klarna does not know it or refuses the request (404, 400): asking again gets the same.
        case refused(String)
        /// It failed for this dispute alone; it may be read again at this time.
        case later(Date)
    }

    /// Reads dispute `id` at `urgency`. Throws what concerns the account (401, 403, 429) and the shutdown.
    func read(_ id: String, _ urgency: Urgency) async throws -> DisputeRead {
        do {
            let read = try await klarna(urgency) { try await client.readDispute(id: id) }
            backoff.succeeded(id)
            return .read(read)
        } catch let error as KlarnaAPIError {
            if error.answer.refusesThisResourceOnly { return .refused(Reconciler.short(error)) }
            if error.answer.concernsTheAccount { throw error }
            let until = backoff.failed(id, at: clock.now, policy: settings.retry)
            logger.warning(
                "reading dispute \(id) failed (\(Reconciler.short(error))): read again from \(TrackedSession.format(until)), the others go on",
                metadata: ["dispute_id": .string(id), MessageID.metadataKey: .string(MessageID.klarnaReadFailed.rawValue)])
            return .later(until)
        }
    }

    /// Reads `dispute` at its warning time or just after its deadline. One Klarna will not show is looked at again
    /// after a list's interval; one whose read failed, once its backoff is over.
    private func look(at dispute: TrackedDispute) async throws -> Int {
        let started = clock.now
        let next: Date
        switch try await read(dispute.id, .hinted) {
        case .read(let read):
            return try await apply(read, readStartedAt: started)
        case .refused(let why):
            next = started.addingTimeInterval(settings.syncInterval.timeInterval)
            logger.warning(
                "dispute \(dispute.id) cannot be read at its warning time (\(why)): looked at again at \(TrackedSession.format(next))",
                metadata: ["dispute_id": .string(dispute.id)])
        case .later(let until):
            next = until
        }
        let later = DisputeWrite(dispute: dispute, raw: nil, nextLookAt: next, expectedRevision: dispute.revision, readStartedAt: .distantPast)
        _ = try await store.record(later, at: started)
        return 0
    }

    /// Applies a read of a dispute begun at `readStartedAt`: what it changes, and a deadline warning now due, recorded
    /// with their outcomes unless another daemon wrote the dispute meanwhile (then decided again from what it wrote).
    /// Returns the outcomes this daemon recorded.
    @discardableResult
    func apply(_ read: PaymentDispute, readStartedAt: Date, announceClosed: Bool = true) async throws -> Int {
        let observation = DisputeObservation(read)
        var orderTracked = false
        if let orderID = observation.orderID { orderTracked = try await store.trackedOrders(among: [orderID], account: account).contains(orderID) }
        for attempt in 1...Self.writeAttempts {
            let known = try await store.dispute(observation.id)
            let now = clock.now
            let step = DisputeRules.apply(observation, to: known, orderTracked: orderTracked, now: now, announceClosed: announceClosed)
            let leads = settings.warnBefore
            let (warned, lead) = DisputeRules.warning(step.dispute, leads: leads, now: now)
            // The account whose Disputes API showed it.
            var dispute = warned
            dispute.account = account
            var outcomes = step.change.map { [Outcome(dispute, change: $0)] } ?? []
            // A stale read's note goes to the log, not the order's timeline.
            var events = step.events.filter { $0.kind != .staleStatus }
            if step.events.count > events.count {
                logger.debug("dispute \(observation.id): a read older than the one applied changes nothing")
            }
            if let lead {
                let warning = Outcome(dispute, warningAt: lead, now: now)
                outcomes.append(warning)
                events.append(DomainEvent(.disputeDeadline, warning.reason))
            }
            let write = DisputeWrite(
                dispute: dispute, raw: read.raw, nextLookAt: DisputeRules.nextLook(dispute, leads: leads, now: now),
                expectedRevision: known?.revision, readStartedAt: readStartedAt, outcomes: outcomes, events: events)
            if try await store.record(write, at: now) {
                announce(outcomes)
                return outcomes.count
            }
            logger.info(
                "dispute \(observation.id) was written meanwhile (another daemon, attempt \(attempt)): deciding again from what it wrote",
                metadata: ["dispute_id": .string(observation.id)])
        }
        throw DisputeWriteConflict(disputeID: observation.id)
    }
}

/// A dispute kept changing under this daemon's writes (another daemon wrote it every time): the sync fails and is
/// tried again.
struct DisputeWriteConflict: Error, CustomStringConvertible {
    let disputeID: String
    var description: String { "dispute \(disputeID) was written by another daemon at each of \(DisputeService.writeAttempts) attempts" }
}

extension DisputeObservation {
    /// What a v4 read of Klarna shows, in the core's terms.
    init(_ dispute: PaymentDispute) {
        self.init(
            id: dispute.paymentDisputeID, orderID: dispute.orderID, captureID: dispute.captureID, state: DisputeState(rawValue: dispute.state),
            previousState: dispute.previousState.map(DisputeState.init(rawValue:)), reason: dispute.disputeReason, amount: dispute.amount,
            currency: dispute.currency, holdPolicy: dispute.holdPolicy,
            responseDueAt: dispute.responseExpiresAt, appealDueAt: dispute.arbitrationExpiresAt, outcome: dispute.outcome,
            outcomeDetailed: dispute.outcomeDetailed, evidenceAttachmentIDs: dispute.evidenceAttachmentIDs, updatedAt: dispute.updatedAt)
    }
}
