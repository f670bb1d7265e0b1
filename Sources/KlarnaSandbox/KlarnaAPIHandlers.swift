import Foundation
import HTTPServer

struct KlarnaCallContext {
    let request: ServerRequest
    /// The caller's merchant id: list routes show only its resources.
    let merchant: String
    let idempotencyKey: String?
    let seq: Int
    let now: Date

    func effect(
        _ kind: SandboxEffect.Kind, in state: inout SandboxState, order: String? = nil, kp: String? = nil,
        hpp: String? = nil, amount: Int? = nil, capture: String? = nil, refund: String? = nil, token: String? = nil
    ) {
        state.record(
            SandboxEffect(
                seq: state.effects.count + 1, at: now, kind: kind, requestSeq: seq, orderId: order, kpSessionId: kp,
                hppSessionId: hpp, amount: amount, captureId: capture, refundId: refund, tokenId: token,
                idempotencyKey: idempotencyKey))
    }
}

/// Klarna refusing a call; handlers throw it so each check is one line and the answer is Klarna's error.
struct Rejection: Error {
    let response: SandboxResponse
    let code: String
    let message: String

    init(_ status: Int, _ code: String, _ message: String) {
        response = .klarnaError(status, code, message)
        self.code = code
        self.message = message
    }
}

/// Klarna's behaviour per endpoint, following Klarna's API reference (HPP, KP, OM, Klarna Network) and its OpenAPI specs.
enum KlarnaAPIHandlers {
    static func handle(_ route: KlarnaRoute, context: inout KlarnaCallContext, state: inout SandboxState) -> SandboxResponse {
        do {
            let response = try dispatch(route, context: &context, state: &state)
            return state.responseShape.shape(response, route: route.name)
        } catch {
            return error.response
        }
    }

    private static func dispatch(
        _ route: KlarnaRoute, context: inout KlarnaCallContext, state: inout SandboxState
    ) throws(Rejection) -> SandboxResponse {
        let id = route.parameters.first ?? ""
        switch route.name {
        case "hpp.read_session": return readHPP(id, context, &state)
        case "hpp.disable_session": return disableHPP(id, context, &state)
        case "kp.read_session": return readKP(id, context, &state)
        case "kp.create_order": return try createOrder(token: id, context, &state)
        case "kp.cancel_authorization": return try cancelAuthorization(token: id, context, &state)
        case "kp.create_customer_token": return try createCustomerToken(token: id, context, &state)
        case let name where name.hasPrefix("ct."): return try CustomerTokenHandlers.handle(route, context, &state)
        case "om.read_order": return readOrder(id, context, &state)
        case "om.create_capture": return try createCapture(order: id, context, &state)
        case "om.create_refund": return try createRefund(order: id, context, &state)
        case "om.extend_authorization_time": return extendAuthorization(order: id, context, &state)
        case "om.cancel_order": return cancelOrder(order: id, context, &state)
        case "om.release_remaining_authorization": return releaseRemaining(order: id, context, &state)
        case "kn.read_payment_request": return readPaymentRequest(id, context, &state)
        case let name where name.hasPrefix("settlements."): return try SettlementHandlers.handle(route, context, &state)
        case let name where name.hasPrefix("disputes."): return DisputeHandlers.handle(route, context, &state)
        default: return .klarnaError(404, "NOT_FOUND", "No such resource")
        }
    }

    // MARK: HPP

    struct HPPBody: Encodable {
        let sessionId: String
        let status: String
        let updatedAt: Date
        let expiresAt: Date
        let authorizationToken: String?
        let orderId: String?
        let klarnaReference: String?
    }

    static func hppBody(_ session: SandboxState.HostedSession, _ state: SandboxState) -> HPPBody {
        let completedWithToken = session.status == "COMPLETED" && session.orderID == nil
        return HPPBody(
            sessionId: session.id, status: session.status, updatedAt: session.updatedAt, expiresAt: session.expiresAt,
            authorizationToken: completedWithToken ? state.paymentSessions[session.kpSessionID]?.authorizationToken : nil,
            orderId: session.orderID, klarnaReference: session.klarnaReference)
    }

