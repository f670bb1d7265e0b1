import Foundation
import HTTPServer

/// Payout controls: Klarna paying out, on demand or on a schedule, and the mismatches between what the merchant did
/// and what Klarna pays that the reconciler must find. Each first runs the payouts a schedule owes by now, so that a
/// change made now never reaches back into a payout dated earlier.
///
/// Every amount a control takes is checked against ``maximumAmount`` first (400 naming the field and its range), as is
/// every order amount (``createSession(_:)``), so what a payout adds up stays far from `Int`'s limits: an absurd
/// amount is refused, never a trap that takes the whole sandbox down.
extension KlarnaSandbox {
    /// The largest amount in minor units a control takes: ten billion in major units, beyond any real payment, yet
    /// small enough that millions of them add up without overflow. Deltas and signed amounts may be as far below 0.
    public static let maximumAmount = 1_000_000_000_000
    /// An amount Klarna moves: a SALE, an order, a reversal.
    static let amounts = 1...maximumAmount
    /// A signed change or correction.
    static let offsets = -maximumAmount...maximumAmount
    /// A share in basis points: 0 to 100 %.
    static let basisPoints = 0...10_000

    /// Refuses `value` outside `range` with the control API's 400, naming the field (as in JSON) and its range.
    static func require(_ field: String, _ value: Int, in range: ClosedRange<Int>) throws {
        guard range.contains(value) else {
            throw ControlError(status: 400, description: "\(field) must be from \(range.lowerBound) to \(range.upperBound), not \(value)")
        }
    }

    /// Pays out now (see ``PayoutSpec``) and returns the payouts made, one per merchant and currency with something to
    /// pay.
    /// Throws 400 when a number in the spec is out of range, 404 when a reversal or correction names an order the
    /// sandbox never placed.
    @discardableResult
    public func settle(_ spec: PayoutSpec = PayoutSpec()) throws -> [CreatedPayout] {
        try spec.validate()
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

    /// The capture's SALE carries its amount plus `delta` (settled amount ≠ captured amount). Alterations of one
    /// capture add up; `delta`, and what they add up to, must be within ±``maximumAmount`` (else 400).
    public func alterSettledAmount(captureID: String, by delta: Int) throws {
        try Self.require("delta", delta, in: Self.offsets)
        let now = self.now
        try state.withLock { state in
            try state.requireUnsettled(capture: captureID, now: now)
            // Both within ±maximumAmount, so the sum cannot overflow.
            let total = state.settlements.alterations[captureID, default: 0] + delta
            guard Self.offsets.contains(total) else {
                throw ControlError(
                    status: 400,
                    description:
                        "delta \(delta) would alter capture \(captureID) by \(total) in all; its alterations must add up to from \(Self.offsets.lowerBound) to \(Self.offsets.upperBound)"
                )
            }
            state.settlements.alterations[captureID] = total
        }
    }

    /// A SALE (with its fees) for an order nobody placed, in the next payout of `merchant` (default the primary
    /// merchant) in `currency`. Returns its order id: `orderID`, or a fresh one. `amount` must be from 1 to
    /// ``maximumAmount``, and `merchant` one the sandbox serves (else 400).
    @discardableResult
    public func inventTransaction(
        orderID: String? = nil, amount: Int, currency: String, purchaseCountry: String = "SE", merchant: String? = nil
    ) throws -> String {
        try Self.require("amount", amount, in: Self.amounts)
        let owner = try merchantID(merchant)
        let now = self.now
        let id = orderID ?? UUID().uuidString.lowercased()
        state.withLock { state in
            state.catchUpSettlements(now: now)
            state.settlements.invented.append(
                SettlementLedger.InventedSale(
                    merchant: owner, orderID: id, captureID: UUID().uuidString.lowercased(), amount: amount, currency: currency,
                    purchaseCountry: purchaseCountry, at: now))
        }
        return id
    }

    /// The next payout's `settlement_amount` is off by `delta`, so it no longer follows from its totals. Calls before
    /// that payout add up; `delta`, and what they add up to, must be within ±``maximumAmount`` (else 400).
    public func breakTotals(by delta: Int) throws {
        try Self.require("delta", delta, in: Self.offsets)
        let now = self.now
        try state.withLock { state in
            state.catchUpSettlements(now: now)
            // Both within ±maximumAmount, so the sum cannot overflow.
            let total = state.settlements.totalsError + delta
            guard Self.offsets.contains(total) else {
                throw ControlError(
                    status: 400,
                    description:
                        "delta \(delta) would put the next payout's settlement_amount off by \(total) in all; that must be from \(Self.offsets.lowerBound) to \(Self.offsets.upperBound)"
                )
            }
            state.settlements.totalsError = total
        }
    }

    /// Pays out every `everySeconds` from now under `spec`, as the sandbox clock passes (`nil` stops). Reversals and
    /// corrections are one-off, so a schedule refuses them; its holdback is taken from every payout. The spec's
    /// numbers are checked as ``settle(_:)`` checks them.
    public func setSettlementSchedule(everySeconds: Double?, spec: PayoutSpec = PayoutSpec()) throws {
        guard (everySeconds ?? 1) > 0 else { throw ControlError(status: 400, description: "every_seconds must be positive") }
        try spec.validate()
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
                let merchant: String?
            }
            struct Created: Encodable { let orderId: String }
            let body = try decode(Body.self, request)
            let id = try inventTransaction(
                orderID: body.orderId, amount: body.amount, currency: body.currency,
                purchaseCountry: body.purchaseCountry ?? "SE", merchant: body.merchant)
            return .json(201, Created(orderId: id))
        } else if match("POST", "settlements/break-totals") != nil {
            struct Body: Decodable { let delta: Int }
            try breakTotals(by: try decode(Body.self, request).delta)
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

extension PayoutSpec {
    /// Throws the control API's 400 for the first number no payout could carry, naming its JSON field and range:
    /// fees and VAT from 0 to 10,000 basis points, a fixed fee and a holdback from 0 to the maximum amount, reversals
    /// from 1 to it, corrections within ± it, a delay of at least 0 seconds.
    func validate() throws {
        guard delaySeconds.isFinite, delaySeconds >= 0 else {
            throw KlarnaSandbox.ControlError(
                status: 400, description: "delay_seconds must be a finite number of seconds, at least 0, not \(delaySeconds)")
        }
        try KlarnaSandbox.require("fee_basis_points", feeBasisPoints, in: KlarnaSandbox.basisPoints)
        try KlarnaSandbox.require("fee_vat_basis_points", feeVATBasisPoints, in: KlarnaSandbox.basisPoints)
        try KlarnaSandbox.require("fixed_fee", fixedFee, in: 0...KlarnaSandbox.maximumAmount)
        try KlarnaSandbox.require("holdback", holdback, in: 0...KlarnaSandbox.maximumAmount)
        for (order, amount) in reversals.sorted(by: { $0.key < $1.key }) {
            try KlarnaSandbox.require("reversals[\(order)]", amount, in: KlarnaSandbox.amounts)
        }
        for (order, amount) in corrections.sorted(by: { $0.key < $1.key }) {
            try KlarnaSandbox.require("corrections[\(order)]", amount, in: KlarnaSandbox.offsets)
        }
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
