import Foundation

/// Matches one payout's lines against the shop's ledger (Klarna's Settlements API reference): SALE ↔ capture by order id and
/// capture id, RETURN ↔ refund by order id and refund id, FEE, COMMISSION, TAX, REVERSAL and the like to their
/// order; HOLDBACK, RELEASE, CHARGE, CREDIT and lines without an order id are the payout's own. Pure: it decides and
/// says why; recording what it found (and never "fixing" the ledger) is the caller's.
///
/// Rules:
/// - A SALE without a capture id (or a RETURN without a refund id) takes the order's only capture (refund) of its
///   amount that nothing has settled yet, and says so (`byAmount`); none is ``SettlementFindingKind/unknownCapture``
///   (``SettlementFindingKind/unknownRefund``), several is ``SettlementFindingKind/ambiguousMatch``. Lines with ids
///   are matched first, so an id-less line never takes a capture a later line names.
/// - A capture or refund two lines of the payout settle, or one another payout settled before
///   (``LedgerCapture/settledBy``), is a ``SettlementFindingKind/duplicateSettlement``; matching the same payout
///   again is not.
/// - Every line of an order the ledger does not know is an orphan, one ``SettlementFindingKind/orphan`` per order;
///   a SALE or RETURN without an order id is one too. Payout-level types are never orphans.
/// - Amounts are compared by magnitude (Klarna's JSON sign is not documented); currencies ignoring case.
public enum SettlementMatcher {
    /// The order ids the lines name: what the caller loads from its store before matching (a payout's orders, not
    /// the whole ledger).
    public static func orderIDs(in lines: [SettledLine]) -> Set<String> {
        Set(lines.compactMap { $0.orderIDGiven })
    }

    /// Matches with the orders loaded beforehand (``orderIDs(in:)``); an order missing from `orders` is unknown.
    public static func reconcile(
        payout: SettledPayout, lines: [SettledLine], orders: [String: LedgerOrder]
    ) -> PayoutReconciliation {
        reconcile(payout: payout, lines: lines, ledger: { orders[$0] })
    }

    /// Matches `lines` (all of the payout's transactions, in any order) against the ledger, asking `ledger` once per
    /// order id for what the shop knows of that order (nil: unknown).
    public static func reconcile(
        payout: SettledPayout, lines: [SettledLine], ledger: (String) -> LedgerOrder?
    ) -> PayoutReconciliation {
        let sorted = lines.sorted { $0.ordinal < $1.ordinal }
        var orders: [String: LedgerOrder] = [:]
        for orderID in orderIDs(in: sorted) {
            if let order = ledger(orderID) { orders[orderID] = order }
        }
        var matching = Matching(payout: payout, lines: sorted, orders: orders)
        return matching.run()
    }
}

/// One run of the matcher over one payout.
private struct Matching {
    let payout: SettledPayout
    let lines: [SettledLine]
    let orders: [String: LedgerOrder]

    var results: [LineReconciliation]
    /// Findings about lines, with the ordinal they sort by and the order they were found in.
    var lineFindings: [(ordinal: Int, sequence: Int, finding: SettlementFinding)] = []
    /// The first line of this payout that settled each capture and refund.
    var captureClaims: [CaptureKey: Int] = [:]
    var refundClaims: [RefundKey: Int] = [:]
    /// Orders not in the ledger, in the order first seen, with their lines.
    var orphanOrders: [String] = []
    var orphanLines: [String: [SettledLine]] = [:]
    /// Id-less SALE and RETURN lines of known orders, matched by amount after every line with an id.
    var pendingByAmount: [Int] = []
    /// Lost disputes a REVERSAL of this payout paid back already: a second is a finding.
    var reversedDisputes: Set<String> = []

    init(payout: SettledPayout, lines: [SettledLine], orders: [String: LedgerOrder]) {
        self.payout = payout
        self.lines = lines
        self.orders = orders
        self.results = lines.map { LineReconciliation(line: $0, signedAmount: $0.signedAmount, match: .payoutLevel, note: "") }
    }

    mutating func run() -> PayoutReconciliation {
        for index in lines.indices { matchByID(index) }
        for index in pendingByAmount { matchByAmount(index) }
        for orderID in orphanOrders { flagOrphan(orderID, orphanLines[orderID] ?? []) }

        let sortedFindings = lineFindings.sorted { a, b in
            a.ordinal != b.ordinal ? a.ordinal < b.ordinal : a.sequence < b.sequence
        }
        let findings = sortedFindings.map { $0.finding } + PayoutFormula.check(payout, lines: lines)
        return PayoutReconciliation(
            payout: payout, lines: results, findings: findings,
            fromLines: PayoutFigures(lines: lines, totals: payout.totals), totals: PayoutFigures(totals: payout.totals))
    }