    static func liveHPP(_ id: String, _ context: KlarnaCallContext, _ state: inout SandboxState) -> SandboxState.HostedSession? {
        state.catchUp(hpp: id, now: context.now)
        guard let session = state.hostedSessions[id], session.expiresAt > context.now else { return nil }
        return session
    }

    static let hppNotFound = SandboxResponse.klarnaError(404, "NOT_FOUND", "HPP session has expired or could not be found by provided id.")

    static func readHPP(_ id: String, _ context: KlarnaCallContext, _ state: inout SandboxState) -> SandboxResponse {
        guard let session = liveHPP(id, context, &state) else { return hppNotFound }
        return .json(200, hppBody(session, state))
    }

    static func disableHPP(_ id: String, _ context: KlarnaCallContext, _ state: inout SandboxState) -> SandboxResponse {
        guard let session = liveHPP(id, context, &state) else { return hppNotFound }
        if session.status == "COMPLETED" {
            return .klarnaError(400, "BAD_VALUE", "HPP session has already been successfully completed.")
        }
        if session.status != "DISABLED" {
            state.hostedSessions[id]?.schedule = []
            state.transition(hpp: id, to: "DISABLED", at: context.now)
            context.effect(.hppDisabled, in: &state, kp: session.kpSessionID, hpp: id)
        }
        return .noContent()
    }

    // MARK: KP

    struct KPBody: Encodable {
        let status: String
        let purchaseCountry: String
        let purchaseCurrency: String
        let locale: String
        let orderAmount: Int
        let orderTaxAmount: Int
        let orderLines: [SandboxOrderLine]
        let expiresAt: Date
        let authorizationToken: String?
        let merchantReference1: String?
        let intent: String
    }

    static func readKP(_ id: String, _ context: KlarnaCallContext, _ state: inout SandboxState) -> SandboxResponse {
        for hpp in state.paymentSessions[id]?.hppSessionIDs ?? [] { state.catchUp(hpp: hpp, now: context.now) }
        guard let session = state.paymentSessions[id], session.expiresAt > context.now else { return kpNotFound }
        return .json(
            200,
            KPBody(
                status: session.complete ? "complete" : "incomplete", purchaseCountry: session.purchaseCountry,
                purchaseCurrency: session.purchaseCurrency, locale: session.locale, orderAmount: session.orderAmount,
                orderTaxAmount: session.orderTaxAmount, orderLines: session.orderLines, expiresAt: session.expiresAt,
                authorizationToken: session.authorizationToken, merchantReference1: session.merchantReference,
                intent: session.intent))
    }

    static var kpNotFound: SandboxResponse { .klarnaError(404, "NOT_FOUND", "The session does not exist") }

    static var invalidToken: Rejection { Rejection(404, "NOT_FOUND", "Invalid authorization token") }

    /// The KP session an authorization token belongs to, while the token is known, not cancelled and younger than
    /// 60 minutes.
    static func authorizedSession(
        _ token: String, _ context: KlarnaCallContext, _ state: SandboxState
    ) throws(Rejection) -> SandboxState.PaymentSession {
        guard let kpID = state.tokens[token], let session = state.paymentSessions[kpID], !session.tokenCancelled,
            let expiry = session.tokenExpiresAt, expiry > context.now
        else { throw invalidToken }
        return session
    }

    /// The request body as `T`, or Klarna's 400 naming what it should have been.
    static func body<T: Decodable>(_ type: T.Type, _ context: KlarnaCallContext, what: String) throws(Rejection) -> T {
        do {
            return try SandboxResponse.decoder.decode(type, from: Data(context.request.body))
        } catch {
            throw Rejection(400, "BAD_VALUE", "The request body is not valid JSON for \(what)")
        }
    }

    /// Klarna's 400 for required fields a request left out.
    static func requireFields(_ fields: [(name: String, value: (any Sendable)?)]) throws(Rejection) {
        let missing = fields.filter { $0.value == nil }.map(\.name)
        if !missing.isEmpty { throw Rejection(400, "BAD_VALUE", "Missing required fields: [\(missing.joined(separator: ", "))]") }
    }

