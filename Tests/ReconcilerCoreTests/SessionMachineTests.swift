import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore

@Suite("Session state machine")
struct SessionMachineTests {
    let schedule = PollingSchedule(denseInterval: .seconds(2), denseWindow: .seconds(600), maxInterval: .seconds(300), expiryGrace: .seconds(600))

    func tracked(mode: PlaceOrderMode? = PlaceOrderMode.none, purpose: PaymentPurpose = .buy) -> TrackedSession {
        Fixtures.session("hpp-1", kp: "kp-1", mode: mode, policy: .immediate, purpose: purpose)
    }

    func read(
        _ status: String, at seconds: TimeInterval = 0, token: String? = nil, order: String? = nil, expires: TimeInterval = 86_400
    ) -> HPPObservation {
        .session(
            status: HPPSessionStatus(rawValue: status), updatedAt: Fixtures.t0.addingTimeInterval(seconds),
            expiresAt: Fixtures.t0.addingTimeInterval(expires), authorizationToken: token, orderID: order,
            klarnaReference: order == nil ? nil : "KREF")
    }

    @Test(
        "Non-final statuses keep polling, known or not",
        arguments: ["WAITING", "BACK", "IN_PROGRESS", "MANUAL_ID_CHECK", "FAILED", "ERROR", "TIMEOUT", "SOMETHING_NEW"])
    func nonFinalKeepsPolling(status: String) {
        let step = tracked().applying(read(status, at: 1), now: Fixtures.t0.addingTimeInterval(1), schedule: schedule)
        #expect(step.session.phase == .polling)
        #expect(step.session.hppStatus?.rawValue == status)
        #expect(step.outcome == nil)
        #expect(step.session.nextDueAt == Fixtures.t0.addingTimeInterval(3))
        #expect(step.events.first?.kind == .status)
        let known = HPPSessionStatus(rawValue: status).isKnown
        #expect(step.events.first?.message.contains("unknown to this version") == !known)
    }

    @Test("Exactly COMPLETED, CANCELLED and DISABLED are final (Klarna's HPP API reference)")
    func finalStatuses() {
        let all = HPPSessionStatus.knownValues + [HPPSessionStatus(rawValue: "SOMETHING_NEW")]
        let final = all.filter {
            tracked().applying(read($0.rawValue, at: 5, token: "tok"), now: Fixtures.t0.addingTimeInterval(5), schedule: schedule).session.phase
                != .polling
        }
        #expect(final == [.completed, .cancelled, .disabled])
    }

    @Test("CANCELLED and DISABLED are final: outcome cancelled", arguments: ["CANCELLED", "DISABLED"])
    func cancelled(status: String) {
        let step = tracked().applying(read(status, at: 5), now: Fixtures.t0.addingTimeInterval(5), schedule: schedule)
        #expect(step.session.phase == .closed)
        #expect(step.session.nextDueAt == nil)
        #expect(step.outcome?.kind == .cancelled)
        #expect(step.outcome?.merchantReference == "ref-1")
        #expect(step.session.isOpen == false)
    }

    @Test("COMPLETED with a token: authorized, token valid 60 minutes from updated_at")
    func completedWithToken() {
        let now = Fixtures.t0.addingTimeInterval(30)
        let step = tracked().applying(read("COMPLETED", at: 20, token: "tok-abcdef123456"), now: now, schedule: schedule)
        #expect(step.session.phase == .authorized)
        #expect(step.session.authorizationToken == "tok-abcdef123456")
        #expect(step.session.tokenExpiresAt == Fixtures.t0.addingTimeInterval(20 + 3_600))
        #expect(step.session.nextDueAt == now)
        #expect(step.outcome == nil)
        #expect(step.events.map(\.kind) == [.status, .authorized])
        // The log line shows only the token's tail.
        #expect(!step.events.map(\.message).joined().contains("tok-abcdef123456"))
    }

