import Foundation
import HTTPServer
import ReconcilerCore

/// Scenario, clock and fault controls. The same operations serve in-process tests (Swift) and separate processes
/// (`/_sandbox/…` over HTTP, unauthenticated: the sandbox binds loopback and holds no real money).
extension KlarnaSandbox {
    public struct ControlError: Error, CustomStringConvertible {
        public let status: Int
        public let description: String
    }

    /// Creates a KP session and an HPP session for it, of `spec.merchant`; the HPP session then follows `spec.schedule`.
    @discardableResult
    public func createSession(_ spec: SessionSpec = SessionSpec()) throws -> CreatedSession {
        let merchant = try merchantID(spec.merchant)
        let mode = spec.placeOrderMode ?? "NONE"
        guard ["NONE", "PLACE_ORDER", "CAPTURE_ORDER"].contains(mode) else {
            throw ControlError(status: 400, description: "place_order_mode must be NONE, PLACE_ORDER or CAPTURE_ORDER")
        }
        // Bounded, as every amount a control takes is (SandboxSettlementControl.swift): captures and refunds are at
        // most the order's amount, so the sums a payout makes of them cannot overflow.
        let amount: Int
        if let given = spec.orderAmount {
            amount = given
        } else if let lines = spec.orderLines {
            guard let total = SandboxOrderLine.total(lines) else {
                throw ControlError(status: 400, description: "order_lines' total_amount must add up to from 1 to \(Self.maximumAmount)")
            }
            amount = total
        } else {
            amount = 10_000
        }
        try Self.require(
            spec.orderAmount == nil && spec.orderLines != nil ? "order_lines' total_amount sum" : "order_amount", amount, in: Self.amounts)
        let lines =
            spec.orderLines ?? [
                SandboxOrderLine(name: "Sandbox item", quantity: 1, unitPrice: amount, totalAmount: amount, taxRate: 0, totalTaxAmount: 0)
            ]
        let now = self.now
        let kpID = UUID().uuidString.lowercased()
        let hppID = UUID().uuidString.lowercased()
        let fraudDecision = spec.fraudDecisionAfterSeconds.map { (after: $0, status: spec.fraudDecision ?? "ACCEPTED") }
        let payment = SandboxState.PaymentSession(
            id: kpID, merchant: merchant, purchaseCountry: spec.purchaseCountry ?? "SE", purchaseCurrency: spec.purchaseCurrency ?? "SEK",
            locale: spec.locale ?? "sv-SE", orderAmount: amount, orderTaxAmount: spec.orderTaxAmount ?? 0,
            orderLines: lines, merchantReference: spec.merchantReference, intent: spec.intent ?? "buy", createdAt: now,
            expiresAt: now.addingTimeInterval(48 * 3_600), hppSessionIDs: [hppID],
            fraudStatus: spec.fraudStatus ?? "ACCEPTED", fraudDecision: fraudDecision)
        // Klarna: the HPP session expires one hour before its payment session.
        let hpp = SandboxState.HostedSession(
            id: hppID, merchant: merchant, kpSessionID: kpID, mode: mode, updatedAt: now,
            expiresAt: spec.hppExpiresAfterSeconds.map { now.addingTimeInterval($0) } ?? payment.expiresAt.addingTimeInterval(-3_600),
            schedule: (spec.schedule ?? []).map { (at: now.addingTimeInterval($0.afterSeconds), status: $0.status) })
        state.withLock { state in
            state.paymentSessions[kpID] = payment
            state.hostedSessions[hppID] = hpp
        }
        return CreatedSession(kpSessionId: kpID, hppSessionId: hppID, expiresAt: hpp.expiresAt)
    }

    /// Enforces Klarna's per-merchant rate limit: `perSecond` calls a second with as many saved up, and a 429 with
    /// `X-Ratelimit-*` headers past it (`nil`: no limit, the default). On `merchant` only, or on every merchant, each
    /// with its own budget; `merchant` must be one the sandbox serves.
    public func setRateLimit(perSecond: Double?, merchant: String? = nil) {
        precondition(merchant.map { merchantIDs.contains($0) } ?? true, "setRateLimit: the sandbox serves no merchant \(merchant ?? "")")
        let now = self.now
        state.withLock { state in
            for id in merchant.map({ [$0] }) ?? merchantIDs {
                state.rateLimits[id] = perSecond.map { RateBudget(ratePerSecond: $0, burst: max(1, $0), now: now) }
            }
        }
    }

