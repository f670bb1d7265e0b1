import Foundation

/// One payout matched against the ledger: every line and what it matched, the findings, and the payout's figures
/// as its lines and its totals give them. Stored as JSON; ``report`` is what `klarna-reconciler settlements` shows.
public struct PayoutReconciliation: Codable, Sendable, Equatable {
    public var payout: SettledPayout
    /// In ordinal order.
    public var lines: [LineReconciliation]
    /// Line findings in the order of their first line, then the payout's totals findings.
    public var findings: [SettlementFinding]
    /// The figures the lines give (``PayoutFigures/init(lines:totals:)``).
    public var fromLines: PayoutFigures
    /// The payout's totals as the formula reads them (``PayoutFigures/init(totals:)``).
    public var totals: PayoutFigures
    /// The Klarna account whose payout this is: its sync listed it.
    public var account: AccountID {
        get { storedAccount ?? .default }
        set { storedAccount = newValue == .default ? nil : newValue }
    }
    /// Absent for the default account: payouts recorded before accounts read as its, and its JSON stays as it was.
    private var storedAccount: AccountID?

    enum CodingKeys: String, CodingKey {
        case payout, lines, findings, fromLines, totals
        case storedAccount = "account"
    }

    public init(
        payout: SettledPayout, lines: [LineReconciliation], findings: [SettlementFinding], fromLines: PayoutFigures,
        totals: PayoutFigures
    ) {
        self.payout = payout
        self.lines = lines
        self.findings = findings
        self.fromLines = fromLines
        self.totals = totals
    }

    /// Lines matched to a capture, a refund or an order.
    public var matchedCount: Int { lines.filter { $0.match.isMatched }.count }
    public var payoutLevelCount: Int { lines.filter { $0.match == .payoutLevel }.count }
    public var unmatchedCount: Int { lines.filter { $0.match.unmatchedReason != nil }.count }

    public func findings(_ kind: SettlementFindingKind) -> [SettlementFinding] {
        findings.filter { $0.kind == kind }
    }

    /// The captures this payout settled, each with the first line that did: the store records them as
    /// ``LedgerCapture/settledBy`` (a capture settled never counts as unsettled again, and a later SALE for it is a
    /// duplicate). A capture another payout had settled when this one was matched is not among them; one that was
    /// unsettled then must still be when the store records this payout, or the match is stale (another daemon
    /// recorded a payout settling it meanwhile) and is made again.
    public var settledCaptures: [CaptureKey: SettledLineKey] {
        var first: [CaptureKey: LineReconciliation] = [:]
        for line in lines {
            if case .capture(let key, _) = line.match, first[key] == nil { first[key] = line }
        }
        return first.filter { $0.value.settledElsewhere == nil }.mapValues(\.line.key)
    }

    /// The refunds this payout settled, each with the first line that did.
    public var settledRefunds: [RefundKey: SettledLineKey] {
        var first: [RefundKey: LineReconciliation] = [:]
        for line in lines {
            if case .refund(let key, _) = line.match, first[key] == nil { first[key] = line }
        }
        return first.filter { $0.value.settledElsewhere == nil }.mapValues(\.line.key)
    }

    /// Plain values for the CLI (text, JSON, CSV).
    public var report: PayoutReport {
        var corrections = 0
        var otherTypes = 0
        for line in lines where line.line.kind == .correction || !line.line.kind.isKnown {
            if line.line.kind == .correction {
                corrections = Minor.add(corrections, line.signedAmount)
            } else {
                otherTypes = Minor.add(otherTypes, line.signedAmount)
            }
        }
        let unmatched: [UnmatchedLine] = lines.compactMap { line in
            guard let reason = line.match.unmatchedReason else { return nil }
            return UnmatchedLine(
                ordinal: line.line.ordinal, kind: line.line.kind, orderID: line.line.orderIDGiven,
                captureID: line.line.captureIDGiven, refundID: line.line.refundIDGiven, amount: line.signedAmount,
                reason: reason, explanation: line.note)
        }
        return PayoutReport(
            account: account, paymentReference: payout.paymentReference, payoutDate: payout.payoutDate, currency: payout.currency,
            settlementType: payout.settlementType, lineCount: lines.count, matchedCount: matchedCount,
            payoutLevelCount: payoutLevelCount, unmatchedCount: unmatchedCount, sales: fromLines.sale,
            returns: fromLines.returns, reversals: fromLines.reversal, feeAmount: fromLines.fee, feeTax: fromLines.tax,
            fees: Minor.add(fromLines.fee, fromLines.tax), feeRefunds: fromLines.feeRefund,
            commission: fromLines.commission, charges: fromLines.charge, credits: fromLines.credit,
            holdback: fromLines.holdback, release: fromLines.release, corrections: corrections, otherTypes: otherTypes,
            net: payout.totals.settlementAmount, netFromLines: fromLines.settlement, findingCount: findings.count,
            unmatched: unmatched, findings: findings)
    }
}

