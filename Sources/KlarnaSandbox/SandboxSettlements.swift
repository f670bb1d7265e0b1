import Foundation

/// What Klarna has paid out, what it will pay next, and the mismatches a test asked it to make. Part of
/// ``SandboxState``, so mutated only under ``KlarnaSandbox``'s lock.
struct SettlementLedger {
    /// Whose payout in which currency: Klarna pays each merchant out per currency.
    struct Account: Hashable, Comparable {
        let merchant: String
        let currency: String

        static func < (lhs: Account, rhs: Account) -> Bool { (lhs.merchant, lhs.currency) < (rhs.merchant, rhs.currency) }
    }

    /// A SALE for an order the sandbox never placed, waiting for the next payout of its merchant in its currency.
    struct InventedSale {
        let merchant: String
        let orderID: String
        let captureID: String
        let amount: Int
        let currency: String
        let purchaseCountry: String
        let at: Date
    }

    /// Payouts every `every` seconds, run lazily when a settlements route is read (as HPP schedules are).
    struct Schedule {
        let every: TimeInterval
        let spec: PayoutSpec
        var next: Date
    }

    /// The primary merchant's id.
    static let merchantID = "K100001"
    static let registrationCurrency = "SEK"
    static let settlementType = "NET"

    /// In the order they were made.
    var payouts: [CreatedPayout] = []
    /// Capture and refund ids already in a payout.
    var settled: Set<String> = []
    /// Capture ids never to be paid out.
    var omitted: Set<String> = []
    /// Capture id → what its SALE carries on top of the captured amount.
    var alterations: [String: Int] = [:]
    var invented: [InventedSale] = []
    /// Added to the next payout's `settlement_amount`, so that it breaks Klarna's formula.
    var totalsError = 0
    /// Held back by earlier payouts and not released, by merchant and currency.
    var heldBack: [Account: Int] = [:]
    /// Reversals made so far, numbering their dispute references.
    var disputes = 0
    /// The disputes' fees, holds and reversals (SandboxDisputeMoney.swift).
    var disputeMoney = DisputeMoney()
    var schedule: Schedule?

    /// Not paid out yet, nor kept out of every payout.
    func payable(capture id: String) -> Bool { !settled.contains(id) && !omitted.contains(id) }
}

