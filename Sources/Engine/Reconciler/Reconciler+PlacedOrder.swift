import Foundation
import KlarnaAPI
import ReconcilerCore
import ReconcilerStore

/// Klarna placed an order whose id never reached the daemon (an unclear create-order, then a `complete` KP session):
/// find it where Klarna names it (``PlacedOrderSearch``) and follow it like one the daemon placed, or leave the
/// payment to an operator with the reason and the command that repairs it. `currency`: the KP session's.
extension Reconciler {
    /// OM notifications for unknown orders read per search, newest first: each costs an OM read, and pending-order
    /// notifications are rare (US and UK merchants who enabled them).
    static let notifiedOrdersPerSearch = 10
    /// Settlement lines with the payment's merchant reference looked through per search.
    static let settlementLinesPerSearch = 50

    /// What the sources other than the HPP session name for a payment with `merchantReference` in `account`, and what
    /// was looked through.
    struct PlacedOrderClues: Sendable {
        var clues: [PlacedOrderSearch.Clue]
        var searched: String
    }

    /// Looks where Klarna names orders by the shop's merchant reference: OM notifications received since `since` for
    /// orders this daemon does not track (each read from OM), and `account`'s recorded settlement SALE lines carrying
    /// `merchantReference` for untracked orders. A read that fails (other than Klarna not knowing the order) is the
    /// caller's to retry.
    func placedOrderClues(
        merchantReference reference: String, account: AccountID, since: Date, urgency: Urgency, change: inout Change
    ) async throws -> Result<PlacedOrderClues, KlarnaAPIError> {
        var clues: [PlacedOrderSearch.Clue] = []
        // A notification for this payment's order arrives after the order was placed, so after the intent began.
        let notified = try await store.untrackedNotifiedOrders(since: since, limit: Self.notifiedOrdersPerSearch)
        for orderID in notified {
            switch try await klarna(&change, urgency, { client in try await client.readOrder(id: orderID) }) {
            case .success(let order):
                clues.append(
                    .init(orderID: orderID, source: .omNotification, merchantReference: order.merchantReference1, currency: order.purchaseCurrency))
            case .failure(let error) where error.answer.endsWhatWasRead: continue  // not an order of this merchant account
            case .failure(let error): return .failure(error)
            }
        }
        // This account's payouts only: another account's SALE with the same reference is not this order.
        var lines = 0
        for line in try await store.settlementLines(merchantReference: reference, account: account, limit: Self.settlementLinesPerSearch)
        where line.kind == .sale {
            lines += 1
            guard let orderID = line.orderID, try await store.order(orderID) == nil else { continue }
            clues.append(
                .init(
                    orderID: orderID, source: .settlementSale(SettledLineKey(paymentReference: line.paymentReference, ordinal: line.ordinal)),
                    merchantReference: line.merchantReference, currency: line.currency))
        }
        return .success(
            PlacedOrderClues(
                clues: clues,
                searched:
                    "OM notification for an unknown order since \(TrackedSession.format(since)) (\(notified.count) read) or recorded settlement SALE (\(lines) with that reference, all of tracked orders)"
            ))
    }

    func linkPlacedOrder(
        _ session: TrackedSession, _ intent: Intent, currency: String?, urgency: Urgency, change: Change
    ) async throws -> StepResult {
        var change = change
        var hppOrderID: String?
        switch try await klarna(&change, urgency, { client in try await client.readHPPSession(id: session.hppSessionID) }) {
        case .success(let hpp): hppOrderID = hpp.orderID
        case .failure(let error) where error.answer.endsWhatWasRead: break  // expired: it names nothing any more
        case .failure(let error): return try await sessionReadFailed(session, error, change: change)
        }

        var found = PlacedOrderClues(clues: [], searched: "")
        if hppOrderID == nil, let reference = session.merchantReference {
            switch try await placedOrderClues(
                merchantReference: reference, account: session.account, since: intent.createdAt, urgency: urgency, change: &change)
            {
            case .success(let clues): found = clues
            case .failure(let error): return try await sessionReadFailed(session, error, change: change)
            }
        }
        let (clues, searched) = (found.clues, found.searched)
        var verdict = PlacedOrderSearch.verdict(
            hppOrderID: hppOrderID, clues: clues, merchantReference: session.merchantReference, currency: currency,
            searched: searched)
        if case .found(let orderID, _, _) = verdict, let tracked = try await store.order(orderID) {
            verdict = .notFound("order \(orderID), named by the HPP session, is tracked already for HPP session \(tracked.hppSessionID ?? "none")")
        }

        let now = clock.now
        switch verdict {
        case .found(let orderID, let how, let sources):
            change.intents = [intent.confirmed(result: orderID, now: now)]
            let step = session.placedOrderFound(orderID: orderID, how: how)
            record(step, into: &change, detail: ["intent": intent.key, "found_in": sources.map(\.word).joined(separator: ",")])
            if let handOff = step.handOff { change.newOrders.append(step.session.order(for: handOff, createdAt: now)) }
            try await commit(change, now: now)
            return StepResult(next: nil, wake: [.order(orderID)])
        case .notFound(let reason):
            change.intents = [intent.ambiguous(intent.lastError ?? "the daemon stopped after sending", now: now)]
            return try await closeSession(
                session, .needsAttention,
                "create-order for KP session \(session.kpSessionID) ended without an answer and the KP session is now complete: Klarna placed the order but its order_id is unknown (intent \(intent.key), \(intent.attempts) attempt(s)); \(reason); find it in the Merchant Portal by merchant reference \(session.merchantReference ?? "—"), then `klarna-reconciler retry \(session.hppSessionID) --order-id ORDER_ID`",
                change: change)
        }
    }
}
