import Foundation
import HTTPServer

/// How Klarna declines a charge: `403` without a body Klarna documents, or a `400` naming the fraud status and reason.
public enum SandboxChargeDecline: String, Codable, Sendable {
    case forbidden = "403"
    case rejected = "400"
}

/// Klarna's customer-token API (`/customer-token/v1/tokens/…`): the token's status, an order placed with it (a
/// charge, deduplicated by `Klarna-Idempotency-Key` for 24 hours like OM's writes), and its cancellation.
enum CustomerTokenHandlers {
    static let notFound = SandboxResponse.klarnaError(404, "NOT_FOUND", "The customer token does not exist")

    static func handle(_ route: KlarnaRoute, _ context: KlarnaCallContext, _ state: inout SandboxState) throws(Rejection) -> SandboxResponse {
        let id = route.parameters.first ?? ""
        guard let token = state.customerTokens[id] else { return notFound }
        switch route.name {
        case "ct.read_token": return read(token)
        case "ct.create_order": return try charge(token, context, &state)
        default: return try updateStatus(token, context, &state)
        }
    }

    static func read(_ token: SandboxState.CustomerToken) -> SandboxResponse {
        struct Body: Encodable {
            let status: String
            let purchaseCurrency: String
            let paymentMethodType: String
        }
        return .json(200, Body(status: token.status, purchaseCurrency: token.currency, paymentMethodType: "INVOICE"))
    }

    struct ChargeBody: Decodable {
        let purchaseCurrency: String?
        let orderAmount: Int?
        let orderTaxAmount: Int?
        let orderLines: [SandboxOrderLine]?
        let merchantReference1: String?
    }

    /// Places an order with the token, unless the token is not active (`403`), the body lacks what the spec requires or
    /// does not add up (`400`), its currency is not the token's (`409`), or a decline was set for it.
    static func charge(
        _ token: SandboxState.CustomerToken, _ context: KlarnaCallContext, _ state: inout SandboxState
    ) throws(Rejection) -> SandboxResponse {
        let body = try KlarnaAPIHandlers.body(ChargeBody.self, context, what: "an order")
        try KlarnaAPIHandlers.requireFields([
            ("order_amount", body.orderAmount), ("order_tax_amount", body.orderTaxAmount), ("order_lines", body.orderLines),
            ("purchase_currency", body.purchaseCurrency),
        ])
        guard token.status.uppercased() == "ACTIVE" else {
            throw Rejection(403, "TOKEN_NOT_ACTIVE", "The customer token is \(token.status.lowercased())")
        }
        guard body.purchaseCurrency == token.currency else {
            throw Rejection(409, "BAD_VALUE", "Provided purchase_currency does not match the session")
        }
        guard let amount = body.orderAmount, amount > 0, body.orderLines.flatMap({ SandboxOrderLine.total($0) }) == amount else {
            throw Rejection(400, "BAD_VALUE", "order_lines do not add up to order_amount")
        }
        if let decline = state.customerTokens[token.id]?.declines.first {
            state.customerTokens[token.id]?.declines.removeFirst()
            switch decline {
            case .forbidden: throw Rejection(403, "NOT_AUTHORIZED", "Not authorized")
            case .rejected:
                struct Declined: Encodable {
                    let errorCode: String
                    let errorMessages: [String]
                    let correlationId: String
                    let fraudStatus: String
                    let reason: String
                }
                return .json(
                    400,
                    Declined(
                        errorCode: "PURCHASE_DECLINED", errorMessages: ["The purchase was declined"], correlationId: UUID().uuidString.lowercased(),
                        fraudStatus: "REJECTED", reason: "DECLINED_BY_RISK"))
            }
        }
        var order = SandboxState.Order(
            id: UUID().uuidString.lowercased(), merchant: token.merchant, kpSessionID: token.kpSessionID,
            klarnaReference: SandboxState.klarnaReference(),
            currency: token.currency, merchantReference: body.merchantReference1, orderAmount: amount, fraudStatus: token.fraudStatus,
            createdAt: context.now, expiresAt: context.now.addingTimeInterval(28 * 86_400))
        order.fraudDecisionAt = nil
        state.orders[order.id] = order
        context.effect(.tokenCharged, in: &state, order: order.id, amount: amount, token: token.id)
        struct Body: Encodable {
            let orderId: String
            let fraudStatus: String
            let authorizedPaymentMethod: [String: String]
        }
        return .json(200, Body(orderId: order.id, fraudStatus: order.fraudStatus, authorizedPaymentMethod: ["type": "invoice"]))
    }