    struct CreateOrderBody: Decodable {
        let purchaseCountry: String?
        let purchaseCurrency: String?
        let orderAmount: Int?
        let orderTaxAmount: Int?
        let orderLines: [SandboxOrderLine]?
        let merchantReference1: String?
        let autoCapture: Bool?
    }

    static func createOrder(token: String, _ context: KlarnaCallContext, _ state: inout SandboxState) throws(Rejection) -> SandboxResponse {
        var session = try authorizedSession(token, context, state)
        if session.complete { throw Rejection(404, "SESSION_COMPLETED", "An order has already been placed for this session") }
        if session.intent == "tokenize" { throw Rejection(403, "INVALID_OPERATION", "The session intent does not allow placing an order") }
        let body = try body(CreateOrderBody.self, context, what: "an order")
        try requireFields([
            ("purchase_country", body.purchaseCountry), ("purchase_currency", body.purchaseCurrency),
            ("order_amount", body.orderAmount), ("order_lines", body.orderLines),
        ])
        let mismatched = [
            body.orderAmount != session.orderAmount ? "order_amount" : nil,
            body.purchaseCurrency != session.purchaseCurrency ? "purchase_currency" : nil,
            body.purchaseCountry?.uppercased() != session.purchaseCountry.uppercased() ? "purchase_country" : nil,
            body.orderLines.flatMap { SandboxOrderLine.total($0) } != session.orderAmount ? "order_lines" : nil,
        ].compactMap { $0 }
        if !mismatched.isEmpty { throw Rejection(409, "BAD_VALUE", "Not matching fields: [\(mismatched.joined(separator: ", "))]") }

        let order = state.placeOrder(for: &session, at: context.now, capture: body.autoCapture ?? false)
        state.paymentSessions[session.id] = session
        context.effect(.orderPlaced, in: &state, order: order.id, kp: session.id, amount: order.orderAmount)
        struct Body: Encodable {
            let orderId: String
            let redirectUrl: String
            let fraudStatus: String
            let authorizedPaymentMethod: [String: String]
        }
        return .json(
            200,
            Body(
                orderId: order.id, redirectUrl: "https://payments.klarna.com/redirect/\(order.id)",
                fraudStatus: order.fraudStatus, authorizedPaymentMethod: ["type": "invoice"]))
    }

    static func cancelAuthorization(token: String, _ context: KlarnaCallContext, _ state: inout SandboxState) throws(Rejection) -> SandboxResponse {
        let session = try authorizedSession(token, context, state)
        if session.complete { throw Rejection(403, "INVALID_OPERATION", "The authorization has been used to place an order") }
        state.paymentSessions[session.id]?.tokenCancelled = true
        context.effect(.authorizationCancelled, in: &state, kp: session.id)
        return .noContent()
    }

    struct CustomerTokenBody: Decodable {
        let purchaseCountry: String?
        let purchaseCurrency: String?
        let locale: String?
        let description: String?
        let intendedUse: String?
    }

    static func createCustomerToken(token: String, _ context: KlarnaCallContext, _ state: inout SandboxState) throws(Rejection) -> SandboxResponse {
        let session = try authorizedSession(token, context, state)
        if session.intent == "buy" { throw Rejection(403, "INVALID_OPERATION", "The session intent does not allow tokenization") }
        let body = try body(CustomerTokenBody.self, context, what: "a customer token")
        try requireFields([
            ("purchase_country", body.purchaseCountry), ("purchase_currency", body.purchaseCurrency),
            ("locale", body.locale), ("description", body.description), ("intended_use", body.intendedUse),
        ])
        let tokenID = UUID().uuidString.lowercased()
        state.customerTokens[tokenID] = SandboxState.CustomerToken(
            id: tokenID, merchant: session.merchant, kpSessionID: session.id, currency: body.purchaseCurrency ?? session.purchaseCurrency)
        context.effect(.customerTokenCreated, in: &state, kp: session.id, token: tokenID)
        struct Body: Encodable {
            let tokenId: String
            let redirectUrl: String
        }
        return .json(200, Body(tokenId: tokenID, redirectUrl: "https://payments.klarna.com/redirect/token/\(tokenID)"))
    }

