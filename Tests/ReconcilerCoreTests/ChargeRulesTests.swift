import Foundation
import Testing
@testable import ReconcilerCore

@Suite("Charge rules")
struct ChargeRulesTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)
    let ask = ChargeAsk(token: "tok-123456789", reference: "2026-12", amount: 1_990, currency: "EUR", taxAmount: 318)

    @Test("A new charge is recorded with its body built once; the same reference and amount is a repeat; another amount or currency is 409")
    func requests() throws {
        guard case .record(let intent) = ChargeRules.request(ask, key: "k", capture: .onRequest, existing: nil, now: now) else {
            Issue.record("a new charge is not recorded")
            return
        }
        #expect(intent.kind == .charge && intent.subject == "tok-123456789" && intent.amount == 1_990 && intent.reference == "2026-12")
        #expect(intent.charge?.capture == .onRequest && intent.charge?.currency == "EUR" && intent.charge?.merchantReference == "2026-12")
        #expect(intent.nextAttemptAt == now && intent.account == nil)
        let body = try #require(intent.charge?.body)
        #expect(body == (try ask.orderBody()), "the same ask builds the same bytes")
        let decoded = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any]
        #expect(decoded?["order_amount"] as? Int == 1_990 && decoded?["order_tax_amount"] as? Int == 318)
        #expect((decoded?["order_lines"] as? [[String: Any]])?.first?["total_amount"] as? Int == 1_990)
        #expect(decoded?["auto_capture"] as? Bool == false)

        #expect(ChargeRules.request(ask, key: "k", capture: .immediate, existing: intent, now: now) == .repeated(intent))
        var more = ask
        more.amount = 2_990
        guard case .refused(409, "reference_conflict", let why) = ChargeRules.request(more, key: "k", capture: .immediate, existing: intent, now: now)
        else {
            Issue.record("another amount is not refused")
            return
        }
        #expect(why.contains("already names a charge of 1990 EUR"))
        var other = ask
        other.currency = "SEK"
        guard case .refused(409, _, _) = ChargeRules.request(other, key: "k", capture: .immediate, existing: intent, now: now) else {
            Issue.record("another currency is not refused")
            return
        }
    }

    @Test("The idempotency key's target keeps token and reference apart")
    func keyTarget() {
        let a = ChargeAsk(token: "ab", reference: "c:d", amount: 1, currency: "EUR")
        let b = ChargeAsk(token: "ab:c", reference: "d", amount: 1, currency: "EUR")
        #expect(a.keyTarget != b.keyTarget)
    }

    @Test("What is wrong with an ask names its field")
    func problems() {
        func field(_ change: (inout ChargeAsk) -> Void) -> String? {
            var ask = self.ask
            change(&ask)
            return ask.problem?.field
        }
        #expect(ask.problem == nil)
        #expect(field { $0.amount = 0 } == "amount")
        #expect(field { $0.currency = "eur" } == "currency")
        #expect(field { $0.currency = "EURO" } == "currency")
        #expect(field { $0.taxAmount = 5_000 } == "tax_amount")
        #expect(field { $0.reference = "" } == "reference")
        #expect(field { $0.merchantReference2 = String(repeating: "x", count: 256) } == "merchant_reference2")
        #expect(field { $0.lines = [] } == "order_lines")
        #expect(field { $0.lines = [ChargeLine(name: "a", quantity: 1, unitPrice: 1_000, totalAmount: 1_000)] } == "order_lines")
        #expect(field { $0.lines = [ChargeLine(name: "a", quantity: 0, unitPrice: 1_990, totalAmount: 1_990)] } == "order_lines[0].quantity")
        #expect(field { $0.lines = [ChargeLine(name: "a", quantity: 1, unitPrice: 1_990, totalAmount: 1_990)] } == nil)
    }

    @Test("Only an ACTIVE token, in any case, is charged; any other status or none is refused with the status named")
    func tokenStatus() {
        #expect(ChargeRules.refusal(tokenStatus: "ACTIVE") == nil)
        #expect(ChargeRules.refusal(tokenStatus: "active") == nil)
        #expect(ChargeRules.refusal(tokenStatus: "CANCELLED")?.contains("CANCELLED, not ACTIVE") == true)
        #expect(ChargeRules.refusal(tokenStatus: "suspended")?.contains("suspended") == true)
        #expect(ChargeRules.refusal(tokenStatus: "SOMETHING_NEW") != nil)
        #expect(ChargeRules.refusal(tokenStatus: nil)?.contains("without a status") == true)
    }

    @Test("403 and a 400 naming a fraud status or reason are declines; 404, 409 and other 4xx fail; 408, 425, 429 and 5xx are retried")
    func refusals() {
        #expect(ChargeRules.refusal(status: 403, fraudStatus: nil, reason: nil) == .declined)
        #expect(ChargeRules.refusal(status: 400, fraudStatus: "REJECTED", reason: nil) == .declined)
        #expect(ChargeRules.refusal(status: 400, fraudStatus: nil, reason: "DECLINED") == .declined)
        #expect(ChargeRules.refusal(status: 400, fraudStatus: nil, reason: nil) == .failed)
        #expect(ChargeRules.refusal(status: 404, fraudStatus: nil, reason: nil) == .failed)
        #expect(ChargeRules.refusal(status: 409, fraudStatus: nil, reason: nil) == .failed)
        for status in [408, 425, 429, 500, 502, 503] {
            #expect(ChargeRules.refusal(status: status, fraudStatus: nil, reason: nil) == .retry, "\(status)")
        }
    }

    @Test("Sent again only while Klarna answers the key the same way: 24 hours from the first sent mark, less the longest call")
    func window() {
        guard case .record(let recorded) = ChargeRules.request(ask, key: "k", capture: .immediate, existing: nil, now: now) else { return }
        #expect(ChargeRules.maySendAgain(recorded, longestCall: .seconds(60), now: now.addingTimeInterval(30 * 86_400)), "never sent: no window yet")
        let sent = recorded.sending(now: now)
        #expect(sent.charge?.firstSentAt == now)
        #expect(sent.sending(now: now.addingTimeInterval(600)).charge?.firstSentAt == now, "the first sent mark stays")
        #expect(ChargeRules.maySendAgain(sent, longestCall: .seconds(60), now: now.addingTimeInterval(24 * 3_600 - 61)))
        #expect(!ChargeRules.maySendAgain(sent, longestCall: .seconds(60), now: now.addingTimeInterval(24 * 3_600 - 60)))
        // A store keeps times to the microsecond: a step due at the window's end, run a hair early, ends it too.
        #expect(!ChargeRules.maySendAgain(sent, longestCall: .seconds(60), now: now.addingTimeInterval(24 * 3_600 - 60.000_01)))
    }

    @Test("A placed charge's order is followed by the charge's policy in its account, with no order_placed besides charge_placed")
    func order() {
        var withAccount = ask
        withAccount.account = AccountID(rawValue: "nordic")
        guard case .record(let intent) = ChargeRules.request(withAccount, key: "k", capture: .never, existing: nil, now: now) else { return }
        let order = ChargeRules.order(intent, orderID: "o-1", now: now)
        #expect(order.capturePolicy == .never && order.currency == "EUR" && order.merchantReference == "2026-12")
        #expect(order.placedOutcomeRecorded && order.account.rawValue == "nordic" && order.placedBy == .none)
        #expect(ChargeRules.plan(intent, due: now) == WorkPlan(due: now, urgency: .renewal, account: AccountID(rawValue: "nordic")))
        #expect(ChargeRules.plan(intent.confirmed(result: "o-1", now: now), due: now) == nil)
    }

    @Test("Charges wait behind a live payment's side effects and the reads its webhooks ask for, and go before every scheduled read")
    func urgency() {
        #expect(Urgency.renewal < .inMotion && Urgency.renewal < .hinted && Urgency.renewal > .routine && Urgency.renewal > .background)
    }

    @Test("A charge's order is read and captured at the renewal level, until its authorization is about to expire; another order in motion")
    func orderUrgency() {
        let deadlines = Deadlines(
            authorizationWarnBefore: .seconds(3 * 86_400), autoExtendAuthorization: false, pendingFraudInterval: .seconds(900),
            orderRecheckInterval: .seconds(6 * 3_600))
        guard case .record(let intent) = ChargeRules.request(ask, key: "k", capture: .immediate, existing: nil, now: now) else { return }
        var charged = ChargeRules.order(intent, orderID: "o-1", now: now)
        #expect(charged.isRenewal)
        #expect(charged.plan(now: now, deadlines: deadlines)?.urgency == .renewal)
        #expect(charged.sideEffectUrgency(now: now, deadlines: deadlines) == .renewal)
        charged.expiresAt = now.addingTimeInterval(86_400)
        #expect(charged.plan(now: now, deadlines: deadlines)?.urgency == .deadline, "its authorization expires within the warning")
        #expect(charged.sideEffectUrgency(now: now, deadlines: deadlines) == .deadline)
        var live = charged
        live.isRenewal = false
        live.expiresAt = nil
        #expect(live.plan(now: now, deadlines: deadlines)?.urgency == .inMotion)
        #expect(live.sideEffectUrgency(now: now, deadlines: deadlines) == .inMotion)
    }
}