    /// `{"status": "CANCELLED"}` only; `202`.
    static func updateStatus(
        _ token: SandboxState.CustomerToken, _ context: KlarnaCallContext, _ state: inout SandboxState
    ) throws(Rejection) -> SandboxResponse {
        struct Body: Decodable { let status: String? }
        let body = try KlarnaAPIHandlers.body(Body.self, context, what: "a status update")
        guard body.status == "CANCELLED" else { throw Rejection(400, "BAD_VALUE", "status must be CANCELLED") }
        if token.status.uppercased() != "CANCELLED" {
            state.customerTokens[token.id]?.status = "CANCELLED"
            context.effect(.customerTokenCancelled, in: &state, token: token.id)
        }
        return SandboxResponse(status: 202, headers: [])
    }
}

extension KlarnaSandbox {
    /// A customer token of `merchant` (the primary one by default) in `currency`, as a tokenize session would have
    /// made it: for tests and the demo that charge renewals without a checkout first.
    public func createCustomerToken(currency: String = "SEK", merchant: String? = nil) throws -> String {
        let merchant = try merchantID(merchant)
        let id = UUID().uuidString.lowercased()
        state.withLock { state in
            state.customerTokens[id] = SandboxState.CustomerToken(
                id: id, merchant: merchant, kpSessionID: UUID().uuidString.lowercased(), currency: currency)
        }
        return id
    }

    /// Sets the token's status as Klarna would show it (`CANCELLED`, `SUSPENDED`, any text).
    public func setCustomerTokenStatus(_ id: String, _ status: String) throws {
        try state.withLock { state in
            guard state.customerTokens[id] != nil else { throw ControlError(status: 404, description: "no customer token \(id)") }
            state.customerTokens[id]?.status = status
        }
    }

    /// The token's next charges are declined, one per entry, in order.
    public func declineCharges(of id: String, _ declines: [SandboxChargeDecline]) throws {
        try state.withLock { state in
            guard state.customerTokens[id] != nil else { throw ControlError(status: 404, description: "no customer token \(id)") }
            state.customerTokens[id]?.declines += declines
        }
    }

    /// The fraud status the token's next orders get (`PENDING`: decided later with ``setFraudStatus(orderID:_:)``).
    public func setChargeFraudStatus(of id: String, _ status: String) throws {
        try state.withLock { state in
            guard state.customerTokens[id] != nil else { throw ControlError(status: 404, description: "no customer token \(id)") }
            state.customerTokens[id]?.fraudStatus = status
        }
    }

    /// The control API's routes for customer tokens (`/_sandbox/customer-tokens…`).
    func customerTokenControl(_ request: ServerRequest, match: (String, String) -> [String]?) throws -> SandboxResponse? {
        if match("POST", "customer-tokens") != nil {
            struct Body: Decodable {
                let currency: String?
                let merchant: String?
            }
            struct Created: Encodable { let tokenId: String }
            let body = try decode(Body.self, request, empty: Body(currency: nil, merchant: nil))
            return .json(201, Created(tokenId: try createCustomerToken(currency: body.currency ?? "SEK", merchant: body.merchant)))
        } else if let ids = match("POST", "customer-tokens/*/status") {
            struct Body: Decodable { let status: String }
            try setCustomerTokenStatus(ids[0], try decode(Body.self, request).status)
            return .noContent()
        } else if let ids = match("POST", "customer-tokens/*/declines") {
            struct Body: Decodable { let declines: [SandboxChargeDecline] }
            try declineCharges(of: ids[0], try decode(Body.self, request).declines)
            return .noContent()
        } else if let ids = match("POST", "customer-tokens/*/fraud-status") {
            struct Body: Decodable { let fraudStatus: String }
            try setChargeFraudStatus(of: ids[0], try decode(Body.self, request).fraudStatus)
            return .noContent()
        }
        return nil
    }
}
