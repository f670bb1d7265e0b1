import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore

/// Klarna's payout formula over the totals, and the lines summed by type against the totals.
@Suite("Payout formula")
struct PayoutFormulaTests {
    func payout(_ totals: SettledTotals) -> SettledPayout {
        SettledPayout(paymentReference: "P1", payoutDate: Fixtures.t0, currency: "EUR", settlementType: "NET", totals: totals)
    }

    func line(_ ordinal: Int, _ kind: SettlementKind, _ amount: Int, vat: Int? = nil) -> SettledLine {
        SettledLine(paymentReference: "P1", ordinal: ordinal, kind: kind, amount: amount, vatAmount: vat, orderID: "o-1", currency: "EUR")
    }

    /// Every term of the formula non-zero, plus what lies outside it (tax_refund, deposit, debt balances,
    /// CORRECTION).
    var everyTerm: SettledTotals {
        SettledTotals(
            saleAmount: 1_000, returnAmount: 100, reversalAmount: 50, feeAmount: 30, taxAmount: 7, feeCorrectionAmount: 5,
            feeRefundAmount: 19, taxRefundAmount: 900, commissionAmount: 20, chargeAmount: 3, creditAmount: 2,
            holdbackAmount: 13, releaseAmount: 17, repayAmount: 11, depositAmount: 800, openingDebtBalanceAmount: 700,
            closingDebtBalanceAmount: 600, settlementAmount: 849)
    }

    var everyLine: [SettledLine] {
        [
            line(0, .sale, 1_000), line(1, .return, 100), line(2, .reversal, 60), line(3, .reversalMerchantProtection, 10),
            line(4, .fee, 30, vat: 7), line(5, .commission, 20), line(6, .charge, 3), line(7, .credit, 2),
            line(8, .holdback, 13), line(9, .release, 17), line(10, .feeRefund, 19), line(11, .correction, 999),
            line(12, SettlementKind("SOMETHING_NEW"), 555),
        ]
    }

