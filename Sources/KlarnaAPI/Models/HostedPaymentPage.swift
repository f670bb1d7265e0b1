import Foundation
import ReconcilerCore

/// `GET /hpp/v1/sessions/{id}` (SessionResponseV1). The same document arrives inside HPP `status_update` callbacks.
/// The spec requires none of its fields, so each is optional; the comments say what a reader falls back to.
public struct HPPSession: Codable, Hashable, Sendable {
    /// Absent: the session is the one asked for.
    public var sessionID: String?
    /// Absent: the read says nothing about progress, and the status seen before stands (never a final one).
    public var status: HPPSessionStatus?
    /// Absent: when the status last changed is not known (the authorization is then dated by the read).
    public var updatedAt: Date?
    /// Absent: the expiry stays as known before; without one, a 404 is what ends the session.
    public var expiresAt: Date?
    /// Present on `COMPLETED` in the default place-order mode. Absent with no `order_id` either: a `COMPLETED`
    /// session hands over nothing, and needs an operator.
    public var authorizationToken: String?
    /// Present on `COMPLETED` with `PLACE_ORDER` / `CAPTURE_ORDER`.
    public var orderID: String?
    /// Absent: the order's own read may name it.
    public var klarnaReference: String?

    public init(
        sessionID: String? = nil, status: HPPSessionStatus? = nil, updatedAt: Date? = nil, expiresAt: Date? = nil,
        authorizationToken: String? = nil, orderID: String? = nil, klarnaReference: String? = nil
    ) {
        self.sessionID = sessionID
        self.status = status
        self.updatedAt = updatedAt
        self.expiresAt = expiresAt
        self.authorizationToken = authorizationToken
        self.orderID = orderID
        self.klarnaReference = klarnaReference
    }

    enum CodingKeys: String, CodingKey {
        case sessionID = "session_id", status, updatedAt = "updated_at", expiresAt = "expires_at"
        case authorizationToken = "authorization_token", orderID = "order_id", klarnaReference = "klarna_reference"
    }
}