    /// Moves an HPP session to `status` now, as the consumer would.
    public func setHPPStatus(_ id: String, _ status: String) throws {
        try state.withLock { state in
            guard state.hostedSessions[id] != nil else { throw ControlError(status: 404, description: "no HPP session \(id)") }
            state.catchUp(hpp: id, now: now)
            state.transition(hpp: id, to: status, at: now)
        }
    }

    /// Replaces the HPP session's remaining schedule; times are relative to now.
    public func setSchedule(_ id: String, _ steps: [ScheduleStep]) throws {
        let now = self.now
        try state.withLock { state in
            guard state.hostedSessions[id] != nil else { throw ControlError(status: 404, description: "no HPP session \(id)") }
            state.hostedSessions[id]?.schedule = steps.map { (at: now.addingTimeInterval($0.afterSeconds), status: $0.status) }
        }
    }

    public enum Expirable: String, Codable, Sendable {
        case authorizationToken = "authorization_token", hppSession = "hpp_session", kpSession = "kp_session", order
    }

    /// Makes something expire now instead of when Klarna's lifetime says.
    public func expire(_ kind: Expirable, id: String) throws {
        let now = self.now
        try state.withLock { state in
            switch kind {
            case .authorizationToken:
                guard let kp = state.tokens[id] else { throw ControlError(status: 404, description: "no authorization token \(id)") }
                state.paymentSessions[kp]?.tokenExpiresAt = now
            case .hppSession:
                guard state.hostedSessions[id] != nil else { throw ControlError(status: 404, description: "no HPP session \(id)") }
                state.hostedSessions[id]?.expiresAt = now
            case .kpSession:
                guard state.paymentSessions[id] != nil else { throw ControlError(status: 404, description: "no KP session \(id)") }
                state.paymentSessions[id]?.expiresAt = now
            case .order:
                guard state.orders[id] != nil else { throw ControlError(status: 404, description: "no order \(id)") }
                state.orders[id]?.expiresAt = now
            }
        }
    }

    /// Klarna's fraud decision on a pending order.
    public func setFraudStatus(orderID: String, _ status: String) throws {
        try state.withLock { state in
            guard state.orders[orderID] != nil else { throw ControlError(status: 404, description: "no order \(orderID)") }
            state.orders[orderID]?.fraudStatus = status
            state.orders[orderID]?.fraudDecisionAt = nil
            if status == "REJECTED" { state.orders[orderID]?.status = "CANCELLED" }
        }
    }

    /// Captures on the order by hand in the Merchant Portal: the order changes as through the API, the capture has no
    /// reference, and the effect is `portal_captured` (with request seq 0) rather than `captured`. Returns the capture id.
    @discardableResult
    public func portalCapture(order id: String, amount: Int) throws -> String {
        try byHand(order: id) { state, now throws(Rejection) in
            let capture = try state.capture(order: id, amount: amount, reference: nil, at: now)
            state.recordPortalEffect(.portalCaptured, at: now, order: id, amount: amount, capture: capture.id)
            return capture.id
        }
    }

    /// Refunds on the order by hand in the Merchant Portal, like ``portalCapture(order:amount:)``: no reference, effect
    /// `portal_refunded`. Returns the refund id.
    @discardableResult
    public func portalRefund(order id: String, amount: Int) throws -> String {
        try byHand(order: id) { state, now throws(Rejection) in
            let refund = try state.refund(order: id, amount: amount, reference: nil, at: now)
            state.recordPortalEffect(.portalRefunded, at: now, order: id, amount: amount, refund: refund.id)
            return refund.id
        }
    }

    /// One change made by hand: the order caught up to now first, Klarna's refusal answered as a control error.
    private func byHand(order id: String, _ change: (inout SandboxState, Date) throws(Rejection) -> String) throws -> String {
        let now = self.now
        return try state.withLock { state in
            state.catchUp(order: id, now: now)
            do throws(Rejection) {
                return try change(&state, now)
            } catch {
                throw ControlError(error)
            }
        }
    }

    /// Creates a Klarna Network payment request in `state` (default `SUBMITTED`) of `merchant` (default the primary
    /// merchant), which must be one the sandbox serves.
    public func createPaymentRequest(state initial: String = "SUBMITTED", merchant: String? = nil) -> String {
        precondition(merchant.map { merchantIDs.contains($0) } ?? true, "createPaymentRequest: the sandbox serves no merchant \(merchant ?? "")")
        let owner = merchant ?? merchantIDs[0]
        let now = self.now
        let id = "krn:payment:eu1:request:\(UUID().uuidString.lowercased())"
        state.withLock { state in
            state.paymentRequests[id] = SandboxState.PaymentRequest(
                id: id, merchant: owner, state: initial, createdAt: now, updatedAt: now, expiresAt: now.addingTimeInterval(3 * 3_600),
                sessionToken: initial == "COMPLETED" ? "krn:network:eu1:session-token:\(UUID().uuidString.lowercased())" : nil)
        }
        return id
    }