extension SandboxState {
    /// Pays out at `date`, one payout per merchant and currency (its orders' currency): every capture and refund made
    /// by `date − spec.delaySeconds` and not paid out yet (less omitted captures), invented sales, and the spec's
    /// reversals, corrections, holdback and release. A merchant and currency with nothing to pay get no payout.
    /// Reversal and correction orders must exist.
    mutating func settle(_ spec: PayoutSpec, at date: Date) -> [CreatedPayout] {
        let cutoff = date.addingTimeInterval(-spec.delaySeconds)
        let ledger = settlements
        var sales: [(order: Order, capture: Capture)] = []
        var returns: [(order: Order, refund: Refund)] = []
        for order in orders.values {
            for capture in order.captures where capture.at <= cutoff && ledger.payable(capture: capture.id) {
                sales.append((order: order, capture: capture))
            }
            for refund in order.refunds where refund.at <= cutoff && !ledger.settled.contains(refund.id) {
                returns.append((order: order, refund: refund))
            }
        }
        sales.sort { ($0.capture.at, $0.capture.id) < ($1.capture.at, $1.capture.id) }
        returns.sort { ($0.refund.at, $0.refund.id) < ($1.refund.at, $1.refund.id) }
        let reversals = orderAmounts(spec.reversals)
        let corrections = orderAmounts(spec.corrections)
        let releases: [SettlementLedger.Account: Int] = spec.releaseHoldbacks ? ledger.heldBack.filter { $0.value != 0 } : [:]

        var accounts = Set(sales.map { $0.order.account })
        accounts.formUnion(returns.map { $0.order.account })
        accounts.formUnion(ledger.invented.map(\.account))
        accounts.formUnion(reversals.map { $0.order.account })
        accounts.formUnion(corrections.map { $0.order.account })
        accounts.formUnion(releases.keys)
        catchUpDisputes(now: date)
        accounts.formUnion(disputeMoneyAccounts(by: date))

        var created: [CreatedPayout] = []
        for account in accounts.sorted() {
            var payout = PayoutBuilder(reference: newPaymentReference(), currency: account.currency, date: date, spec: spec)
            for sale in sales where sale.order.account == account {
                // Cannot overflow: a capture is at most its order's amount and an alteration within ±that bound
                // (createSession and alterSettledAmount refuse more).
                payout.sale(
                    settledOrder(sale.order), captureID: sale.capture.id,
                    amount: sale.capture.amount + (ledger.alterations[sale.capture.id] ?? 0), capturedAt: sale.capture.at,
                    captureReference: sale.capture.reference)
                settlements.settled.insert(sale.capture.id)
            }
            for sale in ledger.invented where sale.account == account {
                let order = SettledOrder(
                    id: sale.orderID, shortID: nil, merchantReference: nil, createdAt: sale.at,
                    purchaseCountry: sale.purchaseCountry)
                payout.sale(order, captureID: sale.captureID, amount: sale.amount, capturedAt: sale.at, captureReference: nil)
            }
            for item in returns where item.order.account == account {
                payout.refund(
                    settledOrder(item.order), refundID: item.refund.id, amount: item.refund.amount,
                    refundedAt: item.refund.at, refundReference: item.refund.reference)
                settlements.settled.insert(item.refund.id)
            }
            for reversal in reversals where reversal.order.account == account {
                settlements.disputes += 1
                payout.reversal(settledOrder(reversal.order), amount: reversal.amount, dispute: settlements.disputes)
            }
            addDisputeMoney(account, by: date, to: &payout)
            for correction in corrections where correction.order.account == account {
                payout.correction(settledOrder(correction.order), amount: correction.amount)
            }
            if let released = releases[account] {
                payout.release(released)
                settlements.heldBack[account, default: 0] -= released
            }
            if spec.holdback != 0 {
                payout.holdback(spec.holdback)
                settlements.heldBack[account] = settlements.heldBack[account, default: 0].addingSaturated(spec.holdback)
            }
            var totals = SandboxSettlementTotals(payout.transactions)
            totals.settlementAmount = totals.settlementAmount.addingSaturated(settlements.totalsError)
            settlements.totalsError = 0
            let made = CreatedPayout(
                paymentReference: payout.reference, merchantId: account.merchant, payoutDate: date, currencyCode: account.currency,
                totals: totals, transactions: payout.transactions)
            settlements.payouts.append(made)
            created.append(made)
        }
        settlements.invented = []
        return created
    }

    /// Runs the payouts a schedule owes by `now`, each dated at its own run, skipping the runs with nothing to pay
    /// (so a clock moved by months costs one pass per payout, not one per run).
    mutating func catchUpSettlements(now: Date) {
        guard var schedule = settlements.schedule else { return }
        while schedule.next <= now {
            guard let due = earliestDue(schedule.spec) else {
                let runs = (now.timeIntervalSince(schedule.next) / schedule.every).rounded(.down) + 1
                schedule.next = schedule.next.addingTimeInterval(runs * schedule.every)
                break
            }
            if due > schedule.next {
                let runs = (due.timeIntervalSince(schedule.next) / schedule.every).rounded(.up)
                schedule.next = schedule.next.addingTimeInterval(max(1, runs) * schedule.every)
                continue
            }
            _ = settle(schedule.spec, at: schedule.next)
            schedule.next = schedule.next.addingTimeInterval(schedule.every)
        }
        settlements.schedule = schedule
    }

    /// The first moment a payout under `spec` would have something to pay; `nil` when nothing is waiting.
    private func earliestDue(_ spec: PayoutSpec) -> Date? {
        let ledger = settlements
        // Held-back money makes a payout due only when the spec holds nothing back again (else every run would
        // release and hold the same amount, a payout of nothing each time).
        let releasable = spec.releaseHoldbacks && spec.holdback == 0 && ledger.heldBack.values.contains(where: { $0 != 0 })
        if !ledger.invented.isEmpty || releasable {
            return .distantPast
        }
        var earliest = earliestDisputeMoney
        for order in orders.values {
            let captures = order.captures.filter { ledger.payable(capture: $0.id) }
            let refunds = order.refunds.filter { !ledger.settled.contains($0.id) }
            for at in captures.map(\.at) + refunds.map(\.at) {
                let due = at.addingTimeInterval(spec.delaySeconds)
                if earliest.map({ due < $0 }) ?? true { earliest = due }
            }
        }
        return earliest
    }