    // MARK: OM

    struct OrderBody: Encodable {
        struct CaptureBody: Encodable {
            let captureId: String
            let capturedAmount: Int
            let capturedAt: Date
            let reference: String?
        }

        struct RefundBody: Encodable {
            let refundId: String
            let refundedAmount: Int
            let refundedAt: Date
            let reference: String?
        }

        let orderId: String
        let status: String
        let fraudStatus: String
        let orderAmount: Int
        let originalOrderAmount: Int
        let capturedAmount: Int
        let refundedAmount: Int
        let remainingAuthorizedAmount: Int
        let purchaseCurrency: String
        let expiresAt: Date
        let createdAt: Date
        let klarnaReference: String
        let merchantReference1: String?
        let captures: [CaptureBody]
        let refunds: [RefundBody]
    }

    static let noSuchOrder = SandboxResponse.klarnaError(404, "NO_SUCH_ORDER", "The order does not exist")

    static func readOrder(_ id: String, _ context: KlarnaCallContext, _ state: inout SandboxState) -> SandboxResponse {
        state.catchUp(order: id, now: context.now)
        guard let order = state.orders[id] else { return noSuchOrder }
        return .json(
            200,
            OrderBody(
                orderId: order.id, status: order.status, fraudStatus: order.fraudStatus, orderAmount: order.orderAmount,
                originalOrderAmount: order.orderAmount, capturedAmount: order.capturedAmount, refundedAmount: order.refundedAmount,
                remainingAuthorizedAmount: order.remainingAuthorizedAmount, purchaseCurrency: order.currency,
                expiresAt: order.expiresAt, createdAt: order.createdAt, klarnaReference: order.klarnaReference,
                merchantReference1: order.merchantReference,
                captures: order.captures.map {
                    .init(captureId: $0.id, capturedAmount: $0.amount, capturedAt: $0.at, reference: $0.reference)
                },
                refunds: order.refunds.map {
                    .init(refundId: $0.id, refundedAmount: $0.amount, refundedAt: $0.at, reference: $0.reference)
                }))
    }

    struct CaptureRequestBody: Decodable {
        let capturedAmount: Int?
        let reference: String?
    }

    static func createCapture(order id: String, _ context: KlarnaCallContext, _ state: inout SandboxState) throws(Rejection) -> SandboxResponse {
        state.catchUp(order: id, now: context.now)
        guard state.orders[id] != nil else { return noSuchOrder }
        guard let body = try? SandboxResponse.decoder.decode(CaptureRequestBody.self, from: Data(context.request.body)),
            let amount = body.capturedAmount
        else { return .klarnaError(400, "BAD_VALUE", "captured_amount is required") }
        let capture = try state.capture(order: id, amount: amount, reference: body.reference, at: context.now)
        context.effect(.captured, in: &state, order: id, amount: amount, capture: capture.id)
        return created("Capture-Id", capture.id, at: "orders/\(id)/captures", context)
    }

    /// OM's answer to a capture or refund: `201`, the new id in its own header, and where it can be read.
    private static func created(_ header: String, _ id: String, at collection: String, _ context: KlarnaCallContext) -> SandboxResponse {
        let host = context.request.header("Host") ?? "localhost"
        return SandboxResponse(status: 201, headers: [(header, id), ("Location", "http://\(host)/ordermanagement/v1/\(collection)/\(id)")])
    }

    struct RefundRequestBody: Decodable {
        let refundedAmount: Int?
        let reference: String?
    }

    /// Refunds captured money; what the order shows as `refunded_amount` and `refunds`, and settlements as a RETURN.
    static func createRefund(order id: String, _ context: KlarnaCallContext, _ state: inout SandboxState) throws(Rejection) -> SandboxResponse {
        state.catchUp(order: id, now: context.now)
        guard state.orders[id] != nil else { return noSuchOrder }
        guard let body = try? SandboxResponse.decoder.decode(RefundRequestBody.self, from: Data(context.request.body)),
            let amount = body.refundedAmount
        else { return .klarnaError(400, "BAD_VALUE", "refunded_amount is required") }
        let refund = try state.refund(order: id, amount: amount, reference: body.reference, at: context.now)
        context.effect(.refunded, in: &state, order: id, amount: amount, refund: refund.id)
        return created("Refund-Id", refund.id, at: "orders/\(id)/refunds", context)
    }