    @Test("A token whose updated_at lies in the future counts from now, never later")
    func tokenClockSkew() {
        let step = tracked().applying(read("COMPLETED", at: 100, token: "tok"), now: Fixtures.t0.addingTimeInterval(10), schedule: schedule)
        #expect(step.session.tokenExpiresAt == Fixtures.t0.addingTimeInterval(10 + 3_600))
    }

    @Test("COMPLETED with an order id hands off to the order", arguments: [PlaceOrderMode.placeOrder, .captureOrder])
    func completedWithOrder(mode: PlaceOrderMode) {
        let step = tracked(mode: mode).applying(
            read("COMPLETED", at: 5, order: "order-1"), now: Fixtures.t0.addingTimeInterval(5), schedule: schedule)
        #expect(step.session.phase == .ordered)
        #expect(step.session.orderID == "order-1")
        #expect(step.session.klarnaReference == "KREF")
        #expect(step.handOff == OrderHandOff(orderID: "order-1", placedBy: mode))
        #expect(step.session.nextDueAt == nil)
    }

    @Test("Mode is inferred when not given: token means NONE, order id means PLACE_ORDER")
    func inferredMode() {
        let byToken = tracked(mode: nil).applying(read("COMPLETED", token: "t"), now: Fixtures.t0, schedule: schedule)
        #expect(byToken.session.mode == PlaceOrderMode.none)
        #expect(byToken.events.allSatisfy { $0.kind != .modeMismatch })
        let byOrder = tracked(mode: nil).applying(read("COMPLETED", order: "o"), now: Fixtures.t0, schedule: schedule)
        #expect(byOrder.session.mode == .placeOrder)
        #expect(byOrder.handOff?.placedBy == .placeOrder)
    }

    @Test("What HPP returns wins over the tracked mode, and the mismatch is recorded")
    func modeMismatch() {
        let orderForNone = tracked(mode: PlaceOrderMode.none).applying(read("COMPLETED", order: "o"), now: Fixtures.t0, schedule: schedule)
        #expect(orderForNone.session.phase == .ordered)
        #expect(orderForNone.events.contains { $0.kind == .modeMismatch })
        let tokenForPlace = tracked(mode: .placeOrder).applying(read("COMPLETED", token: "t"), now: Fixtures.t0, schedule: schedule)
        #expect(tokenForPlace.session.phase == .authorized)
        #expect(tokenForPlace.events.contains { $0.kind == .modeMismatch })
    }

    @Test("COMPLETED with neither token nor order id needs attention")
    func completedEmpty() {
        let step = tracked().applying(read("COMPLETED"), now: Fixtures.t0, schedule: schedule)
        #expect(step.session.phase == .closed)
        #expect(step.outcome?.kind == .needsAttention)
    }

    @Test("An older status arriving after a newer one is ignored")
    func regressionIgnored() {
        var session = tracked()
        session = session.applying(read("IN_PROGRESS", at: 10), now: Fixtures.t0.addingTimeInterval(10), schedule: schedule).session
        let stale = session.applying(read("WAITING", at: 5), now: Fixtures.t0.addingTimeInterval(11), schedule: schedule)
        #expect(stale.session.hppStatus == .inProgress)
        #expect(stale.session.hppUpdatedAt == Fixtures.t0.addingTimeInterval(10))
        #expect(stale.events.map(\.kind) == [.staleStatus])
        #expect(stale.session.phase == .polling)
    }

    @Test("An older CANCELLED cannot undo a newer state, and nothing moves a final session")
    func finalIsFinal() {
        let authorized = tracked().applying(read("COMPLETED", at: 10, token: "t"), now: Fixtures.t0.addingTimeInterval(10), schedule: schedule)
            .session
        let late = authorized.applying(read("CANCELLED", at: 20), now: Fixtures.t0.addingTimeInterval(20), schedule: schedule)
        #expect(late.session.phase == .authorized)
        #expect(late.outcome == nil)
        let cancelled = tracked().applying(read("CANCELLED", at: 10), now: Fixtures.t0.addingTimeInterval(10), schedule: schedule).session
        let after = cancelled.applying(read("COMPLETED", at: 30, token: "t"), now: Fixtures.t0.addingTimeInterval(30), schedule: schedule)
        #expect(after.session.phase == .closed)
        #expect(after.session.outcome == .cancelled)
        #expect(after.outcome == nil)
    }

