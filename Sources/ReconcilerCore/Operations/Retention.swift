import Foundation

/// How long finished things are kept (`retention.*`); `nil` keeps them forever.
///
/// A payment (an HPP session, the order it led to, their intents, events and outcomes) is pruned as a whole, and only
/// once nothing about it can matter to the engine or to a consumer: nothing of it is open, every side effect of it
/// is known done or refused, every outcome of it has reached the outbox and the notify URL, and it last changed
/// before the cutoff.
public struct RetentionPolicy: Sendable, Equatable {
    public var closedPayments: Duration?
    public var events: Duration?
    public var rejections: Duration?
    public var spoolDone: Duration?
    /// Outcome files a consumer acknowledged (moved into the outbox's `cur/`). Files in `new/` are never pruned: an
    /// outcome nobody took stays until someone does.
    public var outboxAcknowledged: Duration?

    public init(closedPayments: Duration? = nil, events: Duration? = nil, rejections: Duration? = nil, spoolDone: Duration? = nil, outboxAcknowledged: Duration? = nil) {
        self.closedPayments = closedPayments
        self.events = events
        self.rejections = rejections
        self.spoolDone = spoolDone
        self.outboxAcknowledged = outboxAcknowledged
    }

    /// The moments before which each kind of row goes, as of `now`.
    public func cutoffs(now: Date) -> PruneCutoffs {
        func before(_ age: Duration?) -> Date? { age.map { now.addingTimeInterval(-$0.timeInterval) } }
        return PruneCutoffs(
            closedPaymentsBefore: before(closedPayments), eventsBefore: before(events), rejectionsBefore: before(rejections),
            spoolDoneBefore: before(spoolDone), outboxAcknowledgedBefore: before(outboxAcknowledged))
    }

    /// Intent states that mean a side effect's fate is still open: a payment that has one is kept, whatever its age.
    public static let unsettledIntentStates: [Intent.State] = [.intended, .sent, .ambiguous]
}

public struct PruneCutoffs: Sendable, Equatable {
    public var closedPaymentsBefore: Date?
    public var eventsBefore: Date?
    public var rejectionsBefore: Date?
    public var spoolDoneBefore: Date?
    public var outboxAcknowledgedBefore: Date?
}

/// What one pruning pass removed (or, on a dry run, would remove).
public struct PruneCounts: Sendable, Equatable, CustomStringConvertible {
    public var payments = 0
    public var paymentRequests = 0
    public var events = 0
    public var rejections = 0
    public var deliveries = 0
    public var spoolFiles = 0
    public var outboxFiles = 0

    public init() {}

    public var isEmpty: Bool { self == PruneCounts() }

    public static func += (total: inout PruneCounts, batch: PruneCounts) {
        total.payments += batch.payments
        total.paymentRequests += batch.paymentRequests
        total.events += batch.events
        total.rejections += batch.rejections
        total.deliveries += batch.deliveries
        total.spoolFiles += batch.spoolFiles
        total.outboxFiles += batch.outboxFiles
    }

    public var description: String {
        "\(payments) closed payments, \(paymentRequests) payment requests, \(events) events, \(rejections) rejections, "
            + "\(deliveries) delivery records, \(spoolFiles) spool done/ files, \(outboxFiles) acknowledged outbox cur/ files"
    }
}
