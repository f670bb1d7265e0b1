import Foundation
import KlarnaAPI
import KlarnaSandbox
import Testing

/// Absurd numbers at the sandbox's payout controls and order controls: each is refused (a thrown `ControlError` in
/// Swift, a 400 naming the field and its range over `/_sandbox/…`), nothing is recorded, and the sandbox keeps
/// serving; the payout made afterwards is exactly what it would have been. An impossible date in a Settlements API
/// query is a 400 too.
@Suite struct SandboxSettlementLimitsTests {
    static let limit = KlarnaSandbox.maximumAmount
    static let offsets = "from -1000000000000 to 1000000000000"
    static let amounts = "from 1 to 1000000000000"

    /// The control error `body` throws; `nil` when it throws nothing or something else.
    static func refusal(_ body: () throws -> Void) -> KlarnaSandbox.ControlError? {
        do {
            try body()
            return nil
        } catch let error as KlarnaSandbox.ControlError {
            return error
        } catch {
            return nil
        }
    }

    /// An authorized order of 10,000 with a portal capture of all of it: the order id and the capture id.
    static func capturedOrder(_ h: SandboxHarness) async throws -> (order: String, capture: String) {
        let order = try await h.placedOrder(amount: 10_000)
        return (order, try h.sandbox.portalCapture(order: order, amount: 10_000))
    }

    /// The one payout every test here ends with: the 10,000 capture, 2.5 % fee (250) and 25 % VAT on it (63), and
    /// nothing a refused control asked for (no alteration, orphan, holdback, reversal or broken totals).
    static func expectUntouchedPayout(_ made: [CreatedPayout], capture: String) {
        #expect(made.count == 1)
        guard let payout = made.first else { return }
        #expect(payout.transactions.map(\.type) == ["SALE", "FEE"])
        #expect(payout.transactions.first?.captureId == capture)
        #expect(payout.transactions.first?.amount == 10_000)
        #expect(payout.totals.saleAmount == 10_000)
        #expect(payout.totals.feeAmount == 250)
        #expect(payout.totals.taxAmount == 63)
        #expect(payout.totals.holdbackAmount == 0)
        #expect(payout.totals.reversalAmount == 0)
        #expect(payout.totals.settlementAmount == 9_687)
    }

