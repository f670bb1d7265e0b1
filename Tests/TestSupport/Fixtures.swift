import Foundation
import ReconcilerCore

/// The values tests build their payments from, defined once: the instant tests start at, and a tracked session and
/// order with the defaults most tests want. A test names only what it cares about; a suite whose defaults differ
/// wraps these in a one-line builder of its own.
public enum Fixtures {
    /// The instant tests start at (2027-01-15T08:00:00Z).
    public static let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    /// A tracked session as `TrackedSession.init` makes it (polling, due at `at`), then `phase`, `outcome` and the
    /// authorization token set as given.
    /// - Parameter kp: the KP session id; `nil`: `kp-<id>`.
    public static func session(
        _ id: String = "hpp-1", kp: String? = nil, mode: PlaceOrderMode? = PlaceOrderMode.none, reference: String? = "ref-1",
        policy: CapturePolicy = .onRequest, purpose: PaymentPurpose = .buy, at trackedAt: Date = Fixtures.t0,
        phase: TrackedSession.Phase = .polling, outcome: OutcomeKind? = nil, token: String? = nil, tokenExpiresAt: Date? = nil
    ) -> TrackedSession {
        var session = TrackedSession(
            hppSessionID: id, kpSessionID: kp ?? "kp-\(id)", mode: mode, merchantReference: reference, capturePolicy: policy,
            purpose: purpose, trackedAt: trackedAt)
        session.phase = phase
        session.outcome = outcome
        session.authorizationToken = token
        session.tokenExpiresAt = tokenExpiresAt
        return session
    }

    /// A tracked order as `TrackedOrder.init` makes it (checking, due at `at`), then `phase`, `outcome`, currency and
    /// amounts set as given.
    /// - Parameter session: the HPP session id; `kp` the KP session id (none unless given, unlike a session's).
    /// - Parameter amount: the order amount; `captured` and `remaining` its captured and remaining authorized amounts.
    public static func order(
        _ id: String = "o-1", session: String? = nil, kp: String? = nil, reference: String? = nil,
        policy: CapturePolicy = .onRequest, placedBy: PlaceOrderMode = .placeOrder, at createdAt: Date = Fixtures.t0,
        phase: TrackedOrder.Phase = .checking, outcome: OutcomeKind? = nil, currency: String? = nil,
        amount: Int? = nil, captured: Int = 0, remaining: Int? = nil
    ) -> TrackedOrder {
        var order = TrackedOrder(
            orderID: id, hppSessionID: session, kpSessionID: kp, merchantReference: reference, capturePolicy: policy,
            placedBy: placedBy, createdAt: createdAt)
        order.phase = phase
        order.outcome = outcome
        order.currency = currency
        order.orderAmount = amount
        order.capturedAmount = captured
        order.remainingAuthorizedAmount = remaining
        return order
    }
}
