import Foundation

/// A payout's figures in the terms of Klarna's formula (Klarna's Settlements API reference): each a magnitude the formula adds or
/// subtracts, except `reversal` (REVERSAL less REVERSAL_MERCHANT_PROTECTION), `feeCorrection` and `settlement`,
/// which may go either way and are taken as sent.
///
/// Klarna documents neither the sign of its totals nor of its lines, so a directional total is read by its magnitude,
/// as the lines are (``SettlementKind/signed(_:)``): a `return_amount` of `-20000` or `20000` is a return of 20000.
public struct PayoutFigures: Codable, Sendable, Equatable {
    public var sale: Int
    public var returns: Int
    public var reversal: Int
    public var fee: Int
    public var tax: Int
    public var feeCorrection: Int
    public var commission: Int
    public var charge: Int
    public var credit: Int
    public var repay: Int
    public var holdback: Int
    public var release: Int
    public var feeRefund: Int
    public var settlement: Int

    public init(
        sale: Int = 0, returns: Int = 0, reversal: Int = 0, fee: Int = 0, tax: Int = 0, feeCorrection: Int = 0,
        commission: Int = 0, charge: Int = 0, credit: Int = 0, repay: Int = 0, holdback: Int = 0, release: Int = 0,
        feeRefund: Int = 0, settlement: Int = 0
    ) {
        self.sale = sale
        self.returns = returns
        self.reversal = reversal
        self.fee = fee
        self.tax = tax
        self.feeCorrection = feeCorrection
        self.commission = commission
        self.charge = charge
        self.credit = credit
        self.repay = repay
        self.holdback = holdback
        self.release = release
        self.feeRefund = feeRefund
        self.settlement = settlement
    }

    /// The payout's totals as the formula reads them; an absent `tax_amount` or `fee_correction_amount` is 0.
    public init(totals: SettledTotals) {
        // reversal_amount is a net (REVERSAL less merchant-protection credits), so its magnitude would lose its sign:
        // it is read in the convention the payout's other debits show (Klarna documents neither).
        let debitsNegative = [totals.returnAmount, totals.feeAmount, totals.chargeAmount, totals.holdbackAmount, totals.repayAmount]
            .contains { $0 < 0 }
        self.init(
            sale: Minor.magnitude(totals.saleAmount), returns: Minor.magnitude(totals.returnAmount),
            reversal: debitsNegative ? Minor.subtract(0, totals.reversalAmount) : totals.reversalAmount,
            fee: Minor.magnitude(totals.feeAmount),
            tax: Minor.magnitude(totals.taxAmount ?? 0), feeCorrection: totals.feeCorrectionAmount ?? 0,
            commission: Minor.magnitude(totals.commissionAmount), charge: Minor.magnitude(totals.chargeAmount),
            credit: Minor.magnitude(totals.creditAmount), repay: Minor.magnitude(totals.repayAmount),
            holdback: Minor.magnitude(totals.holdbackAmount), release: Minor.magnitude(totals.releaseAmount),
            feeRefund: Minor.magnitude(totals.feeRefundAmount), settlement: totals.settlementAmount)
    }

    /// What the lines give, summed by type: tax is every line's `vat_amount` (and any TAX line, unverified);
    /// CORRECTION and types not known are outside the formula. `fee_correction` and `repay` exist only as totals
    /// and are taken from `totals`; `settlement` is the formula over the rest (the payout the lines account for).
    public init(lines: [SettledLine], totals: SettledTotals) {
        var figures = PayoutFigures()
        for line in lines {
            let amount = Minor.magnitude(line.amount)
            if let vat = line.vatAmount { figures.tax = Minor.add(figures.tax, Minor.magnitude(vat)) }
            switch line.kind.rawValue {
            case "SALE": figures.sale = Minor.add(figures.sale, amount)
            case "RETURN": figures.returns = Minor.add(figures.returns, amount)
            case "REVERSAL": figures.reversal = Minor.add(figures.reversal, amount)
            case "REVERSAL_MERCHANT_PROTECTION": figures.reversal = Minor.subtract(figures.reversal, amount)
            case "FEE": figures.fee = Minor.add(figures.fee, amount)
            case "TAX": figures.tax = Minor.add(figures.tax, amount)
            case "COMMISSION": figures.commission = Minor.add(figures.commission, amount)
            case "CHARGE": figures.charge = Minor.add(figures.charge, amount)
            case "CREDIT": figures.credit = Minor.add(figures.credit, amount)
            case "HOLDBACK": figures.holdback = Minor.add(figures.holdback, amount)
            case "RELEASE": figures.release = Minor.add(figures.release, amount)
            case "FEE_REFUND": figures.feeRefund = Minor.add(figures.feeRefund, amount)
            default: break
            }
        }
        figures.feeCorrection = totals.feeCorrectionAmount ?? 0
        figures.repay = Minor.magnitude(totals.repayAmount)
        figures.settlement = figures.formulaSettlement
        self = figures
    }

