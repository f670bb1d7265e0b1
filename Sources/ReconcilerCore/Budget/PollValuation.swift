import Foundation

/// What the scheduler knows about an HPP session waiting for a routine read.
public struct PollProfile: Sendable, Equatable {
    public var trackedAt: Date
    /// The last read that reached Klarna; `nil` before the first.
    public var lastReadAt: Date?
    /// The last webhook or operator hint about this session: its callbacks arrive.
    public var lastHintAt: Date?
    public var expiresAt: Date?

    public init(trackedAt: Date, lastReadAt: Date? = nil, lastHintAt: Date? = nil, expiresAt: Date? = nil) {
        self.trackedAt = trackedAt
        self.lastReadAt = lastReadAt
        self.lastHintAt = lastHintAt
        self.expiresAt = expiresAt
    }
}

/// Which routine read is worth the next token: the one whose read removes the most expected detection delay, by
/// the learned ``CompletionModel``.
///
/// The value of reading a session now is the chance that it reached a final status since its last read times how
/// long ago that read was (about twice the delay such a final status has piled up so far). Ranking by it reads each
/// session at a rate that grows with the square root of its chance of ending, which is what minimises the mean
/// delay under a fixed budget; ranking by the chance alone would starve the sessions with a low one and leave a long
/// tail. A session at the age consumers usually finish is read every few seconds, one abandoned an hour ago every few
/// minutes, and the budget goes to neither just because it was due first.
public enum PollValuation {
    /// A session whose callbacks arrive is polled only as a safety net: its value is scaled down this much.
    public static let callbackDiscount = 0.05
    /// A hint makes the consumer active again: for this long, the session is also valued as if tracked at the hint.
    public static let hintWindow: Duration = .seconds(600)
    /// Reads that go before any ranking: a session at or past `expires_at` (its read records the expiry on time),
    /// then one never read.
    public static let expiring = Double.greatestFiniteMagnitude
    public static let unread = Double.greatestFiniteMagnitude / 2

    public static func value(_ profile: PollProfile, now: Date, model: CompletionModel) -> Double {
        if let expiresAt = profile.expiresAt, now.hasReached(expiresAt) { return expiring }
        guard let lastRead = profile.lastReadAt else { return unread }
        func age(_ date: Date, from origin: Date) -> Duration { Duration(timeInterval: max(0, date.timeIntervalSince(origin))) }
        var chance = model.chanceOfEnding(from: age(lastRead, from: profile.trackedAt), to: age(now, from: profile.trackedAt))
        if let hint = profile.lastHintAt {
            if now.timeIntervalSince(hint) < hintWindow.timeInterval {
                let sinceHint = model.chanceOfEnding(from: age(max(lastRead, hint), from: hint), to: age(now, from: hint))
                chance = max(chance, sinceHint)
            }
            chance *= callbackDiscount
        }
        return chance * max(0, now.timeIntervalSince(lastRead))
    }
}