    public func setPaymentRequestState(_ id: String, _ newState: String, reason: String? = nil) throws {
        let now = self.now
        try state.withLock { state in
            guard var request = state.paymentRequests[id] else { throw ControlError(status: 404, description: "no payment request \(id)") }
            request.state = newState
            request.stateReason = reason
            request.updatedAt = now
            if newState == "COMPLETED", request.sessionToken == nil {
                request.sessionToken = "krn:network:eu1:session-token:\(UUID().uuidString.lowercased())"
            }
            state.paymentRequests[id] = request
        }
    }

    @discardableResult
    public func addFault(_ fault: SandboxFault) -> Int {
        state.withLock { state in
            let id = state.nextFaultID
            state.nextFaultID += 1
            state.faults.append((id, fault))
            return id
        }
    }

    public func clearFaults() { state.withLock { $0.faults.removeAll() } }

    public func requests(route: String? = nil) -> [SandboxRequestRecord] {
        state.withLock { state in state.requests.filter { route == nil || $0.route == route } }
    }

    public func effects(kind: SandboxEffect.Kind? = nil) -> [SandboxEffect] {
        state.withLock { state in state.effects.filter { kind == nil || $0.kind == kind } }
    }

    /// How many effects of `kind` there are, without copying them: what a bench polls while the daemon it measures
    /// calls this sandbox (a copy of tens of thousands of effects every few milliseconds took a tenth of a core).
    public func effectCount(kind: SandboxEffect.Kind) -> Int {
        state.withLock { state in state.effectCounts[kind] ?? 0 }
    }

    /// The create-orders each authorization token received, by token; tests fail on any `overlapping`.
    public func createOrderCounts() -> [SandboxCreateOrderCount] {
        state.withLock { state in state.createOrders.values.sorted { $0.authorizationToken < $1.authorizationToken } }
    }

    /// Moves the sandbox clock forward; only an ``AdjustableClock`` or a ``ManualClock`` can be moved.
    public func advanceClock(by duration: Duration) throws {
        switch configuration.clock {
        case let clock as AdjustableClock: clock.advance(by: duration)
        case let clock as ManualClock: clock.advance(by: duration)
        default: throw ControlError(status: 409, description: "this sandbox's clock cannot be moved")
        }
    }

    /// Forgets every session, order, fault and log entry.
    public func reset() { state.withLock { $0 = SandboxState() } }

    // MARK: HTTP control API

