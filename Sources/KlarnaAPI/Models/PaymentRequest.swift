import Foundation
import ReconcilerCore

/// Klarna Network payment request, read with `GET /v2/payment/requests/{id}`.
/// The URL and shape are inferred from Klarna's PUT/DELETE resource and release/4 samples (Klarna Network docs;
/// not verified against the live API); no spec says which fields are required. `state` is what a read is for, and every
/// version Klarna documents carries it: a read without it is refused. Every other field is optional, and the
/// context is kept as received.
public struct PaymentRequest: Codable, Hashable, Sendable {
    /// Absent: the request is the one asked for.
    public var paymentRequestID: String?
    public var state: PaymentRequestState
    public var stateReason: String?
    public var expiresAt: Date?
    public var stateExpiresAt: Date?
    public var createdAt: Date?
    public var updatedAt: Date?
    /// On `COMPLETED`, holds `klarna_network_session_token` for the acquiring partner.
    public var stateContext: JSONValue?

    public init(
        paymentRequestID: String? = nil, state: PaymentRequestState, stateReason: String? = nil, expiresAt: Date? = nil,
        stateExpiresAt: Date? = nil, createdAt: Date? = nil, updatedAt: Date? = nil, stateContext: JSONValue? = nil
    ) {
        self.paymentRequestID = paymentRequestID
        self.state = state
        self.stateReason = stateReason
        self.expiresAt = expiresAt
        self.stateExpiresAt = stateExpiresAt
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.stateContext = stateContext
    }

    public var klarnaNetworkSessionToken: String? { stateContext?["klarna_network_session_token"]?.stringValue }

    enum CodingKeys: String, CodingKey {
        case paymentRequestID = "payment_request_id", state, stateReason = "state_reason", expiresAt = "expires_at"
        case stateExpiresAt = "state_expires_at", createdAt = "created_at", updatedAt = "updated_at"
        case stateContext = "state_context"
    }
}
