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

    /// One sync: with `list`, every dispute updated since a day before the newest update recorded; then the disputes
    /// webhooks named, the operators' actions that are due, and the disputes whose warning or deadline has come.
    /// Throws at the first failure: what was recorded before it stays, and the next sync goes on from there.
    @discardableResult
    public func sync(list: Bool = true) async throws -> DisputeSyncReport {
        var report = DisputeSyncReport()
        if list {
            let newest = try await store.disputeHealth().newestUpdate
            let since =
                newest.map { $0.addingTimeInterval(-DisputeSettings.listOverlap) }
                ?? clock.now.addingTimeInterval(-settings.firstSyncLookback.timeInterval)
            let disputes = try await client.allDisputes(updatedSince: since, beforeEachPage: { try await rateLimiter?.spend(.background) })
            report.listed = disputes.count
            for dispute in disputes { report.outcomes += try await apply(dispute) }
        }
        let hints = try await store.disputeHints(limit: Self.batch)
        var unknown: [String] = []
        for id in hints {
            report.hinted += 1
            do {
                report.outcomes += try await apply(try await klarna(.hinted) { try await client.readDispute(id: id) })
            } catch let error as KlarnaAPIError where error.status == 404 {
                logger.warning(
                    "dispute \(id) named by a webhook is unknown to Klarna (404): its hint is dropped", metadata: ["dispute_id": .string(id)])
                unknown.append(id)
            }
        }
        if !unknown.isEmpty { try await store.forgetDisputeHints(unknown) }
        for action in try await store.dueDisputeActions(at: clock.now, limit: Self.batch) {
            report.actions += 1
            report.outcomes += try await drive(action)
        }
        for dispute in try await store.disputesToLook(at: clock.now, limit: Self.batch) {
            report.looked += 1
            report.outcomes += try await apply(try await klarna(.hinted) { try await client.readDispute(id: dispute.id) })
        }
        await showHealth()
        return report
    }

    /// Applies a read of a dispute: what it changes, and a deadline warning now due, recorded with their outcomes
    /// unless another daemon wrote the dispute meanwhile (then decided again from what it wrote). Returns the outcomes
    /// this daemon recorded.
    @discardableResult
    func apply(_ read: PaymentDispute) async throws -> Int {
        let observation = DisputeObservation(read)
        var orderTracked = false
        if let orderID = observation.orderID { orderTracked = try await store.trackedOrders(among: [orderID]).contains(orderID) }
        for attempt in 1...Self.writeAttempts {
            let known = try await store.dispute(observation.id)
            let now = clock.now
            let step = DisputeRules.apply(observation, to: known, orderTracked: orderTracked, now: now)
            let leads = settings.warnBefore
            let (dispute, lead) = DisputeRules.warning(step.dispute, leads: leads, now: now)
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
                expectedRevision: known?.revision, outcomes: outcomes, events: events)
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
            reason: dispute.disputeReason, amount: dispute.amount, currency: dispute.currency, holdPolicy: dispute.holdPolicy,
            responseDueAt: dispute.responseExpiresAt, appealDueAt: dispute.arbitrationExpiresAt, outcome: dispute.outcome,
            outcomeDetailed: dispute.outcomeDetailed, evidenceAttachmentIDs: dispute.evidenceAttachmentIDs, updatedAt: dispute.updatedAt)
    }
}
