import Foundation

/// How long HPP sessions take to reach a final status, learned from what the daemon sees: a log-normal
/// distribution of the age (from tracking to Klarna's `updated_at` on the final status) of the sessions that end,
/// and the share of sessions that end at all rather than being abandoned until they expire.
///
/// It starts from a prior worth ``priorWeight`` sessions (median 3 minutes, a wide spread, two in three ending),
/// so a new daemon polls sensibly and a few odd sessions do not swing it; each observation moves it from there.
public struct CompletionModel: Sendable, Equatable {
    public static let priorMedian: Duration = .seconds(180)
    public static let priorSpread = 1.2
    public static let priorShareEnding = 2.0 / 3.0
    public static let priorWeight = 20.0

    private var weight: Double
    private var sumLog: Double
    private var sumLogSquared: Double
    private var ended: Double
    private var abandoned: Double

    public init() {
        let mu = log(Self.priorMedian.timeInterval)
        weight = Self.priorWeight
        sumLog = Self.priorWeight * mu
        sumLogSquared = Self.priorWeight * (mu * mu + Self.priorSpread * Self.priorSpread)
        ended = Self.priorWeight * Self.priorShareEnding
        abandoned = Self.priorWeight * (1 - Self.priorShareEnding)
    }

    /// A session reached a final status (completed, cancelled, disabled) `age` after it was tracked.
    public mutating func observeEnding(age: Duration) {
        let value = log(max(1, age.timeInterval))
        weight += 1
        sumLog += value
        sumLogSquared += value * value
        ended += 1
    }

    /// A session expired without a final status.
    public mutating func observeAbandoned() { abandoned += 1 }

    /// The log-normal's parameters: ln of the median, and the spread of ln(age).
    public var mu: Double { sumLog / weight }
    public var sigma: Double { max(0.2, (sumLogSquared / weight - mu * mu).squareRoot()) }
    public var median: Duration { Duration(timeInterval: exp(mu)) }
    /// The share of tracked sessions that reach a final status.
    public var shareEnding: Double { ended / (ended + abandoned) }

    /// P(a session that ends has ended by `age`).
    public func cdf(_ age: Duration) -> Double {
        let seconds = age.timeInterval
        guard seconds > 0 else { return 0 }
        return 0.5 * erfc(-(log(seconds) - mu) / (sigma * 2.0.squareRoot()))
    }

    /// P(a tracked session is still open at `age`).
    public func survival(_ age: Duration) -> Double { 1 - shareEnding * cdf(age) }

    /// P(a session open at `from` has ended by `to`): what a read at age `to` finds, when the last read was at `from`.
    public func chanceOfEnding(from: Duration, to: Duration) -> Double {
        let open = survival(from)
        guard open > 1e-12, to > from else { return 0 }
        return max(0, (open - survival(to)) / open)
    }
}

/// What the end of an HPP session teaches the ``CompletionModel``.
public enum SessionEnding: Sendable, Equatable {
    /// A final status, `age` after tracking (Klarna's `updated_at` of the final status).
    case ended(age: Duration)
    /// Expired without a final status.
    case abandoned
}

extension SessionStep {
    /// What this read teaches about how long sessions take: a final status (dated by Klarna's `updated_at`) or an
    /// expiry, for a session the daemon had read open before. A session already final at its first read (tracked
    /// late, or from its own callback) says nothing about when consumers finish.
    public func ending(from before: TrackedSession, now: Date) -> SessionEnding? {
        guard before.phase == .polling, before.lastReadAt != nil, session.phase != .polling else { return nil }
        if session.outcome == .expired { return .abandoned }
        let endedAt = min(session.hppUpdatedAt ?? now, now)
        return .ended(age: Duration(timeInterval: max(0, endedAt.timeIntervalSince(before.trackedAt))))
    }
}
