import Foundation
import KlarnaSandbox
import Logging
import ServiceLifecycle
import Testing
import TestSupport
@testable import Engine
@testable import Ingest
@testable import ReconcilerCore
@testable import ReconcilerStore

@Suite("Klarna calls per payment")
struct CallCountTests {
    @Test("A webhook for a NONE payment with immediate capture costs 4 calls, and its wakeups row never a second read")
    func webhookPaymentCostsFourCalls() async throws {
        try await EngineHarness.with { h in
            let created = try h.sandbox.createSession(SessionSpec(orderAmount: 4_000))
            try h.sandbox.setHPPStatus(created.hppSessionId, "COMPLETED")
            let engine = try await RunningEngine.start(h)
            #expect(await engine.callback(created, status: "COMPLETED", eventID: "e-1").accepted)
            let scheduler = engine.scheduler

            try await waitUntil { h.effects(.captured).count == 1 }
            // Let the wakeup poller look at the store several times: the row the ingest left must not wake the
            // session again.
            for _ in 0..<5 {
                try await waitUntil { await scheduler.runningCount == 0 && h.clock.sleeperCount >= 1 }
                h.clock.advance(by: h.reconciler.settings.wakeupInterval)
            }
            try await waitUntil { await scheduler.runningCount == 0 }
            try await engine.stop()

            #expect(h.sandbox.requests(route: "hpp.read_session").count == 1)
            #expect(h.sandbox.requests(route: "om.read_order").isEmpty, "Klarna's create-order answer said ACCEPTED: no OM read")
            #expect(h.sandbox.requests().map(\.route) == ["hpp.read_session", "kp.read_session", "kp.create_order", "om.create_capture"])
            #expect(try await h.outcomes(created) == [.orderPlaced, .captured])
            h.expectNoDoubleEffects()
        }
    }

    @Test("The read that authorized a session is committed with the intent's first commit, and kept when the step after it fails")
    func authorizingReadKeptWhenTheNextStepFails() async throws {
        try await EngineHarness.with { h in
            let created = try h.sandbox.createSession(SessionSpec(orderAmount: 4_000))
            try h.sandbox.setHPPStatus(created.hppSessionId, "COMPLETED")
            h.sandbox.addFault(SandboxFault(route: "kp.read_session", kind: .status, status: 503, count: 1))
            let engine = try await RunningEngine.start(h)
            #expect(await engine.callback(created, status: "COMPLETED", eventID: "e-1").accepted)
            let scheduler = engine.scheduler
            try await waitUntil {
                let idle = await scheduler.runningCount == 0
                return idle && h.sandbox.requests(route: "kp.read_session").count == 1
            }
            // The KP read failed: what the HPP read found (COMPLETED, the token) is in the store all the same.
            let session = try await h.session(created)
            #expect(session.phase == .authorized)
            #expect(session.authorizationToken != nil)
            #expect(try await h.store.timeline(for: created.hppSessionId).events.contains { $0.kind == "authorized" })

            // The retry goes on from the store: the order is placed without reading the HPP session again.
            try await waitUntil {
                if await scheduler.runningCount == 0 { h.clock.advance(by: .seconds(1)) }
                return h.effects(.captured).count == 1
            }
            try await engine.stop()
            #expect(h.sandbox.requests(route: "hpp.read_session").count == 1)
            #expect(try await h.outcomes(created) == [.orderPlaced, .captured])
            h.expectNoDoubleEffects()
        }
    }

