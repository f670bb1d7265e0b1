import Foundation

/// A dispute's money in the payouts (klarna/DISPUTES.md §5): the dispute fee once it opens (`FEE` `DISPUTE_FEE`,
/// charged whatever the outcome), the disputed amount held while it is open under the hold policy
/// `ON_DISPUTE_INITIATED` (`HOLDBACK` `DISPUTE_HOLD`, released when it closes), and a lost dispute's `REVERSAL`, whose
/// `reversal_reference` is the dispute's id. Klarna documents neither the v4 fee's amount nor how a hold shows in a
/// settlement; these are the sandbox's choices, stated in docs/sandbox.md.
struct DisputeMoney {
    /// The fee per dispute, in minor units of any currency (the legacy EUR fee, FEE in klarna/DISPUTES.md §5).
    static let fee = 750

    /// Disputes whose fee was paid out, what is held for each, and the closed ones whose lines are all out.
    var feeCharged: Set<String> = []
    var held: [String: Int] = [:]
    var settled: Set<String> = []
}

extension SandboxState {
    /// Whether a payout has a dispute's line to carry.
    var disputeMoneyPending: Bool { !disputesWithMoney.isEmpty }

    /// The disputes with a line not paid out yet, oldest first.
    private var disputesWithMoney: [Dispute] {
        disputeOrder.compactMap { disputes[$0] }.filter { dispute in
            let money = settlements.disputeMoney
            if money.settled.contains(dispute.id) { return false }
            if !money.feeCharged.contains(dispute.id) { return true }
            if dispute.state == "CLOSED" { return true }
            return dispute.holdPolicy == "ON_DISPUTE_INITIATED" && money.held[dispute.id] == nil
        }
    }

    /// The currencies of disputes with a line to pay out.
    var disputeMoneyCurrencies: Set<String> { Set(disputesWithMoney.map(\.currency)) }

    /// Adds the lines every dispute in `currency` owes: fee, hold, and on closing the release and a loss's reversal.
    mutating func addDisputeMoney(currency: String, to payout: inout PayoutBuilder) {
        for dispute in disputesWithMoney where dispute.currency == currency {
            guard let order = orders[dispute.orderID] else { continue }
            let settled = settledOrder(order)
            if !settlements.disputeMoney.feeCharged.contains(dispute.id) {
                payout.disputeFee(settled, amount: DisputeMoney.fee, dispute: dispute.id)
                settlements.disputeMoney.feeCharged.insert(dispute.id)
            }
            let held = settlements.disputeMoney.held[dispute.id]
            if dispute.state == "CLOSED" {
                if let held, held > 0 { payout.release(held, detailedType: "DISPUTE_HOLD") }
                if dispute.outcome == "LOST" { payout.reversal(settled, amount: dispute.amount, reference: dispute.id) }
                settlements.disputeMoney.held[dispute.id] = 0
                settlements.disputeMoney.settled.insert(dispute.id)
            } else if dispute.holdPolicy == "ON_DISPUTE_INITIATED", held == nil {
                payout.holdback(dispute.amount, detailedType: "DISPUTE_HOLD")
                settlements.disputeMoney.held[dispute.id] = dispute.amount
            }
        }
    }
}

extension PayoutBuilder {
    mutating func disputeFee(_ order: SettledOrder, amount: Int, dispute: String) {
        var fee = row("FEE", "DISPUTE_FEE", amount: amount, order: order, at: date)
        fee.captureId = ""
        fee.reversalReference = dispute
        transactions.append(fee)
    }
}