    @Test(
        "Swift controls: Int.max, Int.min, negative and huge basis points throw a 400 naming the field and its range; nothing is recorded and the next payout is as if they were never asked"
    )
    func swiftControlsRefuseAbsurdNumbers() async throws {
        try await SandboxHarness.with { h in
            let (order, capture) = try await Self.capturedOrder(h)
            let sandbox = h.sandbox

            for delta in [Int.max, Int.min, Self.limit + 1, -Self.limit - 1] {
                let error = Self.refusal { try sandbox.alterSettledAmount(captureID: capture, by: delta) }
                #expect(error?.status == 400)
                #expect(error?.description == "delta must be \(Self.offsets), not \(delta)")
                let broken = Self.refusal { try sandbox.breakTotals(by: delta) }
                #expect(broken?.status == 400)
                #expect(broken?.description == "delta must be \(Self.offsets), not \(delta)")
            }
            for amount in [Int.max, Int.min, -1, 0, Self.limit + 1] {
                let error = Self.refusal { _ = try sandbox.inventTransaction(amount: amount, currency: "SEK") }
                #expect(error?.status == 400)
                #expect(error?.description == "amount must be \(Self.amounts), not \(amount)")
            }

            // Deltas within range add up, and what they add up to is held to the same range: the second is refused
            // whole, so the two first cancel out.
            try sandbox.alterSettledAmount(captureID: capture, by: Self.limit)
            let twice = Self.refusal { try sandbox.alterSettledAmount(captureID: capture, by: 1) }
            #expect(twice?.status == 400)
            #expect(twice?.description.contains("in all") == true, "\(String(describing: twice))")
            try sandbox.alterSettledAmount(captureID: capture, by: -Self.limit)
            try sandbox.breakTotals(by: -Self.limit)
            #expect(Self.refusal { try sandbox.breakTotals(by: -1) }?.status == 400)
            try sandbox.breakTotals(by: Self.limit)

            let specs: [(PayoutSpec, String)] = [
                (PayoutSpec(feeBasisPoints: Int.max), "fee_basis_points must be from 0 to 10000, not \(Int.max)"),
                (PayoutSpec(feeBasisPoints: 10_001), "fee_basis_points must be from 0 to 10000, not 10001"),
                (PayoutSpec(feeBasisPoints: -1), "fee_basis_points must be from 0 to 10000, not -1"),
                (PayoutSpec(feeVATBasisPoints: Int.min), "fee_vat_basis_points must be from 0 to 10000, not \(Int.min)"),
                (PayoutSpec(fixedFee: Int.max), "fixed_fee must be from 0 to 1000000000000, not \(Int.max)"),
                (PayoutSpec(holdback: Int.max), "holdback must be from 0 to 1000000000000, not \(Int.max)"),
                (PayoutSpec(holdback: -1), "holdback must be from 0 to 1000000000000, not -1"),
                (PayoutSpec(reversals: [order: Int.max]), "reversals[\(order)] must be \(Self.amounts), not \(Int.max)"),
                (PayoutSpec(reversals: [order: Int.min]), "reversals[\(order)] must be \(Self.amounts), not \(Int.min)"),
                (PayoutSpec(corrections: [order: Int.min]), "corrections[\(order)] must be \(Self.offsets), not \(Int.min)"),
                (PayoutSpec(corrections: [order: Int.max]), "corrections[\(order)] must be \(Self.offsets), not \(Int.max)"),
            ]
            for (spec, message) in specs {
                let error = Self.refusal { _ = try sandbox.settle(spec) }
                #expect(error?.status == 400)
                #expect(error?.description == message)
                let scheduled = Self.refusal { try sandbox.setSettlementSchedule(everySeconds: 60, spec: spec) }
                #expect(scheduled?.status == 400)
                #expect(scheduled?.description == message)
            }
            for delay in [-1, Double.infinity, Double.nan] {
                #expect(Self.refusal { _ = try sandbox.settle(PayoutSpec(delaySeconds: delay)) }?.status == 400)
            }

            // Orders are bounded too (every capture and refund is at most its order), and the portal controls refuse
            // what Klarna would.
            let hugeOrder = Self.refusal { _ = try sandbox.createSession(SessionSpec(orderAmount: Int.max)) }
            #expect(hugeOrder?.status == 400)
            #expect(hugeOrder?.description == "order_amount must be \(Self.amounts), not \(Int.max)")
            #expect(Self.refusal { _ = try sandbox.createSession(SessionSpec(orderAmount: Int.min)) }?.status == 400)
            let line = SandboxOrderLine(name: "x", quantity: 1, unitPrice: Int.max, totalAmount: Int.max)
            #expect(Self.refusal { _ = try sandbox.createSession(SessionSpec(orderLines: [line, line])) }?.status == 400)
            #expect(Self.refusal { _ = try sandbox.createSession(SessionSpec(orderLines: [line])) }?.status == 400)
            let other = try await h.placedOrder(amount: 5_000)
            #expect(Self.refusal { _ = try sandbox.portalCapture(order: other, amount: Int.max) }?.status == 403)
            #expect(Self.refusal { _ = try sandbox.portalCapture(order: other, amount: Int.min) }?.status == 400)
            #expect(Self.refusal { _ = try sandbox.portalRefund(order: order, amount: Int.max) }?.status == 403)
            #expect(Self.refusal { _ = try sandbox.portalRefund(order: order, amount: Int.min) }?.status == 400)

            Self.expectUntouchedPayout(try sandbox.settle(), capture: capture)
            #expect(try await h.client.allPayouts().count == 1, "the Settlements API still answers")
        }
    }

    /// `(status, first error message)` of a control call.
    static func call(_ h: SandboxHarness, _ method: String, _ path: String, _ json: String? = nil) async throws -> (status: Int, message: String) {
        let response = try await h.transport.execute(HTTPRequest(method: method, url: h.baseURL + path, body: json.map { Array($0.utf8) }))
        let object = (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any] ?? [:]
        return (response.status, (object["error_messages"] as? [String])?.first ?? "")
    }