    public func value(_ figure: PayoutFigure) -> Int {
        switch figure {
        case .sale: return sale
        case .returns: return returns
        case .reversal: return reversal
        case .fee: return fee
        case .tax: return tax
        case .feeCorrection: return feeCorrection
        case .commission: return commission
        case .charge: return charge
        case .credit: return credit
        case .repay: return repay
        case .holdback: return holdback
        case .release: return release
        case .feeRefund: return feeRefund
        case .settlement: return settlement
        }
    }

    /// Klarna's formula: sale − return − reversal − fee + fee_correction + commission − tax − charge + credit − repay
    /// − holdback + release + fee_refund.
    public var formulaSettlement: Int {
        formulaTerms.reduce(0) { sum, term in term.adds ? Minor.add(sum, term.value) : Minor.subtract(sum, term.value) }
    }

    /// One term of the formula: a figure and whether it adds to the payout or takes from it.
    struct FormulaTerm {
        let figure: PayoutFigure
        let value: Int
        let adds: Bool
    }

    var formulaTerms: [FormulaTerm] {
        [
            FormulaTerm(figure: .sale, value: sale, adds: true),
            FormulaTerm(figure: .returns, value: returns, adds: false),
            FormulaTerm(figure: .reversal, value: reversal, adds: false),
            FormulaTerm(figure: .fee, value: fee, adds: false),
            FormulaTerm(figure: .feeCorrection, value: feeCorrection, adds: true),
            FormulaTerm(figure: .commission, value: commission, adds: true),
            FormulaTerm(figure: .tax, value: tax, adds: false),
            FormulaTerm(figure: .charge, value: charge, adds: false),
            FormulaTerm(figure: .credit, value: credit, adds: true),
            FormulaTerm(figure: .repay, value: repay, adds: false),
            FormulaTerm(figure: .holdback, value: holdback, adds: false),
            FormulaTerm(figure: .release, value: release, adds: true),
            FormulaTerm(figure: .feeRefund, value: feeRefund, adds: true),
        ]
    }

    /// The formula's non-zero terms in words: `sale 500000 - return 20000 - fee 12000 - tax 3000`.
    public var formulaText: String {
        var text = ""
        for term in formulaTerms where term.value != 0 {
            let name = "\(term.figure.shortName) \(term.value)"
            if text.isEmpty {
                text = term.adds ? name : "- \(name)"
            } else {
                text += term.adds ? " + \(name)" : " - \(name)"
            }
        }
        return text.isEmpty ? "0" : text
    }
}

extension PayoutFigure {
    /// `sale_amount` → `sale`.
    public var shortName: String {
        let suffix = "_amount"
        let raw = rawValue
        return raw.hasSuffix(suffix) ? String(raw.dropLast(suffix.count)) : raw
    }
}

/// Whether a payout adds up: its totals by Klarna's formula, and its lines summed by type against its totals.
public enum PayoutFormula {
    /// A ``SettlementFindingKind/totalsMismatch`` for the settlement amount when the totals do not add up by the
    /// formula, and one for each figure whose lines do not sum to its total. `lines` must be all of the payout's
    /// transactions. Expected is what the formula or the lines give, actual what the total says.
    public static func check(_ payout: SettledPayout, lines: [SettledLine]) -> [SettlementFinding] {
        let totals = PayoutFigures(totals: payout.totals)
        let fromLines = PayoutFigures(lines: lines, totals: payout.totals)
        var findings: [SettlementFinding] = []

        let formula = totals.formulaSettlement
        if formula != totals.settlement {
            let delta = Minor.signedText(Minor.subtract(totals.settlement, formula))
            findings.append(
                SettlementFinding(
                    kind: .totalsMismatch, paymentReference: payout.paymentReference, figure: .settlement, expected: formula,
                    actual: totals.settlement,
                    reason:
                        "settlement_amount is \(totals.settlement) but Klarna's formula over the totals gives \(formula) (\(delta)): \(totals.formulaText)"
                ))
        }
        for figure in PayoutFigure.fromLines {
            let expected = fromLines.value(figure)
            let actual = totals.value(figure)
            guard expected != actual else { continue }
            let absent = (figure == .tax && payout.totals.taxAmount == nil) ? " (absent)" : ""
            let delta = Minor.signedText(Minor.subtract(actual, expected))
            findings.append(
                SettlementFinding(
                    kind: .totalsMismatch, paymentReference: payout.paymentReference, figure: figure, expected: expected,
                    actual: actual,
                    reason: "\(figure.rawValue) is \(actual)\(absent) but \(figure.linesDescription) sum to \(expected) (\(delta))"))
        }
        return findings
    }
}
