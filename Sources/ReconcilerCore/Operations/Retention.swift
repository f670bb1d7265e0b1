import Foundation

/// How long finished things are kept (`retention.*`); `nil` keeps them forever.
///
/// A payment (an HPP session, the order it led to, their intents, events and outcomes) is pruned as a whole, and only
/// once nothing about it can matter to the engine or to a consumer: nothing of it is open, every side effect of it
/// is known done or refused, every outcome of it has reached the outbox and the notify URL, and it last changed
/// before the cutoff.
///
/// What anyone can send without authenticating leaves rows of two kinds: refusals (`rejections`) and the dedupe records
/// of OM notifications (Klarna does not sign them) for orders the store does not know. Both have their own, short
/// retention, and at most ``unverifiedRowCap`` of each are kept, the oldest removed first.
public struct RetentionPolicy: Sendable, Equatable {
    public var closedPayments: Duration?
    public var events: Duration?
    public var rejections: Duration?
    public var spoolDone: Duration?
    /// Outcome files a consumer acknowledged (moved into the outbox's `cur/`). Files in `new/` are never pruned: an
    /// outcome nobody took stays until someone does.
    public var outboxAcknowledged: Duration?
    /// Dedupe records of OM notifications for orders the store does not know (a notification for a known order is
    /// kept as long as any delivery record, `closedPayments`).
    public var unknownNotifications: Duration?
    /// The most refusals, and the most notifications for unknown orders, kept at once; `nil` for no cap.
    public var unverifiedRowCap: Int?

    public init(
        closedPayments: Duration? = nil, events: Duration? = nil, rejections: Duration? = nil, spoolDone: Duration? = nil,
        outboxAcknowledged: Duration? = nil, unknownNotifications: Duration? = nil, unverifiedRowCap: Int? = nil
    ) {
        self.closedPayments = closedPayments
        self.events = events
        self.rejections = rejections
        self.spoolDone = spoolDone
        self.outboxAcknowledged = outboxAcknowledged
        self.unknownNotifications = unknownNotifications
        self.unverifiedRowCap = unverifiedRowCap
    }

    /// The moments before which each kind of row goes, as of `now`, and the cap.
    public func cutoffs(now: Date) -> PruneCutoffs {
        func before(_ age: Duration?) -> Date? { age.map { now.addingTimeInterval(-$0.timeInterval) } }
        return PruneCutoffs(
            closedPaymentsBefore: before(closedPayments), eventsBefore: before(events), rejectionsBefore: before(rejections),
            spoolDoneBefore: before(spoolDone), outboxAcknowledgedBefore: before(outboxAcknowledged),
            unknownNotificationsBefore: before(unknownNotifications), unverifiedRowCap: unverifiedRowCap)
    }

    /// Only the cap: what the daemon applies between two passes, so that a flood is cut back within a minute.
    public var capOnly: PruneCutoffs { PruneCutoffs(unverifiedRowCap: unverifiedRowCap) }

    /// Intent states that mean a side effect's fate is still open: a payment that has one is kept, whatever its age.
    public static let unsettledIntentStates: [Intent.State] = [.intended, .sent, .ambiguous]

    /// The `kind` of an OM notification's delivery record, and the start of its dedupe key
    /// `om-notification:ORDER_ID:EVENT_TYPE` (Ingest's `Webhook.dedupeKey`; event types are A–Z and `_`): the stores
    /// read the order id back from it to find the notifications for orders they do not know.
    public static let omNotificationKind = "om_notification"
    public static let omNotificationKeyPrefix = "om-notification:"

    /// The order id in an OM notification's dedupe key, or `nil` when `key` is not one.
    public static func notifiedOrderID(dedupeKey key: String) -> String? {
        guard key.hasPrefix(omNotificationKeyPrefix), let colon = key.lastIndex(of: ":") else { return nil }
        let orderID = key[key.index(key.startIndex, offsetBy: omNotificationKeyPrefix.count)..<colon]
        return orderID.isEmpty ? nil : String(orderID)
    }
}

public struct PruneCutoffs: Sendable, Equatable {
    public var closedPaymentsBefore: Date?
    public var eventsBefore: Date?
    public var rejectionsBefore: Date?
    public var spoolDoneBefore: Date?
    public var outboxAcknowledgedBefore: Date?
    public var unknownNotificationsBefore: Date?
    /// Beyond the newest this many refusals, and the newest this many notifications for unknown orders, the rest go.
    public var unverifiedRowCap: Int?
}

/// What one pruning pass removed (or, on a dry run, would remove).
public struct PruneCounts: Sendable, Equatable, CustomStringConvertible {
    public var payments = 0
    public var paymentRequests = 0
    public var events = 0
    public var rejections = 0
    /// Dedupe records of OM notifications for orders the store does not know.
    public var unknownNotifications = 0
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
        total.unknownNotifications += batch.unknownNotifications
        total.deliveries += batch.deliveries
        total.spoolFiles += batch.spoolFiles
        total.outboxFiles += batch.outboxFiles
    }

    public var description: String {
        "\(payments) closed payments, \(paymentRequests) payment requests, \(events) events, \(rejections) rejections, "
            + "\(unknownNotifications) notifications for unknown orders, \(deliveries) delivery records, "
            + "\(spoolFiles) spool done/ files, \(outboxFiles) acknowledged outbox cur/ files"
    }
}