    @Test(
        "/_sandbox routes: the same numbers posted over HTTP are a 400 naming the field and its range (or Klarna's 403 for a portal capture beyond the order); the sandbox keeps serving and pays out as if they were never posted"
    )
    func httpControlsRefuseAbsurdNumbers() async throws {
        try await SandboxHarness.with { h in
            let (order, capture) = try await Self.capturedOrder(h)
            let huge = "\(Int.max)", tiny = "\(Int.min)"

            let refused: [(path: String, body: String, message: String)] = [
                ("settlements/alter", #"{"capture_id":"\#(capture)","delta":\#(huge)}"#, "delta must be \(Self.offsets), not \(huge)"),
                ("settlements/alter", #"{"capture_id":"\#(capture)","delta":\#(tiny)}"#, "delta must be \(Self.offsets), not \(tiny)"),
                ("settlements/break-totals", #"{"delta":\#(huge)}"#, "delta must be \(Self.offsets), not \(huge)"),
                ("settlements/break-totals", #"{"delta":\#(tiny)}"#, "delta must be \(Self.offsets), not \(tiny)"),
                ("settlements/invent", #"{"amount":\#(huge),"currency":"SEK"}"#, "amount must be \(Self.amounts), not \(huge)"),
                ("settlements/invent", #"{"amount":\#(tiny),"currency":"SEK"}"#, "amount must be \(Self.amounts), not \(tiny)"),
                ("settlements/invent", #"{"amount":-1,"currency":"SEK"}"#, "amount must be \(Self.amounts), not -1"),
                ("settlements/payouts", #"{"fee_basis_points":\#(huge)}"#, "fee_basis_points must be from 0 to 10000, not \(huge)"),
                ("settlements/payouts", #"{"fee_basis_points":-250}"#, "fee_basis_points must be from 0 to 10000, not -250"),
                ("settlements/payouts", #"{"fee_vat_basis_points":10001}"#, "fee_vat_basis_points must be from 0 to 10000, not 10001"),
                ("settlements/payouts", #"{"fixed_fee":\#(huge)}"#, "fixed_fee must be from 0 to 1000000000000, not \(huge)"),
                ("settlements/payouts", #"{"holdback":\#(tiny)}"#, "holdback must be from 0 to 1000000000000, not \(tiny)"),
                ("settlements/payouts", #"{"reversals":{"\#(order)":\#(huge)}}"#, "reversals[\(order)] must be \(Self.amounts), not \(huge)"),
                ("settlements/payouts", #"{"corrections":{"\#(order)":\#(tiny)}}"#, "corrections[\(order)] must be \(Self.offsets), not \(tiny)"),
                ("settlements/payouts", #"{"delay_seconds":-1}"#, "delay_seconds must be a finite number of seconds, at least 0, not -1.0"),
                (
                    "settlements/schedule", #"{"every_seconds":60,"spec":{"fee_basis_points":\#(huge)}}"#,
                    "fee_basis_points must be from 0 to 10000, not \(huge)"
                ),
                ("sessions", #"{"order_amount":\#(huge)}"#, "order_amount must be \(Self.amounts), not \(huge)"),
                ("orders/\(order)/portal-refund", #"{"amount":\#(tiny)}"#, "BAD_VALUE: refunded_amount must be positive"),
            ]
            for (path, body, message) in refused {
                let (status, said) = try await Self.call(h, "POST", "/_sandbox/" + path, body)
                #expect(status == 400, "\(path) \(body)")
                #expect(said == message, "\(path) \(body)")
            }
            // Beyond Int is no number the sandbox can read: a 400 too, from the body's decoding.
            #expect(try await Self.call(h, "POST", "/_sandbox/settlements/break-totals", #"{"delta":1e30}"#).status == 400)
            #expect(
                try await Self.call(h, "POST", "/_sandbox/settlements/invent", #"{"amount":99999999999999999999999,"currency":"SEK"}"#).status == 400)
            // Klarna's refusal of a portal capture beyond what is authorized.
            let other = try await h.placedOrder(amount: 5_000)
            #expect(try await Self.call(h, "POST", "/_sandbox/orders/\(other)/portal-capture", #"{"amount":\#(huge)}"#).status == 403)

            // Still serving: the control API, the Klarna API, and a payout of exactly the capture.
            #expect(try await Self.call(h, "GET", "/_sandbox/clock").status == 200)
            let (status, _) = try await Self.call(h, "POST", "/_sandbox/settlements/payouts", "{}")
            #expect(status == 201)
            let payouts = try await h.client.allPayouts()
            let payout = try #require(payouts.first)
            #expect(payouts.count == 1)
            #expect(payout.totals.saleAmount == 10_000)
            #expect(payout.totals.holdbackAmount == 0)
            #expect(payout.totals.settlementAmount == 9_687)
            let transactions = try await h.client.allTransactions(paymentReference: payout.paymentReference)
            #expect(transactions.map(\.type) == [.sale, .fee])
            #expect(transactions.first?.amount == 10_000)
        }
    }

    @Test(
        "Settlements API dates: a day that does not exist (2026-02-30, 2026-13-01) is a 400 naming the parameter, as is garbage; a real day and a date-time are read"
    )
    func impossibleDatesAreRefused() async throws {
        try await SandboxHarness.with { h in
            func get(_ path: String) async throws -> (status: Int, body: String) {
                let response = try await h.transport.execute(
                    HTTPRequest(
                        method: "GET", url: h.baseURL + "/settlements/v1" + path, credentials: SandboxHarness.credentials))
                return (response.status, String(decoding: response.body, as: UTF8.self))
            }
            for (path, name) in [
                ("/payouts?start_date=2026-02-30", "start_date"), ("/payouts?end_date=2026-13-01", "end_date"),
                ("/payouts/summary?start_date=2026-02-01&end_date=2026-02-30", "end_date"),
                ("/payouts?start_date=yesterday", "start_date"),
            ] {
                let (status, body) = try await get(path)
                #expect(status == 400, "\(path): \(body)")
                #expect(body.contains("\(name) must be a day"), "\(path): \(body)")
            }
            #expect(try await get("/payouts?start_date=2026-02-28").status == 200)
            #expect(try await get("/payouts?start_date=2026-02-28T08:00:00Z&end_date=2026-03-01T00:00:00.500Z").status == 200)
            #expect(try await get("/payouts/summary?start_date=2024-02-29&end_date=2026-03-01").status == 200)
        }
    }
}