    // MARK: - Pass 1: by id

    mutating func matchByID(_ index: Int) {
        let line = lines[index]
        let lostDispute = line.kind == .reversal ? expectedReversal(line) : nil
        if line.kind == .reversal, lostDispute == nil { flagReversal(line) }

        guard let orderID = line.orderIDGiven else {
            if line.kind == .sale || line.kind == .return {
                set(index, .unmatched(.noOrderID), note: "\(line.kind) without an order id: nothing to match it by")
                flag(
                    line.ordinal,
                    SettlementFinding(
                        kind: .orphan, paymentReference: payout.paymentReference, lineOrdinals: [line.ordinal],
                        captureID: line.captureIDGiven, refundID: line.refundIDGiven,
                        merchantReference: line.merchantReference, actual: line.signedAmount, actualCurrency: line.currency,
                        reason:
                            "\(line.kind) of \(magnitude(line)) \(line.currency) (line \(line.ordinal)) has no order id: paid at Klarna, unknown to the shop"
                    ))
            } else {
                set(index, .payoutLevel, note: "\(line.kind) for the payout (no order id)")
            }
            return
        }
        guard let order = orders[orderID] else {
            if line.kind.isPayoutLevel {
                set(index, .payoutLevel, note: "\(line.kind) for the payout (order \(orderID) is not in the ledger)")
            } else {
                set(index, .unmatched(.orderUnknown), note: "order \(orderID) is not in the ledger")
                if orphanLines[orderID] == nil { orphanOrders.append(orderID) }
                orphanLines[orderID, default: []].append(line)
            }
            return
        }

        switch line.kind.rawValue {
        case "SALE":
            if let captureID = line.captureIDGiven {
                if let capture = order.captures.first(where: { SettledLine.given($0.captureID) == captureID }) {
                    settle(index, capture: capture, of: order, byAmount: false)
                } else if let capture = onlyIDlessCapture(of: order, amount: magnitude(line)) {
                    // The ledger keeps a capture without its id when Klarna's answer was lost and the read that
                    // resolved it could not tell which capture it was: the order's only such capture of the amount is it.
                    settle(
                        index, capture: capture, of: order, byAmount: true,
                        how: " by amount (the ledger has no id for it; the order's only unsettled capture of \(capture.amount) without one)")
                } else {
                    set(index, .unmatched(.captureUnknown), note: "capture \(captureID) is not in the ledger")
                    flag(
                        line.ordinal,
                        SettlementFinding(
                            kind: .unknownCapture, paymentReference: payout.paymentReference, lineOrdinals: [line.ordinal],
                            orderID: orderID, captureID: captureID, merchantReference: order.merchantReference,
                            actual: magnitude(line), actualCurrency: line.currency,
                            reason:
                                "SALE of \(magnitude(line)) \(line.currency) settles capture \(captureID) of order \(orderID), which the ledger does not know: captured outside the daemon (Merchant Portal?)"
                        ))
                }
            } else {
                pendingByAmount.append(index)
            }
        case "RETURN":
            if line.detailedType == "PAYMENT_DEFAULT" {
                set(index, .order(orderID, capture: nil), note: "payment default on order \(orderID), registered by Klarna: no refund of the shop's")
            } else if let refundID = line.refundIDGiven {
                if let refund = order.refunds.first(where: { SettledLine.given($0.refundID) == refundID }) {
                    settle(index, refund: refund, of: order, byAmount: false)
                } else {
                    set(index, .unmatched(.refundUnknown), note: "refund \(refundID) is not in the ledger")
                    flag(
                        line.ordinal,
                        SettlementFinding(
                            kind: .unknownRefund, paymentReference: payout.paymentReference, lineOrdinals: [line.ordinal],
                            orderID: orderID, refundID: refundID, merchantReference: order.merchantReference,
                            actual: magnitude(line), actualCurrency: line.currency,
                            reason:
                                "RETURN of \(magnitude(line)) \(line.currency) settles refund \(refundID) of order \(orderID), which the ledger does not know: refunded outside the daemon (Merchant Portal?)"
                        ))
                }
            } else {
                pendingByAmount.append(index)
            }
        case "FEE":
            if let captureID = line.captureIDGiven {
                if let capture = order.captures.first(where: { SettledLine.given($0.captureID) == captureID }) {
                    set(index, .order(orderID, capture: capture.key), note: "fee on order \(orderID), capture \(captureID)")
                } else {
                    set(index, .order(orderID, capture: nil), note: "fee on order \(orderID); its capture \(captureID) is not in the ledger")
                }
            } else {
                set(index, .order(orderID, capture: nil), note: "fee on order \(orderID)")
            }
        default:
            if let lostDispute {
                set(
                    index, .order(orderID, capture: nil),
                    note: "reversal of dispute \(lostDispute.id) on order \(orderID), which the daemon saw close lost")
                return
            }
            let unknown = line.kind.isKnown ? "" : " (a type not known)"
            set(index, .order(orderID, capture: nil), note: "\(line.kind)\(unknown) on order \(orderID)")
        }
    }

