import Foundation
import KlarnaAPI
import KlarnaSandbox
import Synchronization
import Testing
import TestSupport
@testable import Engine
@testable import ReconcilerCore
@testable import ReconcilerStore

@Suite("Engine against the sandbox: faults, deadlines, recovery")
struct EngineFaultTests {
    static let completesSoon = [ScheduleStep(afterSeconds: 5, status: "IN_PROGRESS"), ScheduleStep(afterSeconds: 30, status: "COMPLETED")]

    static let routes = ["hpp.read_session", "kp.read_session", "kp.create_order", "om.read_order", "om.create_capture"]

    static let faults: [(String, SandboxFault.Kind, Int?)] = [
        ("503", .status, 503), ("500", .status, 500), ("429", .rateLimit, nil), ("timeout", .delay, nil),
        ("reset", .reset, nil), ("malformed", .malformed, nil),
    ]

    static var cases: [(String, String)] { routes.flatMap { route in faults.map { (route, $0.0) } } }

    @Test(
        "A session whose place-order intent another session of its KP session marks sent between this step's read and its own mark sends no create-order: its commit writes nothing, and its next step finds the intent sent and waits for it to settle",
        arguments: StoreKind.allCases)
    func siblingMarksTheSharedIntentFirst(store: StoreKind) async throws {
        try await EngineHarness.withFaultyStore(store: store) { h, faulty in
            let created = try await h.track(SessionSpec(orderAmount: 10_000, schedule: [ScheduleStep(afterSeconds: 5, status: "COMPLETED")]))
            h.clock.advance(by: .seconds(6))
            Self.siblingMarksFirst(h, faulty)
            await #expect(throws: IntentMoved.self) { _ = try await h.reconciler.process(.session(created.hppSessionId)) }
            #expect(h.effects(.orderPlaced, kp: created.kpSessionId).isEmpty, "no create-order sent")
            let key = IdempotencyKey.make(.placeOrder, created.kpSessionId)
            let marked = try #require(try await faulty.store.intent(key))
            #expect(marked.subject == "sibling" && marked.state == .sent && marked.attempts == 1, "the other step's mark stands")
            #expect(try await h.session(created).phase == .polling, "nothing of the step was written, the read that authorized it neither")

            // The step again, from what is stored: the intent is sent and may be on its way, so it settles.
            _ = try await h.reconciler.process(.session(created.hppSessionId))
            #expect(h.effects(.orderPlaced, kp: created.kpSessionId).isEmpty)
            let settling = try #require(try await faulty.store.intent(key))
            #expect(settling.attempts == 1 && settling.settleUntil != nil, "\(settling)")
        }
    }