    @Test("Same status again records nothing new")
    func repeatQuiet() {
        let first = tracked().applying(read("WAITING", at: 1), now: Fixtures.t0.addingTimeInterval(1), schedule: schedule)
        let second = first.session.applying(read("WAITING", at: 1), now: Fixtures.t0.addingTimeInterval(3), schedule: schedule)
        #expect(second.events.isEmpty)
        #expect(second.session.reads == 2)
    }

    @Test("404 after the session was seen means expired; on the first read it needs attention")
    func notFound() {
        let seen = tracked().applying(read("WAITING"), now: Fixtures.t0, schedule: schedule).session
        let expired = seen.applying(.notFound, now: Fixtures.t0.addingTimeInterval(60), schedule: schedule)
        #expect(expired.outcome?.kind == .expired)
        #expect(expired.session.phase == .closed)
        let unknown = tracked().applying(.notFound, now: Fixtures.t0, schedule: schedule)
        #expect(unknown.outcome?.kind == .needsAttention)
        #expect(unknown.outcome?.reason.contains("hpp-1") == true)
    }

    @Test("Read failures back off; past expires_at plus grace the session is recorded as expired")
    func readFailures() {
        let seen = tracked().applying(read("WAITING", expires: 3_600), now: Fixtures.t0, schedule: schedule).session
        let failed = seen.readFailed("HTTP 503", now: Fixtures.t0.addingTimeInterval(10), retryAfter: .seconds(4), schedule: schedule)
        #expect(failed.session.consecutiveFailures == 1)
        #expect(failed.session.nextDueAt == Fixtures.t0.addingTimeInterval(14))
        #expect(failed.session.lastError == "HTTP 503")
        #expect(failed.outcome == nil)
        let withinGrace = failed.session.readFailed(
            "HTTP 503", now: Fixtures.t0.addingTimeInterval(3_600 + 599), retryAfter: .seconds(4), schedule: schedule)
        #expect(withinGrace.session.phase == .polling)
        let pastGrace = failed.session.readFailed(
            "HTTP 503", now: Fixtures.t0.addingTimeInterval(3_600 + 600), retryAfter: .seconds(4), schedule: schedule)
        #expect(pastGrace.session.phase == .closed)
        #expect(pastGrace.outcome?.kind == .expired)
        #expect(pastGrace.outcome?.reason.contains("HTTP 503") == true)
        // A successful read clears the failure count.
        let recovered = failed.session.applying(read("WAITING"), now: Fixtures.t0.addingTimeInterval(20), schedule: schedule)
        #expect(recovered.session.consecutiveFailures == 0)
        #expect(recovered.session.lastError == nil)
    }

    @Test("A hint moves the next read to now and restarts dense polling; closed sessions ignore hints")
    func hints() {
        var session = tracked()
        session.nextDueAt = Fixtures.t0.addingTimeInterval(300)
        let hinted = session.hinted(now: Fixtures.t0.addingTimeInterval(900))
        #expect(hinted.nextDueAt == Fixtures.t0.addingTimeInterval(900))
        #expect(hinted.pollAnchor == Fixtures.t0.addingTimeInterval(900))
        // Before the first read a hint is the tracking itself; after it, callbacks are arriving.
        #expect(hinted.lastHintAt == nil)
        let seen = session.applying(read("WAITING"), now: Fixtures.t0.addingTimeInterval(950), schedule: schedule).session
        #expect(seen.hinted(now: Fixtures.t0.addingTimeInterval(960)).lastHintAt == Fixtures.t0.addingTimeInterval(960))
        let closed = session.closed(.cancelled, "x").session
        #expect(closed.hinted(now: Fixtures.t0.addingTimeInterval(900)) == closed)
    }

