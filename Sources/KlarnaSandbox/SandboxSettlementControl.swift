import Foundation
import HTTPServer

/// Payout controls: Klarna paying out, on demand or on a schedule, and the mismatches between what the merchant did
/// and what Klarna pays that the reconciler must find. Each first runs the payouts a schedule owes by now, so that a
/// change made now never reaches back into a payout dated earlier.
extension KlarnaSandbox {
    /// Pays out now (see ``PayoutSpec``) and returns the payouts made, one per currency with something to pay.
    /// Throws 404 when a reversal or correction names an order the sandbox never placed.
    @discardableResult
    public func settle(_ spec: PayoutSpec = PayoutSpec()) throws -> [CreatedPayout] {
        let now = self.now
        return try state.withLock { state in
            state.catchUpSettlements(now: now)
            for id in spec.reversals.keys.sorted() + spec.corrections.keys.sorted() where state.orders[id] == nil {
                throw ControlError(status: 404, description: "no order \(id)")
            }
            return state.settle(spec, at: now)
        }
    }

    /// Klarna never pays this capture out (captured, not settled).
    public func omitFromSettlement(captureID: String) throws {
        let now = self.now
        try state.withLock { state in
            try state.requireUnsettled(capture: captureID, now: now)
            state.settlements.omitted.insert(captureID)
        }
    }

    /// The capture's SALE carries its amount plus `delta` (settled amount ≠ captured amount).
    public func alterSettledAmount(captureID: String, by delta: Int) throws {
        let now = self.now
        try state.withLock { state in
            try state.requireUnsettled(capture: captureID, now: now)
            state.settlements.alterations[captureID, default: 0] += delta
        }
    }

    /// A SALE (with its fees) for an order nobody placed, in the next payout in `currency`. Returns its order id:
    /// `orderID`, or a fresh one.
    @discardableResult
    public func inventTransaction(orderID: String? = nil, amount: Int, currency: String, purchaseCountry: String = "SE") -> String {
        let now = self.now
        let id = orderID ?? UUID().uuidString.lowercased()
        state.withLock { state in
            state.catchUpSettlements(now: now)
            state.settlements.invented.append(SettlementLedger.InventedSale(
                orderID: id, captureID: UUID().uuidString.lowercased(), amount: amount, currency: currency,
                purchaseCountry: purchaseCountry, at: now))
        }
        return id
    }

    /// The next payout's `settlement_amount` is off by `delta`, so it no longer follows from its totals.
    public func breakTotals(by delta: Int) {
        let now = self.now
        state.withLock { state in
            state.catchUpSettlements(now: now)
            state.settlements.totalsError += delta
        }
    }

    /// Pays out every `everySeconds` from now under `spec`, as the sandbox clock passes (`nil` stops). Reversals and
    /// corrections are one-off, so a schedule refuses them; its holdback is taken from every payout.
    public func setSettlementSchedule(everySeconds: Double?, spec: PayoutSpec = PayoutSpec()) throws {
        guard (everySeconds ?? 1) > 0 else { throw ControlError(status: 400, description: "every_seconds must be positive") }
        guard spec.reversals.isEmpty, spec.corrections.isEmpty else {
            throw ControlError(status: 400, description: "a schedule cannot repeat reversals or corrections; settle once instead")
        }
        let now = self.now
        state.withLock { state in
            state.catchUpSettlements(now: now)
            state.settlements.schedule = everySeconds.map {
                SettlementLedger.Schedule(every: $0, spec: spec, next: now.addingTimeInterval($0))
            }
        }
    }

    // MARK: HTTP

    /// `/_sandbox/settlements/…`; `nil` when the request is none of these.
    func settlementControl(_ request: ServerRequest, match: (String, String) -> [String]?) throws -> SandboxResponse? {
        if match("POST", "settlements/payouts") != nil {
            struct Created: Encodable { let payouts: [CreatedPayout] }
            return .json(201, Created(payouts: try settle(decode(PayoutSpec.self, request, empty: PayoutSpec()))))
        } else if match("POST", "settlements/omit") != nil {
            struct Body: Decodable { let captureId: String }
            try omitFromSettlement(captureID: try decode(Body.self, request).captureId)
            return .noContent()
        } else if match("POST", "settlements/alter") != nil {
            struct Body: Decodable {
                let captureId: String
                let delta: Int
            }
            let body = try decode(Body.self, request)
            try alterSettledAmount(captureID: body.captureId, by: body.delta)
            return .noContent()
        } else if match("POST", "settlements/invent") != nil {
            struct Body: Decodable {
                let orderId: String?
                let amount: Int
                let currency: String
                let purchaseCountry: String?
            }
            struct Created: Encodable { let orderId: String }
            let body = try decode(Body.self, request)
            let id = inventTransaction(
                orderID: body.orderId, amount: body.amount, currency: body.currency,
                purchaseCountry: body.purchaseCountry ?? "SE")
            return .json(201, Created(orderId: id))
        } else if match("POST", "settlements/break-totals") != nil {
            struct Body: Decodable { let delta: Int }
            breakTotals(by: try decode(Body.self, request).delta)
            return .noContent()
        } else if match("POST", "settlements/schedule") != nil {
            struct Body: Decodable {
                let everySeconds: Double?
                let spec: PayoutSpec?
            }
            let body = try decode(Body.self, request)
            try setSettlementSchedule(everySeconds: body.everySeconds, spec: body.spec ?? PayoutSpec())
            return .noContent()
        }
        return nil
    }
}

extension SandboxState {
    /// Runs the payouts due by `now`, then checks that the capture exists and is not paid out yet, so a mismatch
    /// asked for now can still be made.
    mutating func requireUnsettled(capture captureID: String, now: Date) throws {
        catchUpSettlements(now: now)
        guard orders.values.contains(where: { order in order.captures.contains(where: { $0.id == captureID }) }) else {
            throw KlarnaSandbox.ControlError(status: 404, description: "no capture \(captureID)")
        }
        if settlements.settled.contains(captureID) {
            throw KlarnaSandbox.ControlError(status: 409, description: "capture \(captureID) has been paid out already")
        }
    }
}