    @Test(
        "A session whose KP session's order another of its HPP sessions placed sends nothing and ends needs_attention naming that session and the order"
    )
    func siblingPlacedTheOrder() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(orderAmount: 10_000, schedule: [ScheduleStep(afterSeconds: 5, status: "COMPLETED")]))
            h.clock.advance(by: .seconds(6))
            let said = try await Self.finishedBySibling(h, created, .placeOrder, result: "order-9")
            #expect(h.effects(.orderPlaced, kp: created.kpSessionId).isEmpty)
            #expect(said.contains { $0.contains("place_order for KP session \(created.kpSessionId) is confirmed (order-9)") }, "\(said)")
            #expect(said.contains { $0.contains("made by its other HPP session sibling") }, "\(said)")
        }
    }

    @Test("A session whose KP session's customer token another of its HPP sessions made ends needs_attention naming the token by its tail only")
    func siblingMadeTheToken() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(schedule: Self.completesSoon), purpose: .tokenize)
            h.clock.advance(by: .seconds(31))
            let said = try await Self.finishedBySibling(h, created, .customerToken, result: "ctok-0123456789-abcdef")
            #expect(h.effects(.customerTokenCreated, kp: created.kpSessionId).isEmpty)
            #expect(said.contains { $0.contains("customer_token for KP session \(created.kpSessionId) is confirmed (…abcdef)") }, "\(said)")
            #expect(!said.contains { $0.contains("ctok-0123456789") }, "a customer token never shows whole: \(said)")
        }
    }

    /// Another session of `created`'s KP session ("sibling") has confirmed their shared intent of `kind` with
    /// `result`; `created`'s step runs once and must end its session needs_attention. Returns its timeline's messages.
    static func finishedBySibling(_ h: EngineHarness, _ created: CreatedSession, _ kind: Intent.Kind, result: String) async throws -> [String] {
        var finished = Change()
        finished.intents = [
            Intent(key: IdempotencyKey.make(kind, created.kpSessionId), kind: kind, subject: "sibling", now: h.clock.now)
                .sending(now: h.clock.now).confirmed(result: result, now: h.clock.now)
        ]
        try await h.store.commit(finished, at: h.clock.now)
        _ = try await h.reconciler.process(.session(created.hppSessionId))
        #expect(try await h.session(created).outcome == .needsAttention)
        return try await h.store.timeline(for: created.hppSessionId).events.map(\.message)
    }

    /// Once, right after this step reads the shared intent: another session of the KP session (its own step, on
    /// another daemon, say) marks it sent, having read it as none sent too.
    static func siblingMarksFirst(_ h: EngineHarness, _ faulty: FaultyStore) {
        let mark = siblingMark(h, faulty.store)
        faulty.afterIntentRead.withLock { $0 = mark }
    }

    /// Marks the place-order intent of the key it is given sent, as another session of its KP session ("sibling")
    /// would: the first time it is called, and never again.
    static func siblingMark(_ h: EngineHarness, _ store: any WorkStore) -> @Sendable (String) async throws -> Void {
        let done = Mutex(false)
        return { [clock = h.clock] key in
            let first = done.withLock { done in
                defer { done = true }
                return !done
            }
            guard first else { return }
            var change = Change()
            change.intents = [Intent(key: key, kind: .placeOrder, subject: "sibling", now: clock.now).sending(now: clock.now)]
            try await store.commit(change, at: clock.now)
        }
    }

    @Test(
        "On PostgreSQL a session's step reads its KP session's shared intents with its inputs; another session's mark between that read and this step's own sends no create-order either"
    )
    func siblingMarksAfterTheSharedRead() async throws {
        try await EngineHarness.withFaultyStore(store: .postgres, stepInputsFromStore: true) { h, faulty in
            let created = try await h.track(SessionSpec(orderAmount: 10_000, schedule: [ScheduleStep(afterSeconds: 5, status: "COMPLETED")]))
            // The shop tracked a second HPP session of the same KP session.
            _ = try await faulty.store.track(
                Fixtures.session("sibling", kp: created.kpSessionId, at: h.clock.now), event: DomainEvent(.tracked, "t"), at: h.clock.now)
            h.clock.advance(by: .seconds(6))
            let key = IdempotencyKey.make(.placeOrder, created.kpSessionId)
            let mark = Self.siblingMark(h, faulty.store)
            faulty.afterStepInputs.withLock {
                $0 = { read in if read == .session(created.hppSessionId) { try await mark(key) } }
            }
            faulty.reads.withLock { $0 = [] }
            await #expect(throws: IntentMoved.self) { _ = try await h.reconciler.process(.session(created.hppSessionId)) }
            #expect(!faulty.reads.withLock { $0 }.contains("intent"), "the intent came with the step's inputs, as none")
            #expect(h.effects(.orderPlaced, kp: created.kpSessionId).isEmpty, "no create-order sent")
            #expect(try await faulty.store.intent(key).map { ($0.subject, $0.attempts) } ?? ("", 0) == ("sibling", 1))

            // The step again: its inputs now hold the other session's mark, so it settles.
            _ = try await h.reconciler.process(.session(created.hppSessionId))
            #expect(h.effects(.orderPlaced, kp: created.kpSessionId).isEmpty)
            let settling = try #require(try await faulty.store.intent(key))
            #expect(settling.attempts == 1 && settling.settleUntil != nil, "\(settling)")
        }
    }

    @Test(
        "The commit that marks a create-order sent lands but its answer is lost: its repeat finds its own mark and sends nothing then; the order is placed once, after the settle period"
    )
    func sentMarkAnswerLost() async throws {
        try await EngineHarness.withFaultyStore { h, faulty in
            let created = try await h.track(SessionSpec(orderAmount: 10_000, schedule: [ScheduleStep(afterSeconds: 5, status: "COMPLETED")]))
            h.clock.advance(by: .seconds(6))
            faulty.sentAnswersToLose.withLock { $0 = 1 }
            await #expect(throws: IntentMoved.self) { _ = try await h.reconciler.process(.session(created.hppSessionId)) }
            #expect(h.effects(.orderPlaced, kp: created.kpSessionId).isEmpty, "nothing sent after an answer that did not come")
            let key = IdempotencyKey.make(.placeOrder, created.kpSessionId)
            #expect(try await faulty.store.intent(key).map { ($0.state, $0.attempts) } ?? (.intended, 0) == (.sent, 1))

            // As after a crash past the mark: the intent settles, the KP session is read, and the order is placed once.
            for _ in 0..<4 where h.effects(.orderPlaced, kp: created.kpSessionId).isEmpty {
                _ = try await h.reconciler.process(.session(created.hppSessionId))
                h.clock.advance(by: .seconds(300))
            }
            #expect(h.effects(.orderPlaced, kp: created.kpSessionId).count == 1)
            #expect(try await faulty.store.intent(key)?.attempts == 2)
            h.expectNoDoubleEffects()
        }
    }

    @Test(
        "The commits that record Klarna's answers land but their answers are lost: each is tried again, writes nothing twice, and the step starts again from what it wrote: one order_placed and one captured, each call made once",
        arguments: StoreKind.allCases)
    func answerCommitAnswerLost(store: StoreKind) async throws {
        try await EngineHarness.withFaultyStore(store: store) { h, faulty in
            let created = try await h.track(
                SessionSpec(orderAmount: 10_000, schedule: [ScheduleStep(afterSeconds: 5, status: "COMPLETED")]), capture: .immediate)
            h.clock.advance(by: .seconds(6))
            faulty.finishedAnswersToLose.withLock { $0 = 1 }
            await #expect(throws: IntentMoved.self) { _ = try await h.reconciler.process(.session(created.hppSessionId)) }
            let placed = try #require(h.effects(.orderPlaced, kp: created.kpSessionId).first?.orderId)
            let intent = try #require(try await faulty.store.intent(IdempotencyKey.make(.placeOrder, created.kpSessionId)))
            #expect(intent.state == .confirmed && intent.result == placed, "the first attempt landed: \(intent)")

            // The capture's answer is lost the same way; then every step goes on from what is stored.
            faulty.finishedAnswersToLose.withLock { $0 = 1 }
            for _ in 0..<6 {
                _ = try? await h.reconciler.process(.session(created.hppSessionId))
                _ = try? await h.reconciler.process(.order(placed))
                h.clock.advance(by: .seconds(5))
            }
            #expect(h.effects(.orderPlaced, kp: created.kpSessionId).count == 1)
            #expect(h.effects(.captured, order: placed).count == 1)
            let outcomes = try await h.store.undeliveredOutcomes(now: h.clock.now, limit: 100).map(\.outcome.kind)
            #expect(outcomes == [.orderPlaced, .captured], "each outcome once: \(outcomes)")
            #expect(faulty.finishedAnswersToLose.withLock { $0 } == 0, "the capture's answer was lost too")
            h.expectNoDoubleEffects()
        }
    }

    @Test(
        "Another session of the KP session settles the shared create-order (ambiguous, the same attempt) while Klarna holds the call: the answer that comes is still recorded, the order placed once",
        arguments: StoreKind.allCases)
    func answerAfterSiblingSettles(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let created = try await h.track(SessionSpec(orderAmount: 10_000, schedule: [ScheduleStep(afterSeconds: 5, status: "COMPLETED")]))
            h.clock.advance(by: .seconds(6))
            // Held until the test moves the sandbox's clock on.
            h.sandbox.addFault(SandboxFault(route: "kp.create_order", kind: .holdAnswer, holdSeconds: 10, count: 1))
            let step = Task { try await h.reconciler.process(.session(created.hppSessionId)) }
            let key = IdempotencyKey.make(.placeOrder, created.kpSessionId)
            try await waitUntil { !h.sandbox.requests(route: "kp.create_order").isEmpty }
            let sent = try #require(try await h.store.intent(key))
            #expect(sent.state == .sent)
            var sibling = Change()
            sibling.intents = [sent.ambiguous("another session settles it", now: h.clock.now)]
            sibling.intentRead = IntentVersion(key: key, read: sent)
            try await h.store.commit(sibling, at: h.clock.now)
            h.clock.advance(by: .seconds(11))
            _ = try await step.value
            let placed = try #require(h.effects(.orderPlaced, kp: created.kpSessionId).first?.orderId)
            #expect(try await h.store.session(created.hppSessionId)?.orderID == placed, "the answer is recorded")
            #expect(try await h.store.intent(key).map { ($0.state, $0.result) } ?? (.intended, nil) == (.confirmed, placed))
            #expect(h.effects(.orderPlaced, kp: created.kpSessionId).count == 1)
            h.expectNoDoubleEffects()
        }
    }

    @Test("A worker whose step lost a shared intent to another session's step says so at notice and runs the key again as after a failure")
    func workerRunsAMovedIntentAgain() async throws {
        try await EngineHarness.withFaultyStore { h, faulty in
            let created = try await h.track(SessionSpec(orderAmount: 10_000, schedule: [ScheduleStep(afterSeconds: 5, status: "COMPLETED")]))
            h.clock.advance(by: .seconds(6))
            Self.siblingMarksFirst(h, faulty)
            let scheduler = Scheduler()
            let logs = LogLines()
            let workers = WorkerService(reconciler: h.reconciler, queue: h.store, scheduler: scheduler, logger: logs.logger())
            let key = WorkKey.session(created.hppSessionId)
            await scheduler.schedule(key, at: h.clock.now)
            let job = try #require(await scheduler.take(now: h.clock.now, capacity: 1).first)
            await workers.perform(job)
            #expect(h.effects(.orderPlaced, kp: created.kpSessionId).isEmpty)
            #expect(await scheduler.nextDue() == h.clock.now.addingTimeInterval((EngineHarness.fastSettings.readRetry.maxDelay / 10).timeInterval))
            let said = logs.all.filter { $0.contains("was changed since this step read it") }
            #expect(said.count == 1 && said.first?.contains("notice") == true, "\(logs.all)")
            #expect(!logs.all.contains { $0.contains("error") }, "a lost race is not a failure: \(logs.all)")
        }
    }

    @Test("Faults on every route, before Klarna acts: the payment still ends captured, one order, one capture", arguments: cases)
    func faultBeforeEffect(route: String, name: String) async throws {
        let (_, kind, status) = Self.faults.first { $0.0 == name }!
        // A 2 s client timeout against the 2.5 s delay; the other faults get a patient client, so that a late answer
        // on loaded cores is not taken for a timeout (a 429 read as one skipped the 20 s reset window).
        try await EngineHarness.with(requestTimeout: kind == .delay ? .seconds(2) : .seconds(10)) { h in
            // The daemon reads an order it placed only when Klarna's answer left the fraud status open; an order HPP
            // placed (PLACE_ORDER) is always read first.
            let mode: ReconcilerCore.PlaceOrderMode = route == "om.read_order" ? .placeOrder : .none
            let created = try await h.track(SessionSpec(orderAmount: 7_700, schedule: Self.completesSoon), mode: mode)
            h.sandbox.addFault(SandboxFault(route: route, kind: kind, status: status, delayMs: 2_500, resetSeconds: 20, count: 2))
            try await h.run()
            if route == "kp.create_order", kind == .delay {
                // A slow Klarna still places the order after the client gave up: the daemon must not place another,
                // and says so.
                #expect(try await h.outcomes(created) == [.needsAttention])
                #expect(h.effects(.orderPlaced).count == 1)
                return
            }
            #expect(try await h.outcomes(created) == [.orderPlaced, .captured], "\(route) \(name)")
            let order = try await h.order(of: created)
            #expect(h.effects(.captured, order: order.orderID).map(\.amount) == [7_700])
            #expect(h.sandbox.requests(route: route).contains { $0.fault != nil }, "the fault fired")
            h.expectNoDoubleEffects()
            let events = try await h.store.timeline(for: created.hppSessionId).events
            // libcurl transparently repeats a read whose reused connection was reset; every other failure shows.
            if kind != .reset || route.hasPrefix("om.create") || route.hasPrefix("kp.create") {
                #expect(events.contains { ["read_failed", "retry", "ambiguous"].contains($0.kind) }, "the failure is on the timeline")
            }
            if kind == .rateLimit {
                // The 429's X-Ratelimit-Reset (20 s) was honoured: no request to that route inside the window.
                let requests = h.sandbox.requests(route: route)
                let limited = try #require(requests.firstIndex { $0.status == 429 })
                #expect(requests[limited + 1].at.timeIntervalSince(requests[limited].at) >= 20)
            }
        }
    }

    @Test(
        "A capture whose answer is lost after Klarna made it is confirmed by reading the order, never repeated",
        arguments: [SandboxFault.Kind.reset, .delay, .status])
    func captureLostAnswer(kind: SandboxFault.Kind) async throws {
        try await EngineHarness.with(requestTimeout: .seconds(2)) { h in
            let created = try await h.track(SessionSpec(orderAmount: 4_200, schedule: Self.completesSoon))
            h.sandbox.addFault(SandboxFault(route: "om.create_capture", kind: kind, status: 502, delayMs: 2_500, afterEffect: true, count: 1))
            try await h.run()
            #expect(try await h.outcomes(created) == [.orderPlaced, .captured])
            #expect(h.effects(.captured).count == 1)
            let intent = try #require(try await h.store.timeline(for: created.hppSessionId).intents.first { $0.kind == .capture })
            #expect(intent.state == .confirmed)
            let events = try await h.store.timeline(for: created.hppSessionId).events
            #expect(events.contains { $0.kind == "ambiguous" })
            #expect(events.contains { $0.kind == "resolved" && $0.message.contains("was done") })
            // Every capture request carried the same key.
            #expect(Set(h.sandbox.requests(route: "om.create_capture").map(\.idempotencyKey)).count == 1)
        }
    }

    @Test(
        "create-order answered with a lost response after Klarna placed it: needs attention, never a second order",
        arguments: [SandboxFault.Kind.reset, .delay, .malformed, .status])
    func placeOrderLostAnswer(kind: SandboxFault.Kind) async throws {
        try await EngineHarness.with(requestTimeout: .seconds(2)) { h in
            let created = try await h.track(SessionSpec(orderAmount: 3_000, merchantReference: "shop-77", schedule: Self.completesSoon))
            h.sandbox.addFault(SandboxFault(route: "kp.create_order", kind: kind, status: 500, delayMs: 2_500, afterEffect: true, count: 1))
            try await h.run()
            #expect(try await h.outcomes(created) == [.needsAttention])
            #expect(h.effects(.orderPlaced).count == 1)
            #expect(h.sandbox.requests(route: "kp.create_order").count == 1)
            let outcome = try #require(try await h.store.timeline(for: created.hppSessionId).outcomes.first?.outcome)
            #expect(outcome.reason.contains("shop-77") && outcome.reason.contains(created.kpSessionId))
            let intent = try #require(try await h.store.timeline(for: created.hppSessionId).intents.first)
            #expect(intent.state == .ambiguous)
        }
    }

    @Test("A refused create-order is not retried: 409 needs attention, 404 (token gone) is expired")
    func placeOrderRefused() async throws {
        try await EngineHarness.with { h in
            let mismatch = try await h.track(SessionSpec(schedule: Self.completesSoon))
            h.sandbox.addFault(SandboxFault(route: "kp.create_order", kind: .status, status: 409, errorCode: "BAD_VALUE", count: 1))
            try await h.run()
            #expect(try await h.outcomes(mismatch) == [.needsAttention])
            #expect(h.sandbox.requests(route: "kp.create_order").count == 1)

            let released = try await h.track(SessionSpec(schedule: Self.completesSoon))
            h.sandbox.addFault(SandboxFault(route: "kp.create_order", kind: .status, status: 404, errorCode: "NOT_FOUND", count: 1))
            try await h.run()
            #expect(try await h.outcomes(released) == [.expired])
            #expect(h.sandbox.requests(route: "kp.create_order").count == 2)
            #expect(h.effects(.orderPlaced).isEmpty)
        }
    }

    @Test("A capture that never gets a clear answer ends as needs attention after retry.max_attempts, the same key every time")
    func captureNeverAnswers() async throws {
        var settings = EngineHarness.fastSettings
        settings.writeRetry.maxAttempts = 3
        try await EngineHarness.with(settings: settings) { h in
            let created = try await h.track(SessionSpec(schedule: Self.completesSoon))
            h.sandbox.addFault(SandboxFault(route: "om.create_capture", kind: .status, status: 503, count: nil))
            try await h.run()
            #expect(try await h.outcomes(created) == [.orderPlaced, .needsAttention])
            let attempts = h.sandbox.requests(route: "om.create_capture")
            #expect(attempts.count == 3)
            #expect(Set(attempts.map(\.idempotencyKey)).count == 1)
            // Nobody knows whether it happened: the intent stays ambiguous rather than "failed".
            let intent = try #require(try await h.store.timeline(for: created.hppSessionId).intents.first { $0.kind == .capture })
            #expect(intent.state == .ambiguous)
        }
    }

    @Test("A capture Klarna refuses (403) is not repeated: the order is read; still capturable means needs attention")
    func captureRefused() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(schedule: Self.completesSoon))
            h.sandbox.addFault(SandboxFault(route: "om.create_capture", kind: .status, status: 403, errorCode: "CAPTURE_NOT_ALLOWED", count: 1))
            try await h.run()
            #expect(try await h.outcomes(created) == [.orderPlaced, .needsAttention])
            #expect(h.sandbox.requests(route: "om.create_capture").count == 1)
            #expect(h.effects(.captured).isEmpty)
            let events = try await h.store.timeline(for: created.hppSessionId).events.map(\.kind)
            #expect(events.contains("refused"))
        }
    }

    @Test("An order whose authorization expires during fraud review ends as expired, never captured")
    func captureAfterExpiry() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(
                SessionSpec(fraudStatus: "PENDING", fraudDecisionAfterSeconds: 600, fraudDecision: "ACCEPTED", schedule: Self.completesSoon))
            try await h.run(for: .seconds(120))
            let order = try await h.order(of: created)
            #expect(order.phase == .pendingFraud)
            try h.sandbox.expire(.order, id: order.orderID)
            try await h.run()
            #expect(try await h.outcomes(created) == [.orderPlaced, .expired])
            #expect(h.effects(.captured).isEmpty)
        }
    }

    @Test("An extension Klarna refuses leaves the order waiting for its capture, warned, not abandoned")
    func extensionRefused() async throws {
        var settings = EngineHarness.fastSettings
        settings.deadlines.autoExtendAuthorization = true
        try await EngineHarness.with(settings: settings) { h in
            let created = try await h.track(SessionSpec(schedule: Self.completesSoon), capture: .onRequest)
            try await h.run(for: .seconds(120))
            let order = try await h.order(of: created)
            h.sandbox.addFault(SandboxFault(route: "om.extend_authorization_time", kind: .status, status: 403, errorCode: "NOT_ALLOWED", count: nil))
            try await h.run(for: .seconds(try #require(order.expiresAt).timeIntervalSince(h.clock.now) - 86_400))
            let now = try #require(try await h.store.order(order.orderID))
            #expect(now.phase == .awaitingCapture)
            #expect(h.sandbox.requests(route: "om.extend_authorization_time").count == 1)
            let events = try await h.store.timeline(for: order.orderID).events.map(\.kind)
            #expect(events.contains("authorization_expiring") && events.contains("refused"))
        }
    }

    @Test("A customer token whose answer was lost needs attention: Klarna offers no read to tell, so none is retried")
    func customerTokenLostAnswer() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(schedule: Self.completesSoon), purpose: .tokenize)
            h.sandbox.addFault(SandboxFault(route: "kp.create_customer_token", kind: .reset, afterEffect: true, count: 1))
            try await h.run()
            #expect(try await h.outcomes(created) == [.needsAttention])
            #expect(h.effects(.customerTokenCreated).count == 1)
            #expect(h.sandbox.requests(route: "kp.create_customer_token").count == 1)
        }
    }

    @Test("Klarna's KP API down for 61 minutes after authorization: outcome expired, with the reason, no order")
    func tokenExpiresDuringOutage() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(schedule: [ScheduleStep(afterSeconds: 10, status: "COMPLETED")]))
            for route in ["kp.read_session", "kp.create_order"] {
                h.sandbox.addFault(SandboxFault(route: route, kind: .status, status: 503, count: nil))
            }
            try await h.run(for: .seconds(59 * 60))
            #expect(try await h.session(created).phase == .authorized, "still trying before the hour is up")
            try await h.run(for: .seconds(2 * 60))
            let session = try await h.session(created)
            #expect(session.phase == .closed && session.outcome == .expired)
            let outcome = try #require(try await h.store.timeline(for: created.hppSessionId).outcomes.first?.outcome)
            #expect(outcome.reason.contains("authorization token expired"))
            #expect(outcome.reason.contains("503"))
            #expect(h.effects(.orderPlaced).isEmpty)
            // The outage was retried with backoff, not hammered: dozens of reads in an hour, not thousands.
            let attempts = h.sandbox.requests(route: "kp.read_session").count
            #expect(attempts > 5 && attempts < 400, "\(attempts) reads")
        }
    }

    @Test("All of Klarna down for 61 minutes: on recovery the token's age comes from HPP's updated_at, so no doomed order is attempted")
    func wholeOutage() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(schedule: [ScheduleStep(afterSeconds: 10, status: "COMPLETED")]))
            try await h.run(for: .seconds(5))
            let fault = h.sandbox.addFault(SandboxFault(route: "*", kind: .status, status: 503, count: nil))
            _ = fault
            try await h.run(for: .seconds(61 * 60))
            h.sandbox.clearFaults()
            try await h.run(for: .seconds(600))
            #expect(try await h.outcomes(created) == [.expired])
            #expect(h.sandbox.requests(route: "kp.create_order").isEmpty)
            let status = try await h.store.summary(now: h.clock.now)
            #expect(status.lastKlarnaErrorDetail?.contains("503") == true)
        }
    }

    @Test("Authorization about to expire: warned once; with auto_extend extended once; expiry without capture is an outcome")
    func authorizationExpiry() async throws {
        var settings = EngineHarness.fastSettings
        settings.deadlines.autoExtendAuthorization = true
        try await EngineHarness.with(settings: settings) { h in
            let created = try await h.track(SessionSpec(schedule: Self.completesSoon), capture: .onRequest)
            try await h.run(for: .seconds(120))
            let order = try await h.order(of: created)
            let expiresAt = try #require(order.expiresAt)
            // Up to three days before expiry: nothing.
            try await h.run(for: .seconds(expiresAt.timeIntervalSince(h.clock.now) - 3 * 86_400 - 60))
            #expect(try await h.store.timeline(for: order.orderID).events.filter { $0.kind == "authorization_expiring" }.isEmpty)
            try await h.run(for: .seconds(120))
            let events = try await h.store.timeline(for: order.orderID).events
            #expect(events.filter { $0.kind == "authorization_expiring" }.count == 1)
            #expect(events.contains { $0.kind == "authorization_extended" })
            #expect(h.effects(.authorizationExtended, order: order.orderID).count == 1)
            #expect(
                h.logs.all.contains {
                    $0.hasPrefix("warning") && $0.contains("event=authorization_expiring") && $0.contains("order_id=\(order.orderID)")
                })
            let extended = try #require(try await h.store.order(order.orderID)?.expiresAt)
            #expect(extended > expiresAt)
        }
    }

    @Test("Without auto_extend the warning stands and expiry ends the order as expired")
    func authorizationExpires() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(schedule: Self.completesSoon), capture: .onRequest)
            try await h.run(for: .seconds(120))
            let order = try await h.order(of: created)
            let expiresAt = try #require(order.expiresAt)
            try h.sandbox.expire(.order, id: order.orderID)
            _ = expiresAt
            _ = try await h.reconciler.process(.order(order.orderID), hinted: true)
            try await h.run(for: .seconds(60))
            #expect(try await h.outcomes(created) == [.orderPlaced, .expired])
            #expect(h.effects(.authorizationExtended).isEmpty)
        }
    }

    @Test("Restart after a crash right after 'sent': the intent is resolved by reading Klarna first")
    func crashAfterSent() async throws {
        try await EngineHarness.with { h in
            // Two sessions authorized; for one Klarna got the order before the crash, for the other it did not.
            let placed = try await h.track(SessionSpec(schedule: Self.completesSoon))
            let notPlaced = try await h.track(SessionSpec(schedule: Self.completesSoon))
            try h.sandbox.setHPPStatus(placed.hppSessionId, "COMPLETED")
            try h.sandbox.setHPPStatus(notPlaced.hppSessionId, "COMPLETED")
            for created in [placed, notPlaced] {
                var session = try await h.session(created)
                let hpp = try await h.client.readHPPSession(id: created.hppSessionId)
                session.phase = .authorized
                session.authorizationToken = hpp.authorizationToken
                session.tokenExpiresAt = h.clock.now.addingTimeInterval(3_600)
                var change = Change()
                change.sessions = [session]
                change.intents = [
                    Intent(
                        key: IdempotencyKey.make(.placeOrder, created.kpSessionId), kind: .placeOrder, subject: created.hppSessionId, now: h.clock.now
                    ).sending(now: h.clock.now)
                ]
                try await h.store.commit(change, at: h.clock.now)
            }
            let kp = try await h.client.readPaymentSession(id: placed.kpSessionId)
            let token = try #require(try await h.session(placed).authorizationToken)
            _ = try await h.client.createOrder(authorizationToken: token, order: CreateOrderRequest(session: kp))

            try await h.run()
            #expect(try await h.outcomes(placed) == [.needsAttention])
            #expect(try await h.outcomes(notPlaced) == [.orderPlaced, .captured])
            h.expectNoDoubleEffects()
        }
    }

    @Test("Unknown HPP statuses keep polling; an older status from a lagging read changes nothing")
    func unknownAndStaleStatus() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(
                SessionSpec(schedule: [
                    ScheduleStep(afterSeconds: 5, status: "MANUAL_ID_CHECK"), ScheduleStep(afterSeconds: 15, status: "SOMETHING_NEW"),
                    ScheduleStep(afterSeconds: 30, status: "COMPLETED"),
                ]))
            try await h.run()
            let statuses = try await h.store.timeline(for: created.hppSessionId).events.filter { $0.kind == "status" }.map(\.message)
            #expect(statuses.contains { $0.contains("SOMETHING_NEW") && $0.contains("unknown to this version") })
            #expect(try await h.outcomes(created) == [.orderPlaced, .captured])
        }
    }

    @Test("The sandbox's rate limit answers like Klarna past it: 429 with X-Ratelimit-Reset, and a second later calls go through")
    func sandboxRateLimit() async throws {
        try await EngineHarness.with { h in
            let created = try h.sandbox.createSession()
            h.sandbox.setRateLimit(perSecond: 2)
            for _ in 0..<2 { _ = try await h.client.readHPPSession(id: created.hppSessionId) }
            let limited = await #expect(throws: KlarnaAPIError.self) { try await h.client.readHPPSession(id: created.hppSessionId) }
            #expect(limited?.status == 429)
            #expect(limited?.rateLimit.reset != nil)
            h.clock.advance(by: .seconds(1))
            _ = try await h.client.readHPPSession(id: created.hppSessionId)
            #expect(h.sandbox.requests(route: "hpp.read_session").map(\.status) == [200, 200, 429, 200])
        }
    }

    @Test("Credentials and authorization tokens never reach the logs or the timeline")
    func noSecrets() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(schedule: Self.completesSoon))
            try await h.run()
            let token = try #require(try await h.session(created).authorizationToken)
            let timeline = try await h.store.timeline(for: created.hppSessionId)
            let text =
                h.logs.all.joined(separator: "\n") + timeline.events.map { "\($0.message) \($0.detail)" }.joined()
                + timeline.outcomes.map(\.outcome.reason).joined()
            #expect(!text.contains(token))
            #expect(!text.contains("secret"))
        }
    }

    @Test("A customer token reaches the outbox's outcome only: never the logs, the timeline or an outcome's reason")
    func customerTokenStaysOut() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(schedule: Self.completesSoon), purpose: .tokenize)
            try await h.run()
            let token = try #require(try await h.session(created).customerTokenID)
            let timeline = try await h.store.timeline(for: created.hppSessionId)
            let text =
                h.logs.all.joined(separator: "\n") + timeline.events.map { "\($0.message) \($0.detail)" }.joined()
                + timeline.outcomes.map(\.outcome.reason).joined()
            #expect(!text.contains(token))
            #expect(text.contains("customer token …\(token.suffix(6)) created"))
            #expect(timeline.outcomes.map(\.outcome.customerTokenID) == [token])
        }
    }
}