    // MARK: - Pass 2: by amount

    /// An id-less SALE takes the order's only unclaimed capture of its amount, an id-less RETURN its only refund;
    /// none or several leave it unmatched, with the same words for either.
    mutating func matchByAmount(_ index: Int) {
        let line = lines[index]
        guard let orderID = line.orderIDGiven, let order = orders[orderID] else { return }
        let amount = magnitude(line)
        let isSale = line.kind == .sale
        let captures =
            isSale
            ? order.captures.filter { capture in
                capture.amount == amount && captureClaims[capture.key] == nil && !settledElsewhere(capture.settledBy)
            } : []
        let refunds =
            isSale
            ? []
            : order.refunds.filter { refund in
                refund.amount == amount && refundClaims[refund.key] == nil && !settledElsewhere(refund.settledBy)
            }
        if captures.count == 1 { return settle(index, capture: captures[0], of: order, byAmount: true) }
        if refunds.count == 1 { return settle(index, refund: refunds[0], of: order, byAmount: true) }

        let candidates = isSale ? captures.count : refunds.count
        let (noun, done) = isSale ? ("capture", "captured") : ("refund", "refunded")
        let start = "\(line.kind) of \(amount) \(line.currency) on order \(orderID) has no \(noun) id, and"
        if candidates == 0 {
            set(
                index, .unmatched(isSale ? .captureUnknown : .refundUnknown),
                note: "no \(noun) id, and no unsettled \(noun) of \(amount) on the order")
            flag(
                line.ordinal,
                SettlementFinding(
                    kind: isSale ? .unknownCapture : .unknownRefund, paymentReference: payout.paymentReference,
                    lineOrdinals: [line.ordinal], orderID: orderID, merchantReference: order.merchantReference, actual: amount,
                    actualCurrency: line.currency,
                    reason: "\(start) the ledger has no unsettled \(noun) of that amount on the order: \(done) outside the daemon (Merchant Portal?)")
            )
        } else {
            set(index, .unmatched(.ambiguous), note: "no \(noun) id, and \(candidates) unsettled \(noun)s of \(amount) on the order")
            flag(
                line.ordinal,
                SettlementFinding(
                    kind: .ambiguousMatch, paymentReference: payout.paymentReference, lineOrdinals: [line.ordinal],
                    orderID: orderID, merchantReference: order.merchantReference, actual: amount, actualCurrency: line.currency,
                    reason: "\(start) \(candidates) unsettled \(noun)s of that amount could be it: left for an operator"))
        }
    }

    // MARK: - Settling a capture or a refund

    /// The order's only capture of `amount` the ledger holds without an id, unclaimed and not settled elsewhere.
    func onlyIDlessCapture(of order: LedgerOrder, amount: Int) -> LedgerCapture? {
        let candidates = order.captures.filter { capture in
            SettledLine.given(capture.captureID) == nil && capture.amount == amount && captureClaims[capture.key] == nil
                && !settledElsewhere(capture.settledBy)
        }
        return candidates.count == 1 ? candidates[0] : nil
    }