    @Test("One hint, one read: the ingest commit and the wakeups row it leaves do not read an open session twice")
    func oneReadPerHint() async throws {
        var settings = EngineHarness.fastSettings
        settings.wakeupInterval = .milliseconds(100)
        try await EngineHarness.with(settings: settings) { h in
            let created = try await h.track(SessionSpec(orderAmount: 4_000, schedule: [ScheduleStep(afterSeconds: 0.1, status: "IN_PROGRESS")]))
            let engine = try await RunningEngine.start(h)
            let scheduler = engine.scheduler
            func reads() -> Int { h.sandbox.requests(route: "hpp.read_session").count }
            try await waitUntil { reads() == 1 }
            h.clock.advance(by: .milliseconds(500))

            #expect(await engine.callback(created, status: "IN_PROGRESS", eventID: "e-2").accepted)
            try await waitUntil { reads() == 2 }
            // The wakeup poller looks at the store five times before the next planned read (2 s later).
            for _ in 0..<5 {
                try await waitUntil { await scheduler.runningCount == 0 && h.clock.sleeperCount >= 2 }
                h.clock.advance(by: settings.wakeupInterval)
            }
            try await waitUntil { await scheduler.runningCount == 0 && h.clock.sleeperCount >= 2 }
            try await engine.stop()
            #expect(reads() == 2)
            #expect(try await h.session(created).hppStatus?.rawValue == "IN_PROGRESS")
        }
    }

    @Test("An order Klarna placed as PENDING is read until its fraud review ends; never captured before")
    func pendingAnswerIsRead() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(
                SessionSpec(
                    orderAmount: 4_000, fraudStatus: "PENDING", fraudDecisionAfterSeconds: 120, fraudDecision: "ACCEPTED",
                    schedule: [ScheduleStep(afterSeconds: 1, status: "COMPLETED")]))
            try await h.run()
            #expect(h.sandbox.requests(route: "om.read_order").count >= 2)
            #expect(try await h.outcomes(created) == [.orderPlaced, .captured])
            let firstCapture = try #require(h.sandbox.requests(route: "om.create_capture").first)
            let lastPendingRead = h.sandbox.requests(route: "om.read_order").filter { $0.at < firstCapture.at }.last
            #expect(lastPendingRead != nil)
            h.expectNoDoubleEffects()
        }
    }
}

/// The worker service running on a harness, with an ingestor that wakes it the way the daemon's does.
struct RunningEngine {
    let scheduler: Scheduler
    let ingestor: Ingestor
    static let tokens = CallbackTokens(key: Array("callback-key-0123456789abcdef".utf8))
    let group: ServiceGroup
    let running: Task<Void, any Error>

    static func start(_ h: EngineHarness) async throws -> RunningEngine {
        let scheduler = Scheduler()
        let workers = WorkerService(reconciler: h.reconciler, queue: h.store, scheduler: scheduler, logger: Logger(label: "test"))
        _ = try await workers.loadOpenWork()
        let ingestor = Ingestor(
            reader: WebhookReader(tokens: tokens, policy: .require, signingKeys: SigningKeys([:])),
            store: h.store, defaultCapturePolicy: .immediate, clock: h.clock, logger: Logger(label: "test"),
            wake: { keys, account in for key in keys { await scheduler.wake(key, at: h.clock.now, account: account) } })
        let group = ServiceGroup(configuration: .init(services: [.init(service: workers)], logger: Logger(label: "test")))
        return RunningEngine(scheduler: scheduler, ingestor: ingestor, group: group, running: Task { try await group.run() })
    }

    /// A verified HPP status callback for `created`, through the same path as the socket's.
    func callback(_ created: CreatedSession, status: String, eventID: String) async -> Ingestor.Answer {
        let query = [
            "kp_session_id": created.kpSessionId, "hpp_session_id": created.hppSessionId,
            "token": Self.tokens.token(.hppStatus, kpSessionID: created.kpSessionId),
        ]
        let body = #"{"event_id":"\#(eventID)","session":{"session_id":"\#(created.hppSessionId)","status":"\#(status)"}}"#
        return await ingestor.ingest(Delivery(route: .hppStatus, query: query, body: Array(body.utf8)), source: "socket")
    }

    func stop() async throws {
        await group.triggerGracefulShutdown()
        try await running.value
    }
}
