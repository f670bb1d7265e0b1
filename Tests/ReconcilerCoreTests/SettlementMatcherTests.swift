import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore

/// Matching a payout's lines against the ledger: what each line matched, and every finding.
@Suite("Settlement matcher")
struct SettlementMatcherTests {
    let ref = "XISA93DJ"

    func payout(_ totals: SettledTotals) -> SettledPayout {
        SettledPayout(paymentReference: ref, payoutDate: Fixtures.t0, currency: "EUR", settlementType: "NET", totals: totals)
    }

    func line(
        _ ordinal: Int, _ kind: SettlementKind, _ amount: Int, order: String? = "o-1", capture: String? = nil,
        refund: String? = nil, vat: Int? = nil, detailed: String? = nil, currency: String = "EUR",
        reversal: String? = nil, merchantReference: String? = nil
    ) -> SettledLine {
        SettledLine(
            paymentReference: ref, ordinal: ordinal, kind: kind, detailedType: detailed, amount: amount, vatAmount: vat,
            orderID: order, captureID: capture, refundID: refund, currency: currency, reversalReference: reversal,
            merchantReference: merchantReference)
    }

    func capture(
        _ id: String?, _ amount: Int, order: String = "o-1", currency: String? = nil, source: LedgerSource = .daemon,
        settledBy: SettledLineKey? = nil
    ) -> LedgerCapture {
        LedgerCapture(
            orderID: order, captureID: id, amount: amount, currency: currency, capturedAt: Fixtures.t0, source: source,
            settledBy: settledBy)
    }

    func refund(_ id: String?, _ amount: Int, order: String = "o-1", source: LedgerSource = .daemon, settledBy: SettledLineKey? = nil) -> LedgerRefund
    {
        LedgerRefund(orderID: order, refundID: id, amount: amount, at: Fixtures.t0, source: source, settledBy: settledBy)
    }

    func ledger(_ id: String = "o-1", captures: [LedgerCapture] = [], refunds: [LedgerRefund] = []) -> LedgerOrder {
        LedgerOrder(orderID: id, merchantReference: "1001", currency: "EUR", captures: captures, refunds: refunds)
    }

    func reconcile(_ payout: SettledPayout, _ lines: [SettledLine], _ orders: [LedgerOrder]) -> PayoutReconciliation {
        SettlementMatcher.reconcile(
            payout: payout, lines: lines, orders: Dictionary(uniqueKeysWithValues: orders.map { ($0.orderID, $0) }))
    }

    func key(_ captureID: String, order: String = "o-1") -> CaptureKey { CaptureKey(orderID: order, captureID: captureID) }

    /// Klarna's Settlements API reference: a sale, its fee with VAT, a partial return.
    var exampleLines: [SettledLine] {
        [
            line(0, .sale, 500_000, capture: "c-1", detailed: "PURCHASE"),
            line(1, .fee, 12_000, capture: "c-1", vat: 3_000, detailed: "PURCHASE_FEE_PERCENTAGE"),
            line(2, .return, 20_000, capture: "", refund: "r-1", detailed: "PURCHASE_RETURN"),
        ]
    }

    var exampleTotals: SettledTotals {
        SettledTotals(saleAmount: 500_000, returnAmount: 20_000, feeAmount: 12_000, taxAmount: 3_000, settlementAmount: 465_000)
    }

    var exampleOrder: LedgerOrder { ledger(captures: [capture("c-1", 500_000)], refunds: [refund("r-1", 20_000)]) }

    // MARK: - A payout that adds up

