import Foundation

/// The settlement service's tunables, from config.yaml (`settlements`).
public struct SettlementSettings: Sendable, Equatable {
    /// Whether the daemon fetches and matches payouts at all (read at start).
    public var enabled: Bool
    /// How often payouts are fetched and captures checked; a failed sync is tried again sooner, never later.
    public var syncInterval: Duration
    /// A capture no payout settled this many days after it was captured becomes `capture_unsettled`.
    public var settleWithinDays: Int
    /// How far back the first sync lists payouts (later syncs start a week before the newest payout recorded).
    public var firstSyncLookback: Duration

    public init(
        enabled: Bool = false, syncInterval: Duration = .seconds(3_600), settleWithinDays: Int = 14,
        firstSyncLookback: Duration = .seconds(30 * 86_400)
    ) {
        self.enabled = enabled
        self.syncInterval = syncInterval
        self.settleWithinDays = settleWithinDays
        self.firstSyncLookback = firstSyncLookback
    }
}
