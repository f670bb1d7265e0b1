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

/// Which routine read is worth the next token: the one most likely to find a final status that nobody has seen,
/// by the learned ``CompletionModel``.
public enum PollValuation {
    /// A session whose callbacks arrive is polled only as a safety net: its value is scaled down this much.
    public static let callbackDiscount = 0.05
    /// A hint makes the consumer active again: for this long, the session is also valued as if tracked at the hint.
    public static let hintWindow: Duration = .seconds(600)

    /// The chance a read now finds the session final, in [0, 1]; a session at or past `expires_at` is worth the most
    /// (its read records the expiry on time), and one never read comes right after those.
    public static func value(_ profile: PollProfile, now: Date, model: CompletionModel) -> Double {
        if let expiresAt = profile.expiresAt, now.hasReached(expiresAt) { return 2 }
        guard let lastRead = profile.lastReadAt else { return 1.5 }
        func age(_ date: Date, from origin: Date) -> Duration { Duration(timeInterval: max(0, date.timeIntervalSince(origin))) }
        var chance = model.chanceOfEnding(from: age(lastRead, from: profile.trackedAt), to: age(now, from: profile.trackedAt))
        if let hint = profile.lastHintAt {
            if now.timeIntervalSince(hint) < hintWindow.timeInterval {
                let sinceHint = model.chanceOfEnding(from: age(max(lastRead, hint), from: hint), to: age(now, from: hint))
                chance = max(chance, sinceHint)
            }
            chance *= callbackDiscount
        }
        return chance
    }
}