    @Test(
        "The documented example adds up: the SALE settles its capture, the FEE goes to its order and capture, the RETURN settles its refund, no finding"
    )
    func exampleMatches() {
        let result = reconcile(payout(exampleTotals), exampleLines, [exampleOrder])
        #expect(result.findings == [])
        #expect(
            result.lines.map(\.match) == [
                .capture(key("c-1"), byAmount: false),
                .order("o-1", capture: key("c-1")),
                .refund(RefundKey(orderID: "o-1", refundID: "r-1"), byAmount: false),
            ])
        #expect(result.lines.map(\.signedAmount) == [500_000, -12_000, -20_000])
        #expect(result.lines.map(\.source) == [.daemon, nil, .daemon])
        #expect(
            result.lines.map(\.note) == [
                "capture c-1 of order o-1", "fee on order o-1, capture c-1", "refund r-1 of order o-1",
            ])
        #expect(result.settledCaptures == [key("c-1"): SettledLineKey(paymentReference: ref, ordinal: 0)])
        #expect(result.settledRefunds == [RefundKey(orderID: "o-1", refundID: "r-1"): SettledLineKey(paymentReference: ref, ordinal: 2)])
        #expect(result.matchedCount == 3)
        #expect(result.unmatchedCount == 0)
        #expect(result.payoutLevelCount == 0)
    }

    @Test("Amounts Klarna sends negative for FEE and RETURN give the same result: the sign comes from the type")
    func negativeAmountsSameResult() {
        let negative = [
            line(0, .sale, 500_000, capture: "c-1"),
            line(1, .fee, -12_000, capture: "c-1", vat: -3_000),
            line(2, .return, -20_000, refund: "r-1"),
        ]
        let totals = SettledTotals(saleAmount: 500_000, returnAmount: -20_000, feeAmount: -12_000, taxAmount: -3_000, settlementAmount: 465_000)
        let result = reconcile(payout(totals), negative, [exampleOrder])
        #expect(result.findings == [])
        #expect(result.lines.map(\.signedAmount) == [500_000, -12_000, -20_000])
        #expect(result.fromLines.settlement == 465_000)
    }

    @Test(
        "A REVERSAL of a dispute the daemon saw close lost is matched without a finding, by its id or (without one) by amount; a second, another amount or an unknown dispute is a finding"
    )
    func lostDisputes() {
        var order = ledger(captures: [capture("c-1", 10_000)])
        order.lostDisputes = [LostDispute(id: "d-1", amount: 4_000, currency: "EUR"), LostDispute(id: "d-2", amount: 1_500, currency: "EUR")]
        func reversals(_ lines: [SettledLine]) -> [String?] {
            let amount = lines.reduce(0) { $0 + $1.amount }
            return reconcile(payout(SettledTotals(reversalAmount: amount, settlementAmount: -amount)), lines, [order]).findings(.reversal).map(
                \.reversalReference)
        }
        #expect(reversals([line(0, .reversal, 4_000, reversal: "d-1")]).isEmpty)
        #expect(reversals([line(0, .reversal, 1_500)]).isEmpty, "without a reference, the one loss of that amount")
        #expect(reversals([line(0, .reversal, 4_000, reversal: "d-1"), line(1, .reversal, 4_000, reversal: "d-1")]) == ["d-1"], "paid back once")
        #expect(reversals([line(0, .reversal, 3_999, reversal: "d-1")]) == ["d-1"], "another amount")
        #expect(reversals([line(0, .reversal, 4_000, reversal: "d-9")]) == ["d-9"], "a dispute the daemon did not see lost")
        let matched = reconcile(
            payout(SettledTotals(reversalAmount: 4_000, settlementAmount: -4_000)), [line(0, .reversal, 4_000, reversal: "d-1")], [order])
        #expect(matched.lines.first?.match == .order("o-1", capture: nil) && matched.lines.first?.note.contains("close lost") == true)
    }

    @Test("Lines given out of order are matched and reported in ordinal order")
    func linesSortedByOrdinal() {
        let result = reconcile(payout(exampleTotals), Array(exampleLines.reversed()), [exampleOrder])
        #expect(result.lines.map(\.line.ordinal) == [0, 1, 2])
        #expect(result.findings == [])
    }

    @Test("The ledger is asked once per order the payout names, and for nothing else")
    func ledgerAskedOncePerOrder() {
        var asked: [String] = []
        let lines = exampleLines + [line(3, .sale, 100, order: "o-2", capture: "c-9")]
        _ = SettlementMatcher.reconcile(
            payout: payout(exampleTotals), lines: lines,
            ledger: { orderID in
                asked.append(orderID)
                return orderID == "o-1" ? exampleOrder : nil
            })
        #expect(asked.sorted() == ["o-1", "o-2"])
        #expect(SettlementMatcher.orderIDs(in: lines + [line(4, .holdback, 5, order: "")]) == ["o-1", "o-2"])
    }

    // MARK: - Orphans and payout-level lines

    @Test("Lines for an order the ledger does not know are one orphan finding for the order, naming every line")
    func orphan() {
        let lines = [
            line(0, .sale, 50_000, order: "o-9", capture: "c-9", merchantReference: "1009"),
            line(1, .fee, 1_500, order: "o-9", capture: "c-9"),
        ]
        let totals = SettledTotals(saleAmount: 50_000, feeAmount: 1_500, settlementAmount: 48_500)
        let result = reconcile(payout(totals), lines, [exampleOrder])
        #expect(
            result.findings == [
                SettlementFinding(
                    kind: .orphan, paymentReference: ref, lineOrdinals: [0, 1], orderID: "o-9", captureID: "c-9",
                    merchantReference: "1009", actual: 48_500, actualCurrency: "EUR",
                    reason: "order o-9 is not in the ledger: paid at Klarna, unknown to the shop (lines 0, 1: SALE, FEE; net 48500 EUR)")
            ])
        #expect(result.lines.map(\.match) == [.unmatched(.orderUnknown), .unmatched(.orderUnknown)])
        #expect(result.unmatchedCount == 2)
        #expect(result.settledCaptures == [:])
        let report = result.report
        #expect(report.unmatched.map(\.reason) == [.orderUnknown, .orderUnknown])
        #expect(report.unmatched.map(\.explanation) == ["order o-9 is not in the ledger", "order o-9 is not in the ledger"])
        #expect(report.unmatched.map(\.amount) == [50_000, -1_500])
    }

    @Test("A SALE without an order id is an orphan of its own")
    func saleWithoutOrderID() {
        let result = reconcile(payout(SettledTotals(saleAmount: 1_000, settlementAmount: 1_000)), [line(0, .sale, 1_000, order: "")], [])
        #expect(result.lines.map(\.match) == [.unmatched(.noOrderID)])
        #expect(
            result.findings == [
                SettlementFinding(
                    kind: .orphan, paymentReference: ref, lineOrdinals: [0], actual: 1_000, actualCurrency: "EUR",
                    reason: "SALE of 1000 EUR (line 0) has no order id: paid at Klarna, unknown to the shop")
            ])
    }

    @Test("HOLDBACK, RELEASE, CHARGE and CREDIT without an order id, or with one the ledger does not know, are payout-level, not orphans")
    func payoutLevelLines() {
        let lines = [
            line(0, .holdback, 10_000, order: nil, detailed: "ROLLING_RESERVE"),
            line(1, .release, 4_000, order: ""),
            line(2, .charge, 500, order: "o-x", detailed: "PAYMENT_REMINDER"),
            line(3, .credit, 200, order: "o-1"),
            line(4, .commission, 300, order: nil),
        ]
        let totals = SettledTotals(
            commissionAmount: 300, chargeAmount: 500, creditAmount: 200, holdbackAmount: 10_000, releaseAmount: 4_000,
            settlementAmount: -6_000)
        let result = reconcile(payout(totals), lines, [exampleOrder])
        #expect(result.findings == [])
        #expect(result.lines.map(\.match) == [.payoutLevel, .payoutLevel, .payoutLevel, .order("o-1", capture: nil), .payoutLevel])
        #expect(result.lines.map(\.signedAmount) == [-10_000, 4_000, -500, 200, 300])
        #expect(result.lines[2].note == "CHARGE for the payout (order o-x is not in the ledger)")
        #expect(result.payoutLevelCount == 4)
        #expect(result.matchedCount == 1)
        #expect(result.unmatchedCount == 0)
    }

    // MARK: - Amounts

    @Test("A SALE of another amount than its capture is an amount mismatch naming both; the line is still matched")
    func saleAmountMismatch() {
        let totals = SettledTotals(saleAmount: 500_001, settlementAmount: 500_001)
        let result = reconcile(payout(totals), [line(0, .sale, 500_001, capture: "c-1")], [exampleOrder])
        #expect(result.lines.map(\.match) == [.capture(key("c-1"), byAmount: false)])
        #expect(
            result.findings == [
                SettlementFinding(
                    kind: .amountMismatch, paymentReference: ref, lineOrdinals: [0], orderID: "o-1", captureID: "c-1",
                    merchantReference: "1001", expected: 500_000, actual: 500_001, expectedCurrency: "EUR", actualCurrency: "EUR",
                    reason: "SALE of 500001 for capture c-1 of order o-1, which was 500000 (+1)")
            ])
        #expect(result.findings.first?.delta == 1)
    }

    @Test("A RETURN of another amount than its refund is an amount mismatch")
    func returnAmountMismatch() {
        let order = ledger(captures: [capture("c-1", 500_000)], refunds: [refund("r-1", 15_000)])
        let totals = SettledTotals(returnAmount: 20_000, settlementAmount: -20_000)
        let result = reconcile(payout(totals), [line(0, .return, 20_000, refund: "r-1")], [order])
        #expect(
            result.findings == [
                SettlementFinding(
                    kind: .amountMismatch, paymentReference: ref, lineOrdinals: [0], orderID: "o-1", refundID: "r-1",
                    merchantReference: "1001", expected: 15_000, actual: 20_000, expectedCurrency: "EUR", actualCurrency: "EUR",
                    reason: "RETURN of 20000 for refund r-1 of order o-1, which was 15000 (+5000)")
            ])
        #expect(result.findings.first?.delta == 5_000)
    }

    @Test("A SALE in another currency than its capture is an amount mismatch naming both currencies")
    func currencyMismatch() {
        let order = ledger(captures: [capture("c-1", 500_000, currency: "eur")])
        let totals = SettledTotals(saleAmount: 500_000, settlementAmount: 500_000)
        let same = reconcile(payout(totals), [line(0, .sale, 500_000, capture: "c-1", currency: "EUR")], [order])
        #expect(same.findings == [])
        let result = reconcile(payout(totals), [line(0, .sale, 500_000, capture: "c-1", currency: "SEK")], [order])
        #expect(
            result.findings == [
                SettlementFinding(
                    kind: .amountMismatch, paymentReference: ref, lineOrdinals: [0], orderID: "o-1", captureID: "c-1",
                    merchantReference: "1001", expected: 500_000, actual: 500_000, expectedCurrency: "eur", actualCurrency: "SEK",
                    reason: "SALE in SEK for capture c-1 of order o-1, which was in eur")
            ])
    }

    // MARK: - Drift

    @Test("A SALE for a capture the ledger does not know, on a known order, is an unknown capture (drift): recorded, not matched")
    func unknownCapture() {
        let totals = SettledTotals(saleAmount: 30_000, settlementAmount: 30_000)
        let result = reconcile(payout(totals), [line(0, .sale, 30_000, capture: "c-portal")], [exampleOrder])
        #expect(result.lines.map(\.match) == [.unmatched(.captureUnknown)])
        #expect(result.lines[0].note == "capture c-portal is not in the ledger")
        #expect(
            result.findings == [
                SettlementFinding(
                    kind: .unknownCapture, paymentReference: ref, lineOrdinals: [0], orderID: "o-1", captureID: "c-portal",
                    merchantReference: "1001", actual: 30_000, actualCurrency: "EUR",
                    reason:
                        "SALE of 30000 EUR settles capture c-portal of order o-1, which the ledger does not know: captured outside the daemon (Merchant Portal?)"
                )
            ])
        #expect(result.settledCaptures == [:])
    }

    @Test("A RETURN for a refund the ledger does not know, on a known order, is an unknown refund (drift)")
    func unknownRefund() {
        let totals = SettledTotals(returnAmount: 7_000, settlementAmount: -7_000)
        let result = reconcile(payout(totals), [line(0, .return, 7_000, capture: "", refund: "r-portal")], [exampleOrder])
        #expect(result.lines.map(\.match) == [.unmatched(.refundUnknown)])
        #expect(
            result.findings == [
                SettlementFinding(
                    kind: .unknownRefund, paymentReference: ref, lineOrdinals: [0], orderID: "o-1", refundID: "r-portal",
                    merchantReference: "1001", actual: 7_000, actualCurrency: "EUR",
                    reason:
                        "RETURN of 7000 EUR settles refund r-portal of order o-1, which the ledger does not know: refunded outside the daemon (Merchant Portal?)"
                )
            ])
    }

    @Test("A capture a read of the order noticed (done outside the daemon) matches like any other, and says so")
    func observedCaptureMatches() {
        let order = ledger(captures: [capture("c-1", 500_000, source: .observed)])
        let totals = SettledTotals(saleAmount: 500_000, settlementAmount: 500_000)
        let result = reconcile(payout(totals), [line(0, .sale, 500_000, capture: "c-1")], [order])
        #expect(result.findings == [])
        #expect(result.lines[0].source == .observed)
        #expect(result.lines[0].note == "capture c-1 of order o-1; captured outside the daemon")
    }

    // MARK: - Reversals

    @Test("Every REVERSAL is a finding with its dispute and order; a merchant-protection credit is not")
    func reversal() {
        let lines = [
            line(0, .reversal, 5_000, detailed: "REVERSAL", reversal: "krn:klarna:eu1:dispute:fraud:12"),
            line(1, .reversalMerchantProtection, 2_000, detailed: "FRAUD_POLICY_CREDIT_NET"),
        ]
        let totals = SettledTotals(reversalAmount: 3_000, settlementAmount: -3_000)
        let result = reconcile(payout(totals), lines, [exampleOrder])
        #expect(
            result.findings == [
                SettlementFinding(
                    kind: .reversal, paymentReference: ref, lineOrdinals: [0], orderID: "o-1",
                    reversalReference: "krn:klarna:eu1:dispute:fraud:12", merchantReference: "1001", actual: 5_000,
                    actualCurrency: "EUR",
                    reason:
                        "REVERSAL of 5000 EUR on order o-1 (dispute krn:klarna:eu1:dispute:fraud:12): Klarna refunded the customer on a dispute the merchant lost"
                )
            ])
        #expect(result.lines.map(\.match) == [.order("o-1", capture: nil), .order("o-1", capture: nil)])
        #expect(result.lines.map(\.signedAmount) == [-5_000, 2_000])
        #expect(result.report.reversals == 3_000)
    }

    @Test("A REVERSAL on an order the ledger does not know is both a reversal and an orphan")
    func reversalOnUnknownOrder() {
        let totals = SettledTotals(reversalAmount: 5_000, settlementAmount: -5_000)
        let result = reconcile(payout(totals), [line(0, .reversal, 5_000, order: "o-9")], [])
        #expect(result.findings.map(\.kind) == [.reversal, .orphan])
        #expect(result.findings[0].reason == "REVERSAL of 5000 EUR on order o-9: Klarna refunded the customer on a dispute the merchant lost")
    }

    @Test("A RETURN registered by Klarna as a payment default goes to its order: there is no refund of the shop's to settle")
    func paymentDefault() {
        let totals = SettledTotals(returnAmount: 9_000, settlementAmount: -9_000)
        let result = reconcile(payout(totals), [line(0, .return, 9_000, detailed: "PAYMENT_DEFAULT")], [exampleOrder])
        #expect(result.findings == [])
        #expect(result.lines.map(\.match) == [.order("o-1", capture: nil)])
        #expect(result.settledRefunds == [:])
    }

    // MARK: - Matching without ids

    @Test("A SALE without a capture id takes the order's only unsettled capture of its amount, and says so")
    func fallbackByAmount() {
        let order = ledger(captures: [capture("c-1", 50_000), capture("c-2", 30_000)])
        let totals = SettledTotals(saleAmount: 30_000, settlementAmount: 30_000)
        let result = reconcile(payout(totals), [line(0, .sale, 30_000, capture: "")], [order])
        #expect(result.findings == [])
        #expect(result.lines.map(\.match) == [.capture(key("c-2"), byAmount: true)])
        #expect(result.lines[0].note == "capture c-2 of order o-1 by amount (Klarna gave no capture id; the order's only unsettled capture of 30000)")
        #expect(result.settledCaptures == [key("c-2"): SettledLineKey(paymentReference: ref, ordinal: 0)])
    }

    @Test(
        "A SALE whose capture id the ledger lacks takes the order's only capture of its amount the ledger holds without an id (an answer lost and resolved by a read); never one with another id"
    )
    func idlessLedgerCapture() {
        let idless = capture(nil, 30_000)
        let order = ledger(captures: [capture("c-1", 30_000), idless])
        let totals = SettledTotals(saleAmount: 30_000, settlementAmount: 30_000)
        let result = reconcile(payout(totals), [line(0, .sale, 30_000, capture: "c-9")], [order])
        #expect(result.findings == [])
        #expect(result.lines.map(\.match) == [.capture(idless.key, byAmount: true)])
        #expect(result.lines[0].note.hasSuffix("by amount (the ledger has no id for it; the order's only unsettled capture of 30000 without one)"))
        #expect(result.settledCaptures == [idless.key: SettledLineKey(paymentReference: ref, ordinal: 0)])

        let withIDsOnly = reconcile(payout(totals), [line(0, .sale, 30_000, capture: "c-9")], [ledger(captures: [capture("c-1", 30_000)])])
        #expect(withIDsOnly.findings.map(\.kind) == [.unknownCapture])
        let twoIDless = reconcile(
            payout(totals), [line(0, .sale, 30_000, capture: "c-9")],
            [ledger(captures: [idless, capture(nil, 30_000, order: "o-1", source: .observed)])])
        #expect(twoIDless.findings.map(\.kind) == [.unknownCapture])
    }

    @Test("Lines with a capture id are matched first: an id-less SALE before them does not take the capture they name")
    func idsBeforeAmounts() {
        let order = ledger(captures: [capture("c-1", 30_000), capture("c-2", 30_000)])
        let lines = [line(0, .sale, 30_000, capture: nil), line(1, .sale, 30_000, capture: "c-1")]
        let totals = SettledTotals(saleAmount: 60_000, settlementAmount: 60_000)
        let result = reconcile(payout(totals), lines, [order])
        #expect(result.findings == [])
        #expect(result.lines.map(\.match) == [.capture(key("c-2"), byAmount: true), .capture(key("c-1"), byAmount: false)])
    }

    @Test("A capture another payout settled is no candidate for an id-less SALE")
    func fallbackSkipsSettledElsewhere() {
        let order = ledger(captures: [
            capture("c-1", 30_000, settledBy: SettledLineKey(paymentReference: "EARLIER", ordinal: 3)), capture("c-2", 30_000),
        ])
        let totals = SettledTotals(saleAmount: 30_000, settlementAmount: 30_000)
        let result = reconcile(payout(totals), [line(0, .sale, 30_000)], [order])
        #expect(result.findings == [])
        #expect(result.lines.map(\.match) == [.capture(key("c-2"), byAmount: true)])
    }

    @Test("An id-less SALE that two unsettled captures of its amount could be is left unmatched for an operator")
    func fallbackAmbiguous() {
        let order = ledger(captures: [capture("c-1", 30_000), capture("c-2", 30_000)])
        let totals = SettledTotals(saleAmount: 30_000, settlementAmount: 30_000)
        let result = reconcile(payout(totals), [line(0, .sale, 30_000)], [order])
        #expect(result.lines.map(\.match) == [.unmatched(.ambiguous)])
        #expect(
            result.findings == [
                SettlementFinding(
                    kind: .ambiguousMatch, paymentReference: ref, lineOrdinals: [0], orderID: "o-1", merchantReference: "1001",
                    actual: 30_000, actualCurrency: "EUR",
                    reason:
                        "SALE of 30000 EUR on order o-1 has no capture id, and 2 unsettled captures of that amount could be it: left for an operator")
            ])
    }

    @Test("An id-less SALE with no unsettled capture of its amount on the order is an unknown capture")
    func fallbackNone() {
        let totals = SettledTotals(saleAmount: 30_000, settlementAmount: 30_000)
        let result = reconcile(payout(totals), [line(0, .sale, 30_000)], [exampleOrder])
        #expect(result.lines.map(\.match) == [.unmatched(.captureUnknown)])
        #expect(
            result.findings == [
                SettlementFinding(
                    kind: .unknownCapture, paymentReference: ref, lineOrdinals: [0], orderID: "o-1", merchantReference: "1001",
                    actual: 30_000, actualCurrency: "EUR",
                    reason:
                        "SALE of 30000 EUR on order o-1 has no capture id, and the ledger has no unsettled capture of that amount on the order: captured outside the daemon (Merchant Portal?)"
                )
            ])
    }

    @Test("A RETURN without a refund id takes the order's only unsettled refund of its amount")
    func refundFallback() {
        let order = ledger(captures: [capture("c-1", 500_000)], refunds: [refund("r-1", 20_000), refund("r-2", 5_000)])
        let totals = SettledTotals(returnAmount: 5_000, settlementAmount: -5_000)
        let result = reconcile(payout(totals), [line(0, .return, 5_000, capture: "", refund: "")], [order])
        #expect(result.findings == [])
        #expect(result.lines.map(\.match) == [.refund(RefundKey(orderID: "o-1", refundID: "r-2"), byAmount: true)])
    }

    // MARK: - Duplicates

    @Test("Two SALEs for one capture in a payout: both name the capture, and the second is a duplicate settlement")
    func duplicateInPayout() {
        let order = ledger(captures: [capture("c-1", 50_000)])
        let totals = SettledTotals(saleAmount: 100_000, settlementAmount: 100_000)
        let result = reconcile(payout(totals), [line(0, .sale, 50_000, capture: "c-1"), line(1, .sale, 50_000, capture: "c-1")], [order])
        #expect(result.lines.map(\.match) == [.capture(key("c-1"), byAmount: false), .capture(key("c-1"), byAmount: false)])
        #expect(
            result.findings == [
                SettlementFinding(
                    kind: .duplicateSettlement, paymentReference: ref, lineOrdinals: [0, 1], orderID: "o-1", captureID: "c-1",
                    merchantReference: "1001", expected: 50_000, actual: 50_000, actualCurrency: "EUR",
                    reason: "capture c-1 of order o-1 is settled twice in payout XISA93DJ: lines 0 and 1")
            ])
        #expect(result.settledCaptures == [key("c-1"): SettledLineKey(paymentReference: ref, ordinal: 0)])
    }

    @Test("A SALE for a capture another payout settled is a duplicate settlement; matching the same payout again is not")
    func duplicateAcrossPayouts() {
        let totals = SettledTotals(saleAmount: 50_000, settlementAmount: 50_000)
        let earlier = ledger(captures: [capture("c-1", 50_000, settledBy: SettledLineKey(paymentReference: "EARLIER", ordinal: 4))])
        let result = reconcile(payout(totals), [line(0, .sale, 50_000, capture: "c-1")], [earlier])
        #expect(
            result.findings == [
                SettlementFinding(
                    kind: .duplicateSettlement, paymentReference: ref, lineOrdinals: [0], orderID: "o-1", captureID: "c-1",
                    merchantReference: "1001", expected: 50_000, actual: 50_000, actualCurrency: "EUR",
                    reason: "capture c-1 of order o-1 was settled by payout EARLIER (line 4) and again by payout XISA93DJ (line 0)")
            ])
        // It does not settle the capture again: the store keeps EARLIER's settlement.
        #expect(result.lines[0].settledElsewhere == SettledLineKey(paymentReference: "EARLIER", ordinal: 4))
        #expect(result.settledCaptures.isEmpty)
        let twice = reconcile(
            payout(SettledTotals(saleAmount: 100_000, settlementAmount: 100_000)),
            [line(0, .sale, 50_000, capture: "c-1"), line(1, .sale, 50_000, capture: "c-1")], [earlier])
        #expect(twice.settledCaptures.isEmpty)

        let again = ledger(captures: [capture("c-1", 50_000, settledBy: SettledLineKey(paymentReference: ref, ordinal: 0))])
        #expect(reconcile(payout(totals), [line(0, .sale, 50_000, capture: "c-1")], [again]).findings == [])
    }

    @Test("Two RETURNs for one refund in a payout are a duplicate settlement")
    func duplicateRefund() {
        let totals = SettledTotals(returnAmount: 40_000, settlementAmount: -40_000)
        let result = reconcile(payout(totals), [line(0, .return, 20_000, refund: "r-1"), line(1, .return, 20_000, refund: "r-1")], [exampleOrder])
        #expect(result.findings.map(\.kind) == [.duplicateSettlement])
        #expect(result.findings.first?.lineOrdinals == [0, 1])
        #expect(result.findings.first?.reason == "refund r-1 of order o-1 is settled twice in payout XISA93DJ: lines 0 and 1")
    }

    // MARK: - Types not known

    @Test("A type Klarna adds later is kept as itself, signed as sent, matched to its order and outside the formula")
    func unknownType() throws {
        let odd = line(0, SettlementKind("INTEREST_ADJUSTMENT"), -250)
        let result = reconcile(payout(SettledTotals(settlementAmount: 0)), [odd], [exampleOrder])
        #expect(result.findings == [])
        #expect(result.lines[0].signedAmount == -250)
        #expect(result.lines[0].match == .order("o-1", capture: nil))
        #expect(result.lines[0].note == "INTEREST_ADJUSTMENT (a type not known) on order o-1")
        #expect(result.report.otherTypes == -250)
        let decoded = try JSONDecoder().decode(PayoutReconciliation.self, from: JSONEncoder().encode(result))
        #expect(decoded.lines[0].line.kind.rawValue == "INTEREST_ADJUSTMENT")
        #expect(!decoded.lines[0].line.kind.isKnown)
    }

    @Test("A type not known on an order the ledger does not know is an orphan; without an order id it is payout-level")
    func unknownTypeOrders() {
        let lines = [line(0, SettlementKind("NEW_THING"), 10, order: "o-9"), line(1, SettlementKind("NEW_THING"), 10, order: nil)]
        let result = reconcile(payout(SettledTotals(settlementAmount: 0)), lines, [])
        #expect(result.lines.map(\.match) == [.unmatched(.orderUnknown), .payoutLevel])
        #expect(result.findings.map(\.kind) == [.orphan])
    }

    // MARK: - Totals

    @Test("A payout whose settlement amount is off by one minor unit: the finding names the figure and the delta")
    func settlementOffByOne() {
        var totals = exampleTotals
        totals.settlementAmount = 465_001
        let result = reconcile(payout(totals), exampleLines, [exampleOrder])
        #expect(
            result.findings == [
                SettlementFinding(
                    kind: .totalsMismatch, paymentReference: ref, figure: .settlement, expected: 465_000, actual: 465_001,
                    reason:
                        "settlement_amount is 465001 but Klarna's formula over the totals gives 465000 (+1): sale 500000 - return 20000 - fee 12000 - tax 3000"
                )
            ])
        #expect(result.findings.first?.delta == 1)
    }

    @Test("Totals that add up by the formula but not to their lines: the figure whose lines differ is named")
    func linesDifferFromTotals() {
        var totals = exampleTotals
        totals.saleAmount = 500_001
        totals.settlementAmount = 465_001
        let result = reconcile(payout(totals), exampleLines, [exampleOrder])
        #expect(
            result.findings == [
                SettlementFinding(
                    kind: .totalsMismatch, paymentReference: ref, figure: .sale, expected: 500_000, actual: 500_001,
                    reason: "sale_amount is 500001 but the SALE lines sum to 500000 (+1)")
            ])
    }

    @Test("Findings come in the order of their first line, the payout's totals last")
    func findingOrder() {
        let lines = [
            line(0, .sale, 500_000, capture: "c-1"),
            line(1, .sale, 1_000, order: "o-9", capture: "c-9"),
            line(2, .reversal, 700),
            line(3, .sale, 2_000, capture: "c-portal"),
            line(4, .fee, 10, order: "o-9"),
        ]
        let totals = SettledTotals(saleAmount: 503_000, reversalAmount: 700, feeAmount: 10, settlementAmount: 502_291)
        let result = reconcile(payout(totals), lines, [exampleOrder])
        #expect(result.findings.map(\.kind) == [.orphan, .reversal, .unknownCapture, .totalsMismatch])
        #expect(result.findings[0].lineOrdinals == [1, 4])
        #expect(result.findings[3].figure == .settlement)
        #expect(result.findings[3].delta == 1)
    }

    // MARK: - Report

    @Test("The report gives per payout the counts, the fees with their VAT, and the net, as plain values")
    func report() {
        let lines = exampleLines + [line(3, .sale, 1_000, order: "o-9"), line(4, .holdback, 2_000, order: nil)]
        let totals = SettledTotals(
            saleAmount: 501_000, returnAmount: 20_000, feeAmount: 12_000, taxAmount: 3_000, holdbackAmount: 2_000,
            settlementAmount: 464_000)
        let result = reconcile(payout(totals), lines, [exampleOrder])
        let report = result.report
        #expect(report.lineCount == 5)
        #expect(report.matchedCount == 3)
        #expect(report.payoutLevelCount == 1)
        #expect(report.unmatchedCount == 1)
        #expect(report.sales == 501_000)
        #expect(report.returns == 20_000)
        #expect(report.feeAmount == 12_000)
        #expect(report.feeTax == 3_000)
        #expect(report.fees == 15_000)
        #expect(report.holdback == 2_000)
        #expect(report.net == 464_000)
        #expect(report.netFromLines == 464_000)
        #expect(report.findingCount == 1)
        #expect(
            report.unmatched == [
                UnmatchedLine(
                    ordinal: 3, kind: .sale, orderID: "o-9", captureID: nil, refundID: nil, amount: 1_000, reason: .orderUnknown,
                    explanation: "order o-9 is not in the ledger")
            ])
        #expect(PayoutReport.columns.count == report.columnValues.count)
        #expect(
            report.columnValues == [
                "XISA93DJ", "2027-01-15T08:00:00Z", "EUR", "NET", "5", "3", "1", "1", "501000", "20000", "0", "12000", "3000",
                "15000", "0", "0", "0", "0", "2000", "0", "0", "0", "464000", "464000", "1", "default",
            ])
    }

    @Test("A reconciliation survives the store's JSON unchanged")
    func jsonRoundTrip() throws {
        var totals = exampleTotals
        totals.settlementAmount = 465_001
        let lines = exampleLines + [line(3, .reversal, 5, reversal: "krn:x"), line(4, .sale, 7, capture: "")]
        let result = reconcile(payout(totals), lines, [exampleOrder])
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        #expect(try decoder.decode(PayoutReconciliation.self, from: encoder.encode(result)) == result)
        let kinds = try JSONEncoder().encode([SettlementKind.sale, SettlementKind("NEW_THING")])
        #expect(String(decoding: kinds, as: UTF8.self) == "[\"SALE\",\"NEW_THING\"]")
    }
}
