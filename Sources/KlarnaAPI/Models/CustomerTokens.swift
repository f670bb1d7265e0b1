import Foundation

/// `GET /customer-token/v1/tokens/{token}`: what the daemon reads of a customer token before charging it.
public struct CustomerToken: Codable, Hashable, Sendable {
    /// Free text in Klarna's spec (`ACTIVE` in its example, "active, cancelled, suspended" in its description): kept as
    /// received, compared without regard to case by the charge's rules.
    public var status: String?
    public var purchaseCurrency: String?

    public init(status: String?, purchaseCurrency: String? = nil) {
        self.status = status
        self.purchaseCurrency = purchaseCurrency
    }

    enum CodingKeys: String, CodingKey {
        case status, purchaseCurrency = "purchase_currency"
    }
}