    /// The orders named in a reversal or correction map, in order id order; unknown ids are left out.
    private func orderAmounts(_ amounts: [String: Int]) -> [(order: Order, amount: Int)] {
        amounts.sorted { $0.key < $1.key }.compactMap { entry in orders[entry.key].map { (order: $0, amount: entry.value) } }
    }

    func settledOrder(_ order: Order) -> SettledOrder {
        SettledOrder(
            id: order.id, shortID: order.klarnaReference, merchantReference: order.merchantReference,
            createdAt: order.createdAt, purchaseCountry: paymentSessions[order.kpSessionID]?.purchaseCountry)
    }

    private func newPaymentReference() -> String {
        var reference = Self.klarnaReference()
        while settlements.payouts.contains(where: { $0.paymentReference == reference }) { reference = Self.klarnaReference() }
        return reference
    }
}

extension SandboxState.Order {
    /// The payout its money goes into.
    var account: SettlementLedger.Account { SettlementLedger.Account(merchant: merchant, currency: currency) }
}

extension SettlementLedger.InventedSale {
    var account: SettlementLedger.Account { SettlementLedger.Account(merchant: merchant, currency: currency) }
}

/// What a settlement row repeats about its order.
struct SettledOrder {
    let id: String
    let shortID: String?
    let merchantReference: String?
    let createdAt: Date
    let purchaseCountry: String?
}

/// The rows of one payout, in the order Klarna lists them: each SALE followed by its FEEs.
struct PayoutBuilder {
    let reference: String
    let currency: String
    let date: Date
    let spec: PayoutSpec
    var transactions: [SandboxSettlementTransaction] = []

    mutating func sale(_ order: SettledOrder, captureID: String, amount: Int, capturedAt: Date, captureReference: String?) {
        var sale = row("SALE", "PURCHASE", amount: amount, order: order, at: capturedAt)
        sale.captureId = captureID
        sale.merchantCaptureReference = captureReference
        transactions.append(sale)
        fee("PURCHASE_FEE_PERCENTAGE", Self.share(of: amount, basisPoints: spec.feeBasisPoints), on: sale)
        fee("PURCHASE_FEE_FIXED", spec.fixedFee, on: sale)
    }

    mutating func refund(_ order: SettledOrder, refundID: String, amount: Int, refundedAt: Date, refundReference: String?) {
        var item = row("RETURN", "PURCHASE_RETURN", amount: amount, order: order, at: refundedAt)
        item.captureId = ""
        item.refundId = refundID
        item.merchantRefundReference = refundReference
        transactions.append(item)
    }

    mutating func reversal(_ order: SettledOrder, amount: Int, dispute: Int) {
        reversal(order, amount: amount, reference: "krn:klarna:eu1:dispute:fraud:\(dispute)")
    }

    /// A dispute lost: the amount back to the customer; `reference`: the dispute.
    mutating func reversal(_ order: SettledOrder, amount: Int, reference: String) {
        var item = row("REVERSAL", "REVERSAL", amount: amount, order: order, at: date)
        item.captureId = ""
        item.refundId = UUID().uuidString.lowercased()
        item.reversalReference = reference
        transactions.append(item)
    }

    mutating func correction(_ order: SettledOrder, amount: Int) {
        var item = row("CORRECTION", "CORRECTION", amount: amount, order: order, at: date)
        item.captureId = ""
        transactions.append(item)
    }

    mutating func holdback(_ amount: Int, detailedType: String = "ROLLING_RESERVE") {
        transactions.append(row("HOLDBACK", detailedType, amount: amount, order: nil, at: date))
    }

    mutating func release(_ amount: Int, detailedType: String = "ROLLING_RESERVE") {
        transactions.append(row("RELEASE", detailedType, amount: amount, order: nil, at: date))
    }