    mutating func settle(_ index: Int, capture: LedgerCapture, of order: LedgerOrder, byAmount: Bool, how given: String? = nil) {
        let line = lines[index]
        let key = capture.key
        let how = given ?? (byAmount ? " by amount (Klarna gave no capture id; the order's only unsettled capture of \(capture.amount))" : "")
        let outside = capture.source == .observed ? "; captured outside the daemon" : ""
        set(
            index, .capture(key, byAmount: byAmount), source: capture.source,
            note: "capture \(key.captureID) of order \(order.orderID)\(how)\(outside)")

        if let first = captureClaims[key] {
            flag(
                line.ordinal,
                SettlementFinding(
                    kind: .duplicateSettlement, paymentReference: payout.paymentReference, lineOrdinals: [first, line.ordinal],
                    orderID: order.orderID, captureID: key.captureID, merchantReference: order.merchantReference,
                    expected: capture.amount, actual: magnitude(line), actualCurrency: line.currency,
                    reason:
                        "capture \(key.captureID) of order \(order.orderID) is settled twice in payout \(payout.paymentReference): lines \(first) and \(line.ordinal)"
                ))
        } else {
            captureClaims[key] = line.ordinal
            if let earlier = capture.settledBy, settledElsewhere(earlier) {
                results[index].settledElsewhere = earlier
                flag(
                    line.ordinal,
                    SettlementFinding(
                        kind: .duplicateSettlement, paymentReference: payout.paymentReference, lineOrdinals: [line.ordinal],
                        orderID: order.orderID, captureID: key.captureID, merchantReference: order.merchantReference,
                        expected: capture.amount, actual: magnitude(line), actualCurrency: line.currency,
                        reason:
                            "capture \(key.captureID) of order \(order.orderID) was settled by payout \(earlier.paymentReference) (line \(earlier.ordinal)) and again by payout \(payout.paymentReference) (line \(line.ordinal))"
                    ))
            }
        }
        checkAmount(
            line, kind: "capture", id: key.captureID, order: order, amount: capture.amount,
            currency: capture.currency ?? order.currency, captureID: key.captureID, refundID: nil)
    }

    mutating func settle(_ index: Int, refund: LedgerRefund, of order: LedgerOrder, byAmount: Bool) {
        let line = lines[index]
        let key = refund.key
        let how = byAmount ? " by amount (Klarna gave no refund id; the order's only unsettled refund of \(refund.amount))" : ""
        let outside = refund.source == .observed ? "; refunded outside the daemon" : ""
        set(index, .refund(key, byAmount: byAmount), source: refund.source, note: "refund \(key.refundID) of order \(order.orderID)\(how)\(outside)")

        if let first = refundClaims[key] {
            flag(
                line.ordinal,
                SettlementFinding(
                    kind: .duplicateSettlement, paymentReference: payout.paymentReference, lineOrdinals: [first, line.ordinal],
                    orderID: order.orderID, refundID: key.refundID, merchantReference: order.merchantReference,
                    expected: refund.amount, actual: magnitude(line), actualCurrency: line.currency,
                    reason:
                        "refund \(key.refundID) of order \(order.orderID) is settled twice in payout \(payout.paymentReference): lines \(first) and \(line.ordinal)"
                ))
        } else {
            refundClaims[key] = line.ordinal
            if let earlier = refund.settledBy, settledElsewhere(earlier) {
                results[index].settledElsewhere = earlier
                flag(
                    line.ordinal,
                    SettlementFinding(
                        kind: .duplicateSettlement, paymentReference: payout.paymentReference, lineOrdinals: [line.ordinal],
                        orderID: order.orderID, refundID: key.refundID, merchantReference: order.merchantReference,
                        expected: refund.amount, actual: magnitude(line), actualCurrency: line.currency,
                        reason:
                            "refund \(key.refundID) of order \(order.orderID) was settled by payout \(earlier.paymentReference) (line \(earlier.ordinal)) and again by payout \(payout.paymentReference) (line \(line.ordinal))"
                    ))
            }
        }
        checkAmount(
            line, kind: "refund", id: key.refundID, order: order, amount: refund.amount,
            currency: order.currency, captureID: nil, refundID: key.refundID)
    }

    /// An amount or currency that differs from the ledger's.
    mutating func checkAmount(
        _ line: SettledLine, kind: String, id: String, order: LedgerOrder, amount: Int, currency: String?,
        captureID: String?, refundID: String?
    ) {
        let settled = magnitude(line)
        if settled != amount {
            flag(
                line.ordinal,
                SettlementFinding(
                    kind: .amountMismatch, paymentReference: payout.paymentReference, lineOrdinals: [line.ordinal],
                    orderID: order.orderID, captureID: captureID, refundID: refundID,
                    merchantReference: order.merchantReference, expected: amount, actual: settled,
                    expectedCurrency: currency, actualCurrency: line.currency,
                    reason:
                        "\(line.kind) of \(settled) for \(kind) \(id) of order \(order.orderID), which was \(amount) (\(Minor.signedText(Minor.subtract(settled, amount))))"
                ))
        }
        if let currency, currency.uppercased() != line.currency.uppercased() {
            flag(
                line.ordinal,
                SettlementFinding(
                    kind: .amountMismatch, paymentReference: payout.paymentReference, lineOrdinals: [line.ordinal],
                    orderID: order.orderID, captureID: captureID, refundID: refundID,
                    merchantReference: order.merchantReference, expected: amount, actual: settled,
                    expectedCurrency: currency, actualCurrency: line.currency,
                    reason: "\(line.kind) in \(line.currency) for \(kind) \(id) of order \(order.orderID), which was in \(currency)"))
        }
    }

