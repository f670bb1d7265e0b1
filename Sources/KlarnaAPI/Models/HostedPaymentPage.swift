import Foundation

/// `GET /hpp/v1/sessions/{id}` (SessionResponseV1). The same document arrives inside HPP `status_update` callbacks.
public struct HPPSession: Codable, Hashable, Sendable {
    public var sessionID: String
    public var status: HPPSessionStatus
    public var updatedAt: Date?
    public var expiresAt: Date?
    /// Present on `COMPLETED` in the default place-order mode.
    public var authorizationToken: String?
    /// Present on `COMPLETED` with `PLACE_ORDER` / `CAPTURE_ORDER`.
    public var orderID: String?
    public var klarnaReference: String?

    public init(
        sessionID: String, status: HPPSessionStatus, updatedAt: Date? = nil, expiresAt: Date? = nil,
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
