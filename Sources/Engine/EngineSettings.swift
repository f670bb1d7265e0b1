import Foundation
import ReconcilerCore

/// The engine's tunables, from config.yaml (`polling`, `retry`, `authorization_expiry`, `engine`).
public struct EngineSettings: Sendable, Equatable {
    public var polling: PollingSchedule
    public var deadlines: Deadlines
    /// Backoff after failed reads. Reads never give up: the session's or order's own deadline ends them.
    public var readRetry: RetryPolicy
    /// Backoff and attempt limit for side effects (intents). Giving up is an outcome: `needs_attention`.
    public var writeRetry: RetryPolicy
    /// Sessions and orders worked on at the same time.
    public var maxConcurrency: Int
    /// `description` sent when creating a customer token (Klarna shows it to the consumer).
    public var customerTokenDescription: String
    /// How often to look for requests other processes (`track`, `capture`) left in the store.
    public var wakeupInterval: Duration
    /// After a create-order whose fate is unclear, how long nothing is read or sent for it, so that a request still in
    /// transit arrives before a second one could (``CreateOrderSettle``). The config loader holds operators to
    /// ``CreateOrderSettle/configurableSeconds``; tests set shorter ones here.
    public var createOrderSettle: Duration
    /// The longest a Klarna call lasts from when it starts (`klarna.request_timeout_seconds` + 1 s): a side effect
    /// found `sent` may have been going out until its mark plus this (``CreateOrderSettle``).
    public var longestCall: Duration
    /// How a step retries a commit the store refused (a full disk, a store that does not answer).
    public var commitRetry = CommitRetry()

    public init(
        polling: PollingSchedule = PollingSchedule(), deadlines: Deadlines = Deadlines(),
        readRetry: RetryPolicy = RetryPolicy(initialDelay: .seconds(1), maxDelay: .seconds(300), maxAttempts: .max),
        writeRetry: RetryPolicy = RetryPolicy(initialDelay: .seconds(1), maxDelay: .seconds(300), maxAttempts: 25),
        maxConcurrency: Int = 16, customerTokenDescription: String = "Subscription",
        wakeupInterval: Duration = .seconds(1), createOrderSettle: Duration = CreateOrderSettle.standard,
        longestCall: Duration = .seconds(31)
    ) {
        self.polling = polling
        self.deadlines = deadlines
        self.readRetry = readRetry
        self.writeRetry = writeRetry
        self.maxConcurrency = maxConcurrency
        self.customerTokenDescription = customerTokenDescription
        self.wakeupInterval = wakeupInterval
        self.createOrderSettle = createOrderSettle
        self.longestCall = longestCall
    }
}

/// How a step retries a commit the store refused: a pause from `initialDelay` doubling up to `maxDelay`, for
/// `patience` at most (then the worker runs the key again later), except a commit that holds Klarna's answer to a
/// side effect, which is retried until the store takes it. Not configurable: tests set shorter ones.
public struct CommitRetry: Sendable, Equatable {
    public var initialDelay: Duration = .milliseconds(100)
    public var maxDelay: Duration = .seconds(5)
    public var patience: Duration = .seconds(60)
    /// How often a commit that keeps failing says so in the journal.
    public var complaintInterval: Duration = .seconds(60)

    public init() {}
}