    func control(_ request: ServerRequest) -> SandboxResponse {
        let parts = Array(request.path.split(separator: "/").map(String.init).dropFirst())  // drop "_sandbox"
        /// The `*` segments of `pattern` when method and path match it.
        func match(_ method: String, _ pattern: String) -> [String]? {
            let expected = pattern.split(separator: "/").map(String.init)
            guard request.method == method, expected.count == parts.count else { return nil }
            var ids: [String] = []
            for (want, have) in zip(expected, parts) {
                if want == "*" { ids.append(have) } else if want != have { return nil }
            }
            return ids
        }
        do {
            if match("POST", "sessions") != nil {
                return .json(201, try createSession(decode(SessionSpec.self, request, empty: SessionSpec())))
            } else if let ids = match("POST", "hpp-sessions/*/status") {
                struct Body: Decodable { let status: String }
                try setHPPStatus(ids[0], try decode(Body.self, request).status)
                return .noContent()
            } else if let ids = match("POST", "hpp-sessions/*/schedule") {
                struct Body: Decodable { let schedule: [ScheduleStep] }
                try setSchedule(ids[0], try decode(Body.self, request).schedule)
                return .noContent()
            } else if match("POST", "expire") != nil {
                struct Body: Decodable {
                    let kind: Expirable
                    let id: String
                }
                let body = try decode(Body.self, request)
                try expire(body.kind, id: body.id)
                return .noContent()
            } else if let ids = match("POST", "orders/*/fraud-status") {
                struct Body: Decodable { let fraudStatus: String }
                try setFraudStatus(orderID: ids[0], try decode(Body.self, request).fraudStatus)
                return .noContent()
            } else if let ids = match("POST", "orders/*/portal-capture") {
                struct Body: Decodable { let amount: Int }
                struct Created: Encodable { let captureId: String }
                return .json(201, Created(captureId: try portalCapture(order: ids[0], amount: try decode(Body.self, request).amount)))
            } else if let ids = match("POST", "orders/*/portal-refund") {
                struct Body: Decodable { let amount: Int }
                struct Created: Encodable { let refundId: String }
                return .json(201, Created(refundId: try portalRefund(order: ids[0], amount: try decode(Body.self, request).amount)))
            } else if match("POST", "payment-requests") != nil {
                struct Body: Decodable {
                    let state: String?
                    let merchant: String?
                }
                struct Created: Encodable { let paymentRequestId: String }
                let body = try decode(Body.self, request, empty: Body(state: nil, merchant: nil))
                let merchant = try merchantID(body.merchant)
                return .json(201, Created(paymentRequestId: createPaymentRequest(state: body.state ?? "SUBMITTED", merchant: merchant)))
            } else if let ids = match("POST", "payment-requests/*/state") {
                struct Body: Decodable {
                    let state: String
                    let stateReason: String?
                }
                let body = try decode(Body.self, request)
                try setPaymentRequestState(ids[0], body.state, reason: body.stateReason)
                return .noContent()
            } else if match("POST", "faults") != nil {
                struct Created: Encodable { let faultId: Int }
                return .json(201, Created(faultId: addFault(try decode(SandboxFault.self, request))))
            } else if match("DELETE", "faults") != nil {
                clearFaults()
                return .noContent()
            } else if match("GET", "requests") != nil {
                struct Body: Encodable { let requests: [SandboxRequestRecord] }
                return .json(200, Body(requests: requests(route: request.query["route"])))
            } else if match("GET", "effects") != nil {
                struct Body: Encodable { let effects: [SandboxEffect] }
                let kind = try request.query["kind"].map { value -> SandboxEffect.Kind in
                    guard let kind = SandboxEffect.Kind(rawValue: value) else {
                        throw ControlError(status: 400, description: "unknown effect kind \(value)")
                    }
                    return kind
                }
                return .json(200, Body(effects: effects(kind: kind)))
            } else if match("GET", "create-orders") != nil {
                struct Body: Encodable {
                    let createOrders: [SandboxCreateOrderCount]
                    /// Over every token: create-orders that met an earlier pending one for the same token.
                    let overlapping: Int
                }
                let counts = createOrderCounts()
                return .json(200, Body(createOrders: counts, overlapping: counts.reduce(0) { $0 + $1.overlapping }))
            } else if match("POST", "response-shape") != nil {
                struct Body: Decodable { let shape: SandboxResponseShape }
                setResponseShape(try decode(Body.self, request).shape)
                return .noContent()
            } else if match("POST", "clock/advance") != nil {
                struct Body: Decodable { let seconds: Double }
                try advanceClock(by: Duration(timeInterval: try decode(Body.self, request).seconds))
                return .noContent()
            } else if match("GET", "clock") != nil {
                struct Body: Encodable { let now: Date }
                return .json(200, Body(now: now))
            } else if match("POST", "reset") != nil {
                reset()
                return .noContent()
            } else if let response = try settlementControl(request, match: match) {
                return response
            } else if let response = try disputeControl(request, match: match) {
                return response
            } else if let response = try customerTokenControl(request, match: match) {
                return response
            }
            return .klarnaError(404, "NOT_FOUND", "No sandbox control at \(request.method) \(request.path)")
        } catch let error as ControlError {
            return .klarnaError(error.status, "BAD_VALUE", error.description)
        } catch {
            return .klarnaError(400, "BAD_VALUE", "\(error)")
        }
    }

    func decode<T: Decodable>(_ type: T.Type, _ request: ServerRequest, empty: T? = nil) throws -> T {
        if request.body.isEmpty, let empty { return empty }
        do {
            return try SandboxResponse.decoder.decode(type, from: Data(request.body))
        } catch {
            throw ControlError(status: 400, description: "bad control request body for \(request.path): \(error)")
        }
    }
}

extension KlarnaSandbox.ControlError {
    /// Klarna's refusal of a change made through a control (a portal capture beyond the authorization).
    init(_ rejection: Rejection) {
        self.init(status: rejection.response.status, description: "\(rejection.code): \(rejection.message)")
    }
}

extension SandboxState {
    /// Records a Merchant Portal action, which no request made (request seq 0).
    mutating func recordPortalEffect(
        _ kind: SandboxEffect.Kind, at: Date, order: String, amount: Int, capture: String? = nil, refund: String? = nil
    ) {
        record(
            SandboxEffect(
                seq: effects.count + 1, at: at, kind: kind, requestSeq: 0, orderId: order, amount: amount, captureId: capture,
                refundId: refund))
    }
}
