import Crypto
import Foundation
import HTTPServer

/// A dispute as a test sees it.
public struct SandboxDispute: Codable, Sendable, Equatable {
    public var paymentDisputeId: String
    public var orderId: String
    public var state: String
    public var reason: String
    public var amount: Int
    /// The response deadline while INITIATED; the appeal deadline while PRE_ARBITRATION.
    public var deadline: Date?
    public var outcome: String?
}

/// A webhook Klarna would have delivered, signed as Klarna Network signs (HMAC-SHA256 of the body, hex, under the key
/// `Klarna-Signing-Key-Id` names), for a test or the demo to hand to the daemon as a forwarder would.
public struct SandboxWebhook: Codable, Sendable, Equatable {
    public var seq: Int
    public var eventType: String
    public var body: String
    public var signature: String
    public var signingKeyId: String
}

/// Disputes by hand: what the customer and Klarna do (open, extend, decide), and the webhooks Klarna sent. The
/// merchant's side is the API (`/v4/payment/disputes…`).
extension KlarnaSandbox {
    /// A customer disputes `amount` (default: captured and not refunded) of `order`; `respondWithin`: the response
    /// deadline from now, else Klarna's by reason.
    @discardableResult
    public func openDispute(
        order: String, reason: String = "PRODUCTS_OR_SERVICES_NOT_RECEIVED", amount: Int? = nil, holdPolicy: String? = nil,
        respondWithin: Duration? = nil
    ) throws -> SandboxDispute {
        try disputeChange { state, now throws(Rejection) in
            try state.openDispute(
                order: order, reason: reason, amount: amount, holdPolicy: holdPolicy, respondWithin: respondWithin?.timeInterval, at: now
            ).id
        }
    }

    /// Klarna moves the response deadline of an INITIATED dispute to `until`.
    @discardableResult
    public func extendDispute(_ id: String, until: Date) throws -> SandboxDispute {
        try disputeChange { state, now throws(Rejection) in
            try state.extendDispute(id, until: until, at: now)
            return id
        }
    }

    /// Klarna decides (`WON` or `LOST`) on the evidence or the appeal.
    @discardableResult
    public func decideDispute(_ id: String, outcome: String) throws -> SandboxDispute {
        try disputeChange { state, now throws(Rejection) in
            try state.decideDispute(id, outcome: outcome, at: now)
            return id
        }
    }

    /// The dispute now (deadlines passed are applied first).
    public func dispute(_ id: String) -> SandboxDispute? {
        let now = self.now
        return state.withLock { state in
            state.catchUpDisputes(now: now)
            return state.disputes[id].map(Self.summary)
        }
    }

    /// The dispute webhooks after `seq`, oldest first, signed with ``Configuration/webhookSigningKey``.
    public func webhooks(after seq: Int = 0) -> [SandboxWebhook] {
        let now = self.now
        let key = configuration.webhookSigningKey
        return state.withLock { state in
            state.catchUpDisputes(now: now)
            return state.webhooks.filter { $0.seq > seq }.map { webhook in
                let mac = HMAC<SHA256>.authenticationCode(for: webhook.body, using: SymmetricKey(data: Array(key.secret.utf8)))
                return SandboxWebhook(
                    seq: webhook.seq, eventType: webhook.eventType, body: String(decoding: webhook.body, as: UTF8.self),
                    signature: mac.map { String(format: "%02x", $0) }.joined(), signingKeyId: key.id)
            }
        }
    }

    private static func summary(_ dispute: SandboxState.Dispute) -> SandboxDispute {
        SandboxDispute(
            paymentDisputeId: dispute.id, orderId: dispute.orderID, state: dispute.state, reason: dispute.reason, amount: dispute.amount,
            deadline: dispute.state == "INITIATED"
                ? dispute.representmentExpiresAt : dispute.state == "PRE_ARBITRATION" ? dispute.arbitrationExpiresAt : nil,
            outcome: dispute.outcome)
    }

    private func disputeChange(_ change: (inout SandboxState, Date) throws(Rejection) -> String) throws -> SandboxDispute {
        let now = self.now
        return try state.withLock { state in
            state.catchUpDisputes(now: now)
            do throws(Rejection) {
                let id = try change(&state, now)
                return Self.summary(state.disputes[id]!)
            } catch {
                throw ControlError(error)
            }
        }
    }

    /// `/_sandbox/disputes…` and `/_sandbox/webhooks`.
    func disputeControl(_ request: ServerRequest, match: (String, String) -> [String]?) throws -> SandboxResponse? {
        if match("POST", "disputes") != nil {
            struct Body: Decodable {
                let orderId: String
                let reason: String?
                let amount: Int?
                let holdPolicy: String?
                let respondWithinSeconds: Double?
            }
            let body = try decode(Body.self, request)
            return .json(
                201,
                try openDispute(
                    order: body.orderId, reason: body.reason ?? "PRODUCTS_OR_SERVICES_NOT_RECEIVED", amount: body.amount, holdPolicy: body.holdPolicy,
                    respondWithin: body.respondWithinSeconds.map { Duration(timeInterval: $0) }))
        } else if let ids = match("POST", "disputes/*/extend") {
            struct Body: Decodable { let until: Date }
            return .json(200, try extendDispute(ids[0], until: try decode(Body.self, request).until))
        } else if let ids = match("POST", "disputes/*/decide") {
            struct Body: Decodable { let outcome: String }
            return .json(200, try decideDispute(ids[0], outcome: try decode(Body.self, request).outcome))
        } else if match("GET", "webhooks") != nil {
            struct Body: Encodable { let webhooks: [SandboxWebhook] }
            return .json(200, Body(webhooks: webhooks(after: Int(request.query["after"] ?? "0") ?? 0)))
        }
        return nil
    }
}