    /// A Klarna fee on `sale`, repeating its order and capture, with VAT on the fee; none when it comes to nothing.
    private mutating func fee(_ detailedType: String, _ amount: Int, on sale: SandboxSettlementTransaction) {
        guard amount > 0 else { return }
        var fee = sale
        fee.type = "FEE"
        fee.detailedType = detailedType
        fee.amount = amount
        fee.vatRate = spec.feeVATBasisPoints
        fee.vatAmount = Self.share(of: amount, basisPoints: spec.feeVATBasisPoints)
        transactions.append(fee)
    }

    func row(_ type: String, _ detailedType: String, amount: Int, order: SettledOrder?, at: Date) -> SandboxSettlementTransaction {
        SandboxSettlementTransaction(
            type: type, detailedType: detailedType, amount: amount, currencyCode: currency, paymentReference: reference,
            saleDate: order?.createdAt ?? at, captureDate: at, orderId: order?.id, shortOrderId: order?.shortID,
            merchantReference1: order?.merchantReference, purchaseCountry: order?.purchaseCountry)
    }

    /// `basisPoints` ten-thousandths of `amount`, rounded half away from zero. The controls keep amounts within a few
    /// times ``KlarnaSandbox/maximumAmount`` and basis points within 0…10,000, so the share fits an `Int` by far; it
    /// is held at the limits all the same, since `Int(_:)` of a `Double` beyond them traps.
    static func share(of amount: Int, basisPoints: Int) -> Int {
        let share = (Double(amount) * Double(basisPoints) / 10_000).rounded()
        return Int(exactly: share) ?? (share < 0 ? .min : .max)
    }
}

extension SandboxSettlementTotals {
    /// Klarna's totals of `transactions`, `settlementAmount` by the payout formula (Klarna's Settlements API reference). CORRECTION
    /// rows count in no total; `tax` is the VAT on fees. Every amount a control records is bounded, so only millions
    /// of rows could reach `Int`'s limits; the sums are held there rather than trap (the payout is then wrong, the
    /// sandbox still up).
    init(_ transactions: [SandboxSettlementTransaction]) {
        self.init()
        for item in transactions {
            switch item.type {
            case "SALE": saleAmount = saleAmount.addingSaturated(item.amount)
            case "RETURN": returnAmount = returnAmount.addingSaturated(item.amount)
            case "REVERSAL": reversalAmount = reversalAmount.addingSaturated(item.amount)
            case "REVERSAL_MERCHANT_PROTECTION": reversalAmount = reversalAmount.subtractingSaturated(item.amount)
            case "FEE": feeAmount = feeAmount.addingSaturated(item.amount)
            case "FEE_REFUND": feeRefundAmount = feeRefundAmount.addingSaturated(item.amount)
            case "COMMISSION": commissionAmount = commissionAmount.addingSaturated(item.amount)
            case "CHARGE": chargeAmount = chargeAmount.addingSaturated(item.amount)
            case "CREDIT": creditAmount = creditAmount.addingSaturated(item.amount)
            case "HOLDBACK": holdbackAmount = holdbackAmount.addingSaturated(item.amount)
            case "RELEASE": releaseAmount = releaseAmount.addingSaturated(item.amount)
            default: break
            }
            taxAmount = taxAmount.addingSaturated(item.vatAmount ?? 0)
        }
        // sale − return − reversal − fee + fee correction + commission − tax − charge + credit − repay − holdback
        // + release + fee refund.
        let credits = [saleAmount, feeCorrectionAmount, commissionAmount, creditAmount, releaseAmount, feeRefundAmount]
        let debits = [returnAmount, reversalAmount, feeAmount, taxAmount, chargeAmount, repayAmount, holdbackAmount]
        settlementAmount = debits.reduce(credits.reduce(0) { $0.addingSaturated($1) }) { $0.subtractingSaturated($1) }
    }
}

extension Int {
    /// `self + other`, held at `Int.min` or `Int.max` instead of trapping.
    func addingSaturated(_ other: Int) -> Int {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other < 0 ? .min : .max) : sum
    }

    /// `self − other`, held at `Int.min` or `Int.max` instead of trapping.
    func subtractingSaturated(_ other: Int) -> Int {
        let (difference, overflow) = subtractingReportingOverflow(other)
        return overflow ? (other < 0 ? .max : .min) : difference
    }
}