@Suite("Engine: the store failing at the worst moment")
struct StoreFailureTests {
    @Test("Klarna placed the order and captured it, then the store refused the record twice: retried, nothing lost, nothing doubled")
    func commitRetried() async throws {
        try await EngineHarness.with(wrapStore: { FaultyStore($0, failConfirmedCommits: 4) }) { h in
            let created = try await h.track(SessionSpec(schedule: [ScheduleStep(afterSeconds: 5, status: "COMPLETED")]))
            try await h.run()
            #expect(try await h.outcomes(created) == [.orderPlaced, .captured])
            h.expectNoDoubleEffects()
            #expect(h.sandbox.requests(route: "kp.create_order").count == 1)
            // Said once (then once a minute), with the answer's ids at the first failure.
            #expect(h.logs.all.filter { $0.contains("cannot record a step in the store") }.count == 1)
            let orderID = try #require(try await h.session(created).orderID)
            #expect(h.logs.all.contains { $0.contains("place_order") && $0.contains("not recorded yet") && $0.contains("result \(orderID)") })
        }
    }

    @Test("A store that refuses Klarna's answer for longer than a step's patience: the answer is kept until it lands, never given up")
    func answerOutlastsPatience() async throws {
        var settings = EngineHarness.fastSettings
        settings.commitRetry.initialDelay = .milliseconds(1)
        settings.commitRetry.maxDelay = .milliseconds(5)
        settings.commitRetry.patience = .milliseconds(20)
        // 40 refusals take at least 150 ms: past the patience, a commit without an answer would have been given up.
        try await EngineHarness.with(settings: settings, wrapStore: { FaultyStore($0, failConfirmedCommits: 40) }) { h in
            let created = try await h.track(SessionSpec(schedule: [ScheduleStep(afterSeconds: 5, status: "COMPLETED")]))
            try await h.run()
            #expect(try await h.outcomes(created) == [.orderPlaced, .captured])
            h.expectNoDoubleEffects()
            #expect(h.sandbox.requests(route: "kp.create_order").count == 1)
            #expect(h.logs.all.contains { $0.contains("recorded Klarna's answer held since") })
            #expect(!h.logs.all.contains { $0.contains("order_id is unknown") })
        }
    }
}
