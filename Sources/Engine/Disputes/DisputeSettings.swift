import Foundation
import ReconcilerCore

/// The dispute service's tunables, from config.yaml (`disputes`), with the engine's retry policy and longest call.
public struct DisputeSettings: Sendable, Equatable {
    /// Whether the daemon follows Klarna's disputes at all (read at start).
    public var enabled: Bool
    /// How often the Disputes API is listed for disputes updated since the last list; hints and deadlines come sooner.
    public var syncInterval: Duration
    /// How long before each response deadline a warning is given, once each (default 72 h and 24 h).
    public var warnBefore: [Duration]
    /// How far back the first list reaches (later lists start a day before the last complete list began).
    public var firstSyncLookback: Duration
    /// The backoff of an operator's action that got no clear answer, and its attempts (the engine's `retry.*`).
    public var retry: RetryPolicy
    /// The longest a Klarna call lasts: after it, an attempt that got no answer can no longer take effect.
    public var longestCall: Duration

    public init(
        enabled: Bool = false, syncInterval: Duration = .seconds(3_600), warnBefore: [Duration] = [.seconds(72 * 3_600), .seconds(24 * 3_600)],
        firstSyncLookback: Duration = .seconds(120 * 86_400),
        retry: RetryPolicy = RetryPolicy(initialDelay: .seconds(1), maxDelay: .seconds(300), maxAttempts: 25),
        longestCall: Duration = .seconds(31)
    ) {
        self.enabled = enabled
        self.syncInterval = syncInterval
        self.warnBefore = warnBefore.sorted(by: >)
        self.firstSyncLookback = firstSyncLookback
        self.retry = retry
        self.longestCall = longestCall
    }

    /// How far before the last complete list's start the next list starts: this daemon's clock and Klarna's
    /// `updated_at` need not agree.
    public static let listOverlap: TimeInterval = 86_400
}