    @Test(
        "settlement = sale − return − reversal − fee + fee_correction + commission − tax − charge + credit − repay − holdback + release + fee_refund")
    func formula() {
        let figures = PayoutFigures(totals: everyTerm)
        // 1000 − 100 − 50 − 30 + 5 + 20 − 7 − 3 + 2 − 11 − 13 + 17 + 19
        #expect(figures.formulaSettlement == 849)
        #expect(
            figures.formulaText
                == "sale 1000 - return 100 - reversal 50 - fee 30 + fee_correction 5 + commission 20 - tax 7 - charge 3 + credit 2 - repay 11 - holdback 13 + release 17 + fee_refund 19"
        )
        #expect(PayoutFormula.check(payout(everyTerm), lines: everyLine) == [])
    }

    @Test("The lines' figures: reversal less merchant protection, tax from vat_amount, CORRECTION and new types outside")
    func figuresFromLines() {
        let figures = PayoutFigures(lines: everyLine, totals: everyTerm)
        #expect(
            figures
                == PayoutFigures(
                    sale: 1_000, returns: 100, reversal: 50, fee: 30, tax: 7, feeCorrection: 5, commission: 20, charge: 3, credit: 2,
                    repay: 11, holdback: 13, release: 17, feeRefund: 19, settlement: 849))
    }

    @Test("Each term moves the settlement its own way: one unit more in a term changes the formula by one, with its sign")
    func eachTermsDirection() {
        let base = PayoutFigures(totals: everyTerm).formulaSettlement
        let adds: [PayoutFigure: Bool] = [
            .sale: true, .returns: false, .reversal: false, .fee: false, .feeCorrection: true, .commission: true,
            .tax: false, .charge: false, .credit: true, .repay: false, .holdback: false, .release: true, .feeRefund: true,
        ]
        for (figure, add) in adds {
            var totals = everyTerm
            switch figure {
            case .sale: totals.saleAmount += 1
            case .returns: totals.returnAmount += 1
            case .reversal: totals.reversalAmount += 1
            case .fee: totals.feeAmount += 1
            case .feeCorrection: totals.feeCorrectionAmount = (totals.feeCorrectionAmount ?? 0) + 1
            case .commission: totals.commissionAmount += 1
            case .tax: totals.taxAmount = (totals.taxAmount ?? 0) + 1
            case .charge: totals.chargeAmount += 1
            case .credit: totals.creditAmount += 1
            case .repay: totals.repayAmount += 1
            case .holdback: totals.holdbackAmount += 1
            case .release: totals.releaseAmount += 1
            case .feeRefund: totals.feeRefundAmount += 1
            case .settlement: break
            }
            #expect(PayoutFigures(totals: totals).formulaSettlement == base + (add ? 1 : -1), "\(figure.rawValue)")
        }
    }

    @Test(
        "Totals sent negative for the debits read the same: a directional total is taken by its magnitude, the reversal (a net) by the debits' sign")
    func negativeTotals() {
        var totals = everyTerm
        totals.reversalAmount = -50
        totals.returnAmount = -100
        totals.feeAmount = -30
        totals.taxAmount = -7
        totals.holdbackAmount = -13
        totals.chargeAmount = -3
        totals.repayAmount = -11
        #expect(PayoutFigures(totals: totals).formulaSettlement == 849)
        #expect(PayoutFormula.check(payout(totals), lines: everyLine) == [])
    }

    @Test("A reversal that nets to a credit (merchant protection above the reversals) keeps its sign in either convention")
    func creditReversal() {
        var totals = everyTerm
        totals.reversalAmount = -20
        totals.settlementAmount = 919
        #expect(PayoutFigures(totals: totals).formulaSettlement == 919)
        totals.reversalAmount = 20
        totals.returnAmount = -100
        totals.feeAmount = -30
        #expect(PayoutFigures(totals: totals).reversal == -20)
        #expect(PayoutFigures(totals: totals).formulaSettlement == 919)
    }

    @Test("A settlement amount one unit short: one finding, the settlement, −1")
    func settlementShort() {
        var totals = everyTerm
        totals.settlementAmount = 848
        let findings = PayoutFormula.check(payout(totals), lines: everyLine)
        #expect(findings.count == 1)
        #expect(findings.first?.kind == .totalsMismatch)
        #expect(findings.first?.figure == .settlement)
        #expect(findings.first?.expected == 849)
        #expect(findings.first?.actual == 848)
        #expect(findings.first?.delta == -1)
        #expect(findings.first?.reason.hasPrefix("settlement_amount is 848 but Klarna's formula over the totals gives 849 (-1): ") == true)
    }

    @Test("A fee line missing from the lines: the fee figure differs from its total, and only that")
    func feeLineMissing() {
        let lines = everyLine.filter { $0.kind != .fee } + [line(4, .fee, 25, vat: 7)]
        let findings = PayoutFormula.check(payout(everyTerm), lines: lines)
        #expect(
            findings == [
                SettlementFinding(
                    kind: .totalsMismatch, paymentReference: "P1", figure: .fee, expected: 25, actual: 30,
                    reason: "fee_amount is 30 but the FEE lines sum to 25 (+5)")
            ])
    }

    @Test("The reversal figure is REVERSAL less REVERSAL_MERCHANT_PROTECTION")
    func reversalNet() {
        let lines = everyLine.filter { $0.kind != .reversalMerchantProtection }
        let findings = PayoutFormula.check(payout(everyTerm), lines: lines)
        #expect(
            findings == [
                SettlementFinding(
                    kind: .totalsMismatch, paymentReference: "P1", figure: .reversal, expected: 60, actual: 50,
                    reason: "reversal_amount is 50 but the REVERSAL lines less the REVERSAL_MERCHANT_PROTECTION lines sum to 60 (-10)")
            ])
    }

    @Test("An absent tax_amount counts as 0: VAT on the lines then shows as the tax figure differing")
    func absentTax() {
        let totals = SettledTotals(saleAmount: 500_000, feeAmount: 12_000, settlementAmount: 488_000)
        let lines = [line(0, .sale, 500_000), line(1, .fee, 12_000, vat: 3_000)]
        #expect(
            PayoutFormula.check(payout(totals), lines: lines) == [
                SettlementFinding(
                    kind: .totalsMismatch, paymentReference: "P1", figure: .tax, expected: 3_000, actual: 0,
                    reason: "tax_amount is 0 (absent) but the lines' vat_amount (and TAX lines) sum to 3000 (-3000)")
            ])
    }

    @Test("A payout of nothing adds up")
    func empty() {
        #expect(PayoutFormula.check(payout(SettledTotals(settlementAmount: 0)), lines: []) == [])
        #expect(PayoutFigures(totals: SettledTotals(settlementAmount: 0)).formulaText == "0")
    }
}