    @Test("Token expiry closes an authorized session as expired with the reason")
    func tokenExpiry() {
        let authorized = tracked().applying(read("COMPLETED", token: "t"), now: Fixtures.t0, schedule: schedule).session
        let step = authorized.tokenExpired(now: Fixtures.t0.addingTimeInterval(3_601), detail: "last error: HTTP 503")
        #expect(step.session.phase == .closed)
        #expect(step.outcome?.kind == .expired)
        #expect(step.outcome?.reason.contains("authorization token expired") == true)
        #expect(step.outcome?.reason.contains("HTTP 503") == true)
    }

    @Test("The daemon placed the order: the session is ordered and hands over to it, the order's read records the outcome")
    func orderPlaced() {
        let authorized = tracked().applying(read("COMPLETED", token: "t"), now: Fixtures.t0, schedule: schedule).session
        let step = authorized.orderPlaced(orderID: "order-9", fraudStatus: .accepted)
        #expect(step.session.phase == .ordered)
        #expect(step.session.orderID == "order-9")
        #expect(step.session.nextDueAt == nil)
        #expect(!step.session.isOpen)
        #expect(step.events == [DomainEvent(.orderPlaced, "order order-9 placed, fraud_status ACCEPTED")])
        #expect(step.outcome == nil)
        #expect(step.handOff == OrderHandOff(orderID: "order-9", placedBy: PlaceOrderMode.none))
    }

    @Test("A handed-over order carries the session's identifiers and capture policy")
    func handedOverOrder() {
        let session = tracked(mode: .captureOrder)
        let order = session.order(for: OrderHandOff(orderID: "order-2", placedBy: .captureOrder), createdAt: Fixtures.t0.addingTimeInterval(7))
        #expect(
            order
                == TrackedOrder(
                    orderID: "order-2", hppSessionID: "hpp-1", kpSessionID: "kp-1", merchantReference: "ref-1", capturePolicy: .immediate,
                    placedBy: .captureOrder, createdAt: Fixtures.t0.addingTimeInterval(7)))
    }

    @Test("A customer token closes a tokenize-only session, with its outcome and only the token's tail in the event")
    func customerTokenTokenizeOnly() {
        let authorized = tracked(purpose: .tokenize).applying(read("COMPLETED", token: "t"), now: Fixtures.t0, schedule: schedule).session
        let step = authorized.customerTokenCreated(tokenID: "ctok-abcdef123456", now: Fixtures.t0.addingTimeInterval(5))
        #expect(step.session.customerTokenID == "ctok-abcdef123456")
        #expect(step.session.phase == .closed)
        #expect(step.session.outcome == .customerTokenCreated)
        #expect(step.session.nextDueAt == nil)
        #expect(step.events.map(\.kind) == [.customerTokenCreated])
        #expect(!step.events.map(\.message).joined().contains("ctok-abcdef123456"))
        #expect(step.outcome?.kind == .customerTokenCreated)
        #expect(step.outcome?.customerTokenID == "ctok-abcdef123456")
    }

    @Test("A customer token for buy_and_tokenize records its outcome and goes straight on to place the order")
    func customerTokenThenOrder() {
        let authorized = tracked(purpose: .buyAndTokenize).applying(read("COMPLETED", token: "t"), now: Fixtures.t0, schedule: schedule).session
        let step = authorized.customerTokenCreated(tokenID: "ctok-1", now: Fixtures.t0.addingTimeInterval(5))
        #expect(step.session.phase == .authorized)
        #expect(step.session.outcome == nil)
        #expect(step.session.nextDueAt == Fixtures.t0.addingTimeInterval(5))
        #expect(step.outcome?.kind == .customerTokenCreated)
        #expect(step.handOff == nil)
    }

    @Test("A tokenize-only session with its token closes without a second outcome")
    func tokenizeFinished() {
        var authorized = tracked(purpose: .tokenize).applying(read("COMPLETED", token: "t"), now: Fixtures.t0, schedule: schedule).session
        authorized.customerTokenID = "ctok-1"
        let step = authorized.tokenizeFinished()
        #expect(step.session.phase == .closed)
        #expect(step.session.outcome == .customerTokenCreated)
        #expect(step.session.nextDueAt == nil)
        #expect(step.events.isEmpty)
        #expect(step.outcome == nil)
    }

    @Test("Waiting for an intent moves the next look only; a failure that made it wait is recorded")
    func waitingForIntent() {
        let authorized = tracked().applying(read("COMPLETED", token: "t"), now: Fixtures.t0, schedule: schedule).session
        let waiting = authorized.waitingForIntent(until: Fixtures.t0.addingTimeInterval(30), lastError: "HTTP 503")
        #expect(waiting.nextDueAt == Fixtures.t0.addingTimeInterval(30))
        #expect(waiting.lastError == "HTTP 503")
        #expect(waiting.phase == .authorized)
        let later = waiting.waitingForIntent(until: Fixtures.t0.addingTimeInterval(60))
        #expect(later.nextDueAt == Fixtures.t0.addingTimeInterval(60))
        #expect(later.lastError == "HTTP 503")
    }

    @Test("Purposes: what each creates")
    func purposes() {
        #expect(PaymentPurpose.buy.placesOrder && !PaymentPurpose.buy.createsCustomerToken)
        #expect(!PaymentPurpose.tokenize.placesOrder && PaymentPurpose.tokenize.createsCustomerToken)
        #expect(PaymentPurpose.buyAndTokenize.placesOrder && PaymentPurpose.buyAndTokenize.createsCustomerToken)
    }
}

