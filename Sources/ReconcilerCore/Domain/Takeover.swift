import Foundation

/// A unit of work taken over from another daemon whose lease ran out (it died, hung or lost the network).
///
/// That daemon may still have a Klarna call in flight: it committed an intent as `sent` while its lease held, and
/// a call started before the lease ended can last as long as the longest call there is. KP create-order is not
/// idempotent, so reading Klarna now and placing again if no order shows yet could place a second order beside the
/// one still on its way. A `sent` intent is therefore resolved only once every call the old holder can have started
/// is over: its lease's end plus the longest call.
public struct Takeover: Sendable, Equatable {
    /// The daemon that held the work.
    public var from: String
    /// When its lease ended, by the store's clock.
    public var leaseEnded: Date

    public init(from: String, leaseEnded: Date) {
        self.from = from
        self.leaseEnded = leaseEnded
    }

    /// When the old holder's last possible call is over.
    public func callsSettled(longestCall: Duration) -> Date {
        leaseEnded.addingTimeInterval(longestCall.timeInterval)
    }

    /// Until when the new holder must leave the work alone: `nil` when it may go on now, because no intent of the
    /// work is `sent` (nothing can be in flight) or every call the old holder can have made is over.
    public func wait(intents: [Intent], longestCall: Duration, now: Date) -> Date? {
        guard intents.contains(where: { $0.state == .sent }) else { return nil }
        let settled = callsSettled(longestCall: longestCall)
        return now.hasReached(settled) ? nil : settled
    }
}
