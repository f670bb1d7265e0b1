import Foundation

/// What a claim's answer says of a lapsed lease it took: whose it was and when it ran out, relative to the claim
/// query by the store's clock (so neither host's wall clock plays a part).
public struct LapsedLease: Sendable, Equatable {
    /// The daemon that held the work.
    public var holder: String
    /// How long before the claim query ran the old lease ended (positive: before the query).
    public var endedAgo: Duration

    public init(holder: String, endedAgo: Duration) {
        self.holder = holder
        self.endedAgo = endedAgo
    }
}

/// A unit of work taken over from another daemon whose lease ran out (it died, hung or lost the network).
///
/// That daemon may still have a Klarna call in flight: it committed an intent as `sent` while its lease held, and
/// a call started before the lease ended can last as long as the longest call there is. KP create-order is not
/// idempotent, so reading Klarna now and placing again if no order shows yet could place a second order beside the
/// one still on its way. A `sent` intent is therefore resolved only once every call the old holder can have started
/// is over: its lease's end plus the longest call.
///
/// The wait runs on this host's monotonic clock (a wall-clock jump never shortens it) and counts from the instant
/// the claim's answer had arrived: the claim query ran on the server before that instant, so the old lease ended
/// no later than `answered - endedAgo`. A lease adopted after a lost claim answer (a renewal names a key this
/// daemon never learnt it claimed) gets the same wait: who held it and when its lease ended are unknown, but the
/// claim committed before the renewal that revealed it answered, so the old lease ended before that answer.
public struct Takeover: Sendable, Equatable {
    public enum Origin: Sendable, Equatable {
        /// Claimed: the claim's answer named the old lease.
        case claimed(LapsedLease)
        /// Adopted after a lost claim answer: the old holder (if any) and its lease's end are unknown.
        case adopted
    }

    public var origin: Origin
    /// When the claim's answer (or, adopted, the renewal's answer that revealed the lease) had arrived, by this
    /// host's monotonic clock.
    public var answered: ContinuousClock.Instant

    public init(_ origin: Origin, answered: ContinuousClock.Instant) {
        self.origin = origin
        self.answered = answered
    }

    public static func claimed(_ lapsed: LapsedLease, answered: ContinuousClock.Instant) -> Takeover {
        Takeover(.claimed(lapsed), answered: answered)
    }

    public static func adopted(answered: ContinuousClock.Instant) -> Takeover {
        Takeover(.adopted, answered: answered)
    }

    /// Whom the work was taken from, for the log.
    public var from: String {
        switch origin {
        case .claimed(let lapsed): lapsed.holder
        case .adopted: "an unknown holder (adopted after a lost claim answer)"
        }
    }

    /// The latest the old lease can have ended, by this host's monotonic clock.
    public var leaseEnded: ContinuousClock.Instant {
        switch origin {
        case .claimed(let lapsed): answered - lapsed.endedAgo
        case .adopted: answered
        }
    }

    /// When the old holder's last possible call is over, by this host's monotonic clock.
    public func callsSettled(longestCall: Duration) -> ContinuousClock.Instant {
        leaseEnded + longestCall
    }

    /// How much longer the new holder must leave the work alone: `nil` when it may go on now, because no intent of
    /// the work is `sent` (nothing can be in flight) or every call the old holder can have made is over.
    public func wait(intents: [Intent], longestCall: Duration, now: ContinuousClock.Instant) -> Duration? {
        guard intents.contains(where: { Self.mayBeInFlight($0.state) }) else { return nil }
        let left = now.duration(to: callsSettled(longestCall: longestCall))
        return left > .zero ? left : nil
    }

    /// ``wait(intents:longestCall:now:)`` as a wall time to look again at, for the scheduler: decided on the
    /// monotonic clock, so a jump of `wallNow` moves when the work is looked at again, never when it may go on.
    public func resumeAt(intents: [Intent], longestCall: Duration, now: ContinuousClock.Instant, wallNow: Date) -> Date? {
        wait(intents: intents, longestCall: longestCall, now: now).map { wallNow.addingTimeInterval($0.timeInterval) }
    }

    /// Whether the old holder can have a call in flight for an intent in `state`.
    static func mayBeInFlight(_ state: Intent.State) -> Bool {
        switch state {
        case .sent: true
        case .intended, .confirmed, .failed, .ambiguous: false
        }
    }
}