    /// The lost dispute a REVERSAL pays back, when the daemon saw it close lost: by the dispute's id in
    /// `reversal_reference`; without a reference (Klarna does not document that the two are equal), by amount when
    /// exactly one lost dispute of the order not paid back in this payout has it. Its amount must be the line's, and
    /// each dispute is paid back once: anything else is a finding. (A REVERSAL of the same dispute in an earlier payout
    /// is not looked for.)
    mutating func expectedReversal(_ line: SettledLine) -> LostDispute? {
        guard let orderID = line.orderIDGiven, let lost = orders[orderID]?.lostDisputes, !lost.isEmpty else { return nil }
        let amount = magnitude(line)
        let open = lost.filter { !reversedDisputes.contains($0.id) && $0.amount == amount && ($0.currency ?? line.currency) == line.currency }
        let found: LostDispute?
        if let reference = SettledLine.given(line.reversalReference) {
            found = open.first { $0.id == reference }
        } else {
            found = open.count == 1 ? open[0] : nil
        }
        if let found { reversedDisputes.insert(found.id) }
        return found
    }

    // MARK: - Findings

    mutating func flagReversal(_ line: SettledLine) {
        let orderID = line.orderIDGiven
        let dispute = SettledLine.given(line.reversalReference).map { " (dispute \($0))" } ?? ""
        let on = orderID.map { " on order \($0)" } ?? " without an order id"
        flag(
            line.ordinal,
            SettlementFinding(
                kind: .reversal, paymentReference: payout.paymentReference, lineOrdinals: [line.ordinal], orderID: orderID,
                reversalReference: SettledLine.given(line.reversalReference),
                merchantReference: orderID.flatMap { orders[$0]?.merchantReference } ?? line.merchantReference,
                actual: magnitude(line), actualCurrency: line.currency,
                reason: "REVERSAL of \(magnitude(line)) \(line.currency)\(on)\(dispute): Klarna refunded the customer on a dispute the merchant lost")
        )
    }

    mutating func flagOrphan(_ orderID: String, _ orderLines: [SettledLine]) {
        guard let first = orderLines.first else { return }
        let ordinals = orderLines.map { $0.ordinal }
        let net = Minor.sum(orderLines.map { $0.payoutEffect })
        let kinds = orderLines.map { $0.kind.rawValue }.joined(separator: ", ")
        let numbers = ordinals.map { "\($0)" }.joined(separator: ", ")
        let what = orderLines.count == 1 ? "line \(numbers): \(kinds)" : "lines \(numbers): \(kinds)"
        flag(
            first.ordinal,
            SettlementFinding(
                kind: .orphan, paymentReference: payout.paymentReference, lineOrdinals: ordinals, orderID: orderID,
                captureID: orderLines.compactMap { $0.kind == .sale ? $0.captureIDGiven : nil }.first,
                merchantReference: orderLines.compactMap { SettledLine.given($0.merchantReference) }.first,
                actual: net, actualCurrency: first.currency,
                reason: "order \(orderID) is not in the ledger: paid at Klarna, unknown to the shop (\(what); net \(net) \(first.currency))"))
    }

    mutating func flag(_ ordinal: Int, _ finding: SettlementFinding) {
        lineFindings.append((ordinal: ordinal, sequence: lineFindings.count, finding: finding))
    }

    mutating func set(_ index: Int, _ match: LineMatch, source: LedgerSource? = nil, note: String) {
        results[index].match = match
        results[index].source = source
        results[index].note = note
    }

    /// Settled by a payout other than this one (matching a payout again is not a duplicate).
    func settledElsewhere(_ settledBy: SettledLineKey?) -> Bool {
        guard let settledBy else { return false }
        return settledBy.paymentReference != payout.paymentReference
    }

    func magnitude(_ line: SettledLine) -> Int { Minor.magnitude(line.amount) }
}