/// A line that matched nothing, as the CLI lists it.
public struct UnmatchedLine: Codable, Sendable, Equatable {
    public var ordinal: Int
    public var kind: SettlementKind
    public var orderID: String?
    public var captureID: String?
    public var refundID: String?
    /// Signed by type.
    public var amount: Int
    public var reason: UnmatchedReason
    public var explanation: String

    public init(
        ordinal: Int, kind: SettlementKind, orderID: String?, captureID: String?, refundID: String?, amount: Int,
        reason: UnmatchedReason, explanation: String
    ) {
        self.ordinal = ordinal
        self.kind = kind
        self.orderID = orderID
        self.captureID = captureID
        self.refundID = refundID
        self.amount = amount
        self.reason = reason
        self.explanation = explanation
    }
}

/// A payout in plain values: what `klarna-reconciler settlements` prints as text, JSON or CSV. Amounts are minor
/// units; the figures are what the lines sum to (magnitudes, as in Klarna's formula), `net` is Klarna's
/// `settlement_amount` and `netFromLines` the formula over the lines.
public struct PayoutReport: Codable, Sendable, Equatable {
    /// The Klarna account the payout was paid to.
    public var account: AccountID
    public var paymentReference: String
    public var payoutDate: Date
    public var currency: String
    public var settlementType: String
    public var lineCount: Int
    /// Lines matched to a capture, a refund or an order.
    public var matchedCount: Int
    public var payoutLevelCount: Int
    public var unmatchedCount: Int
    public var sales: Int
    public var returns: Int
    /// REVERSAL less REVERSAL_MERCHANT_PROTECTION.
    public var reversals: Int
    /// The FEE lines.
    public var feeAmount: Int
    /// VAT on the fees (Σ `vat_amount`, and any TAX line).
    public var feeTax: Int
    /// The fees with their VAT.
    public var fees: Int
    public var feeRefunds: Int
    public var commission: Int
    public var charges: Int
    public var credits: Int
    public var holdback: Int
    public var release: Int
    /// CORRECTION lines, as sent (outside the formula).
    public var corrections: Int
    /// Lines of types not known, as sent (outside the formula).
    public var otherTypes: Int
    /// Klarna's `settlement_amount`: what the payout pays.
    public var net: Int
    /// Klarna's formula over the lines (with `fee_correction` and `repay` from the totals).
    public var netFromLines: Int
    public var findingCount: Int
    public var unmatched: [UnmatchedLine]
    public var findings: [SettlementFinding]

    public init(
        account: AccountID = .default, paymentReference: String, payoutDate: Date, currency: String, settlementType: String, lineCount: Int,
        matchedCount: Int, payoutLevelCount: Int, unmatchedCount: Int, sales: Int, returns: Int, reversals: Int,
        feeAmount: Int, feeTax: Int, fees: Int, feeRefunds: Int, commission: Int, charges: Int, credits: Int,
        holdback: Int, release: Int, corrections: Int, otherTypes: Int, net: Int, netFromLines: Int, findingCount: Int,
        unmatched: [UnmatchedLine], findings: [SettlementFinding]
    ) {
        self.account = account
        self.paymentReference = paymentReference
        self.payoutDate = payoutDate
        self.currency = currency
        self.settlementType = settlementType
        self.lineCount = lineCount
        self.matchedCount = matchedCount
        self.payoutLevelCount = payoutLevelCount
        self.unmatchedCount = unmatchedCount
        self.sales = sales
        self.returns = returns
        self.reversals = reversals
        self.feeAmount = feeAmount
        self.feeTax = feeTax
        self.fees = fees
        self.feeRefunds = feeRefunds
        self.commission = commission
        self.charges = charges
        self.credits = credits
        self.holdback = holdback
        self.release = release
        self.corrections = corrections
        self.otherTypes = otherTypes
        self.net = net
        self.netFromLines = netFromLines
        self.findingCount = findingCount
        self.unmatched = unmatched
        self.findings = findings
    }

    /// The names of ``columnValues``, one row per payout (a CSV header).
    public static let columns: [String] = [
        "payment_reference", "payout_date", "currency", "settlement_type", "lines", "matched", "payout_level",
        "unmatched", "sales", "returns", "reversals", "fee_amount", "fee_tax", "fees", "fee_refunds", "commission",
        "charges", "credits", "holdback", "release", "corrections", "other_types", "net", "net_from_lines", "findings", "account",
    ]

    /// The payout as one row of plain strings (minor units, the date in ISO 8601 UTC), in ``columns`` order.
    public var columnValues: [String] {
        [
            paymentReference, payoutDate.formatted(Date.ISO8601FormatStyle()), currency, settlementType,
            "\(lineCount)", "\(matchedCount)", "\(payoutLevelCount)", "\(unmatchedCount)", "\(sales)",
            "\(returns)", "\(reversals)", "\(feeAmount)", "\(feeTax)", "\(fees)", "\(feeRefunds)",
            "\(commission)", "\(charges)", "\(credits)", "\(holdback)", "\(release)",
            "\(corrections)", "\(otherTypes)", "\(net)", "\(netFromLines)", "\(findingCount)", account.rawValue,
        ]
    }
}
