import Foundation

/// When to read an HPP session again: dense right after tracking or a webhook hint (the consumer is probably on the
/// page), sparser the longer nothing happens, and never later than the session's `expires_at`.
public struct PollingSchedule: Sendable, Equatable, Codable {
    /// The interval inside the dense window.
    public var denseInterval: Duration
    /// How long after tracking or a hint polling stays dense.
    public var denseWindow: Duration
    /// The longest interval between two reads of an open session.
    public var maxInterval: Duration
    /// After `expires_at`, how long to keep trying to confirm the expiry with Klarna before recording it anyway.
    public var expiryGrace: Duration

    public init(
        denseInterval: Duration = .seconds(2), denseWindow: Duration = .seconds(600),
        maxInterval: Duration = .seconds(300), expiryGrace: Duration = .seconds(600)
    ) {
        self.denseInterval = denseInterval
        self.denseWindow = denseWindow
        self.maxInterval = maxInterval
        self.expiryGrace = expiryGrace
    }

    /// The interval after `elapsed` since the anchor (tracking or the last hint). Past the dense window it grows by a
    /// quarter of the quiet time, so an abandoned page costs a read every `maxInterval` at most.
    public func interval(sinceAnchor elapsed: Duration) -> Duration {
        guard elapsed >= denseWindow else { return denseInterval }
        let grown = (elapsed - denseWindow) / 4
        return min(maxInterval, max(denseInterval, grown))
    }

    /// The next read after `now`, clamped so the first read after `expiresAt` happens right at it.
    public func nextPoll(now: Date, anchor: Date, expiresAt: Date?) -> Date {
        let elapsed = Duration(timeInterval: max(0, now.timeIntervalSince(anchor)))
        var next = now.addingTimeInterval(interval(sinceAnchor: elapsed).timeInterval)
        if let expiresAt, !now.hasReached(expiresAt), next > expiresAt { next = expiresAt }
        return next
    }
}

/// Deadlines Klarna sets and the daemon must never miss silently.
public struct Deadlines: Sendable, Equatable, Codable {
    /// A KP authorization token can place an order for 60 minutes (Klarna's Payments API: the token is valid for 60 minutes).
    public static let authorizationTokenLifetime: Duration = .seconds(3_600)

    /// How long before an order's authorization expires (`expires_at`) to warn.
    public var authorizationWarnBefore: Duration
    /// Call `extend-authorization-time` when the warning fires (orders waiting for a capture request).
    public var autoExtendAuthorization: Bool
    /// How often to re-read an order while Klarna's fraud review is `PENDING`.
    public var pendingFraudInterval: Duration
    /// How often to re-read an order that waits for a capture request, to notice a cancellation.
    public var orderRecheckInterval: Duration

    public init(
        authorizationWarnBefore: Duration = .seconds(3 * 86_400), autoExtendAuthorization: Bool = false,
        pendingFraudInterval: Duration = .seconds(900), orderRecheckInterval: Duration = .seconds(6 * 3_600)
    ) {
        self.authorizationWarnBefore = authorizationWarnBefore
        self.autoExtendAuthorization = autoExtendAuthorization
        self.pendingFraudInterval = pendingFraudInterval
        self.orderRecheckInterval = orderRecheckInterval
    }
}
