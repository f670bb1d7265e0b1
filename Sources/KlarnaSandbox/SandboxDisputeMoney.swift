import Foundation

/// A dispute's money in the payouts (Klarna's Disputes API v4 reference): the dispute fee once it opens (`FEE` `DISPUTE_FEE`,
/// charged whatever the outcome), the disputed amount held while it is open under the hold policy
/// `ON_DISPUTE_INITIATED` (`HOLDBACK` `DISPUTE_HOLD`, released when it closes), and a lost dispute's `REVERSAL`, whose
/// `reversal_reference` is the dispute's id. Klarna documents neither the v4 fee's amount nor how a hold shows in a
/// settlement; these are the sandbox's choices, stated in docs/sandbox.md.
struct DisputeMoney {
    /// The fee per dispute, in minor units of any currency (the legacy EUR fee, FEE in Klarna's Disputes API v4 reference).
    static let fee = 750

    /// Disputes whose fee was paid out, what is held for each, and the closed ones whose lines are all out.
    var feeCharged: Set<String> = []
    var held: [String: Int] = [:]
    var settled: Set<String> = []
}

extension SandboxState {
    /// When each dispute's next line falls due: its fee and hold when it opened, its release and reversal when it
    /// closed; nil once its lines are all out.
    private func nextDisputeMoney(_ dispute: Dispute) -> Date? {
        let money = settlements.disputeMoney
        if money.settled.contains(dispute.id) { return nil }
        let held = dispute.holdPolicy == "ON_DISPUTE_INITIATED" && money.held[dispute.id] == nil
        if !money.feeCharged.contains(dispute.id) || held { return dispute.createdAt }
        return dispute.state == "CLOSED" ? dispute.closedAt : nil
    }

    /// The first moment a payout would carry a dispute's line; nil when none is waiting.
    var earliestDisputeMoney: Date? { disputeOrder.compactMap { disputes[$0] }.compactMap(nextDisputeMoney).min() }

    /// The merchants and currencies of disputes with a line due by `date`.
    func disputeMoneyAccounts(by date: Date) -> Set<SettlementLedger.Account> {
        Set(disputeOrder.compactMap { disputes[$0] }.filter { nextDisputeMoney($0).map { $0 <= date } ?? false }.map(\.account))
    }

    /// Adds the lines every dispute of `account` owes by `date`: its fee and hold once it has opened, and once it has
    /// closed the hold's release and a loss's reversal.
    mutating func addDisputeMoney(_ account: SettlementLedger.Account, by date: Date, to payout: inout PayoutBuilder) {
        for id in disputeOrder {
            guard let dispute = disputes[id], dispute.account == account, dispute.createdAt <= date, let order = orders[dispute.orderID]
            else { continue }
            let settled = settledOrder(order)
            if !settlements.disputeMoney.feeCharged.contains(id) {
                payout.disputeFee(settled, amount: DisputeMoney.fee, dispute: id)
                settlements.disputeMoney.feeCharged.insert(id)
            }
            let held = settlements.disputeMoney.held[id]
            if dispute.state == "CLOSED", let closed = dispute.closedAt, closed <= date, !settlements.disputeMoney.settled.contains(id) {
                if let held, held > 0 { payout.release(held, detailedType: "DISPUTE_HOLD") }
                if dispute.outcome == "LOST" { payout.reversal(settled, amount: dispute.amount, reference: id) }
                settlements.disputeMoney.held[id] = 0
                settlements.disputeMoney.settled.insert(id)
            } else if dispute.holdPolicy == "ON_DISPUTE_INITIATED", held == nil {
                payout.holdback(dispute.amount, detailedType: "DISPUTE_HOLD")
                settlements.disputeMoney.held[id] = dispute.amount
            }
        }
    }
}

extension SandboxState.Dispute {
    /// The payout its money goes into: its order's merchant's, in its currency.
    var account: SettlementLedger.Account { SettlementLedger.Account(merchant: merchant, currency: currency) }
}

extension PayoutBuilder {
    mutating func disputeFee(_ order: SettledOrder, amount: Int, dispute: String) {
        var fee = row("FEE", "DISPUTE_FEE", amount: amount, order: order, at: date)
        fee.captureId = ""
        fee.reversalReference = dispute
        transactions.append(fee)
    }
}
