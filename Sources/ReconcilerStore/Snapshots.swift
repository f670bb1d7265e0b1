import Foundation
import ReconcilerCore

/// The state numbers `/metrics` shows, from one read of the store.
public struct StateSnapshot: Sendable, Equatable {
    public var openSessionsByPhase: [String: Int] = [:]
    public var openOrdersByPhase: [String: Int] = [:]
    /// `intended`, `sent` and `ambiguous` only: finished intents are counted as they finish.
    public var unfinishedIntentsByState: [String: Int] = [:]
    public var outboxBacklog = 0
    public var notifyBacklog = 0
    public var held = 0
    /// Charges (renewals) among the unfinished intents.
    public var chargesWaiting = 0
    public var oldestOpenSince: Date?
    public var nextDeadline: Date?

    public init() {}
}

public struct LiveStatus: Sendable, Equatable {
    /// Side effects decided but not yet known to be done or refused (`intended`, `sent`, `ambiguous`).
    public var unfinishedIntents: Int
    public var lastKlarnaSuccess: Date?
    public var lastKlarnaError: Date?
    public var lastKlarnaErrorDetail: String?

    public init(unfinishedIntents: Int, lastKlarnaSuccess: Date? = nil, lastKlarnaError: Date? = nil, lastKlarnaErrorDetail: String? = nil) {
        self.unfinishedIntents = unfinishedIntents
        self.lastKlarnaSuccess = lastKlarnaSuccess
        self.lastKlarnaError = lastKlarnaError
        self.lastKlarnaErrorDetail = lastKlarnaErrorDetail
    }
}

public struct ReloadAnswer: Sendable, Equatable {
    public var ok: Bool
    public var message: String

    public init(ok: Bool, message: String) {
        self.ok = ok
        self.message = message
    }
}