    static func extendAuthorization(order id: String, _ context: KlarnaCallContext, _ state: inout SandboxState) -> SandboxResponse {
        state.catchUp(order: id, now: context.now)
        guard var order = state.orders[id] else { return noSuchOrder }
        guard order.status == "AUTHORIZED" || order.status == "PART_CAPTURED" else {
            return .klarnaError(403, "NOT_ALLOWED", "The order is \(order.status.lowercased()); its authorization cannot be extended")
        }
        // Account default expiry from now, never beyond 180 days after creation (Klarna's Order Management docs, extend authorization time).
        let limit = order.createdAt.addingTimeInterval(180 * 86_400)
        order.expiresAt = min(limit, max(order.expiresAt, context.now.addingTimeInterval(28 * 86_400)))
        state.orders[id] = order
        context.effect(.authorizationExtended, in: &state, order: id)
        return .noContent()
    }

    static func cancelOrder(order id: String, _ context: KlarnaCallContext, _ state: inout SandboxState) -> SandboxResponse {
        state.catchUp(order: id, now: context.now)
        guard let order = state.orders[id] else { return noSuchOrder }
        if !order.captures.isEmpty { return .klarnaError(403, "CANCEL_NOT_ALLOWED", "Order has previous captures. Cancel not possible") }
        guard order.status == "AUTHORIZED" else { return .klarnaError(403, "NOT_ALLOWED", "The order is \(order.status.lowercased())") }
        state.orders[id]?.status = "CANCELLED"
        context.effect(.orderCancelled, in: &state, order: id)
        return .noContent()
    }

    /// After a partial capture: nothing more can be captured, and the order is final with what was.
    static func releaseRemaining(order id: String, _ context: KlarnaCallContext, _ state: inout SandboxState) -> SandboxResponse {
        state.catchUp(order: id, now: context.now)
        guard let order = state.orders[id] else { return noSuchOrder }
        guard order.status == "PART_CAPTURED", !order.captures.isEmpty else {
            return .klarnaError(403, "NOT_ALLOWED", "The order is cancelled or has no captures")
        }
        state.orders[id]?.status = "CLOSED"
        state.orders[id]?.released = true
        context.effect(.remainingReleased, in: &state, order: id, amount: order.orderAmount - order.capturedAmount)
        return .noContent()
    }

    // MARK: Klarna Network

    static var paymentRequestNotFound: SandboxResponse {
        struct NotFound: Encodable {
            let errorId: String
            let errorType: String
            let errorCode: String
            let errorMessage: String
        }
        return .json(
            404,
            NotFound(
                errorId: UUID().uuidString.lowercased(), errorType: "RESOURCE_ERROR", errorCode: "NOT_FOUND",
                errorMessage: "The payment request does not exist"))
    }

    static func readPaymentRequest(_ id: String, _ context: KlarnaCallContext, _ state: inout SandboxState) -> SandboxResponse {
        guard var request = state.paymentRequests[id] else { return paymentRequestNotFound }
        if request.expiresAt <= context.now, ["SUBMITTED", "IN_PROGRESS"].contains(request.state) {
            request.state = "EXPIRED"
            request.updatedAt = request.expiresAt
            state.paymentRequests[id] = request
        }
        struct Body: Encodable {
            let paymentRequestId: String
            let state: String
            let stateReason: String?
            let expiresAt: Date
            let createdAt: Date
            let updatedAt: Date
            let stateContext: [String: String]?
        }
        return .json(
            200,
            Body(
                paymentRequestId: request.id, state: request.state, stateReason: request.stateReason,
                expiresAt: request.expiresAt, createdAt: request.createdAt, updatedAt: request.updatedAt,
                stateContext: request.sessionToken.map { ["klarna_network_session_token": $0] }))
    }
}