@Suite("Polling schedule")
struct PollingScheduleTests {
    let schedule = PollingSchedule(denseInterval: .seconds(2), denseWindow: .seconds(600), maxInterval: .seconds(300), expiryGrace: .seconds(600))

    @Test("Dense inside the window, growing after it, capped at the maximum")
    func intervals() {
        #expect(schedule.interval(sinceAnchor: .zero) == .seconds(2))
        #expect(schedule.interval(sinceAnchor: .seconds(599)) == .seconds(2))
        #expect(schedule.interval(sinceAnchor: .seconds(600)) == .seconds(2))
        #expect(schedule.interval(sinceAnchor: .seconds(640)) == .seconds(10))
        #expect(schedule.interval(sinceAnchor: .seconds(1_000)) == .seconds(100))
        #expect(schedule.interval(sinceAnchor: .seconds(1_800)) == .seconds(300))
        #expect(schedule.interval(sinceAnchor: .seconds(86_400)) == .seconds(300))
    }

    @Test("Intervals never shrink as time passes")
    func monotonic() {
        var previous = Duration.zero
        for second in stride(from: 0, through: 10_000, by: 7) {
            let interval = schedule.interval(sinceAnchor: .seconds(second))
            #expect(interval >= previous)
            previous = interval
        }
    }

    @Test("The next read lands on expires_at rather than after it; after expiry it keeps the interval")
    func clampToExpiry() {
        let anchor = Fixtures.t0
        let now = Fixtures.t0.addingTimeInterval(3_000)  // sparse: 300 s
        #expect(schedule.nextPoll(now: now, anchor: anchor, expiresAt: now.addingTimeInterval(60)) == now.addingTimeInterval(60))
        #expect(schedule.nextPoll(now: now, anchor: anchor, expiresAt: now.addingTimeInterval(1_000)) == now.addingTimeInterval(300))
        #expect(schedule.nextPoll(now: now, anchor: anchor, expiresAt: now.addingTimeInterval(-5)) == now.addingTimeInterval(300))
        #expect(schedule.nextPoll(now: now, anchor: anchor, expiresAt: nil) == now.addingTimeInterval(300))
    }
}

extension SessionMachineTests {
    @Test("A session runs against expires_at while polling, its token's expiry once authorized, and nothing after")
    func deadlineByPhase() {
        var session = tracked()
        session.expiresAt = Date(timeIntervalSince1970: 1_800_003_600)
        session.tokenExpiresAt = Date(timeIntervalSince1970: 1_800_001_800)
        #expect(session.deadline == session.expiresAt)
        session.phase = .authorized
        #expect(session.deadline == session.tokenExpiresAt)
        session.phase = .ordered
        #expect(session.deadline == nil)
    }
}
