import Foundation
import KlarnaSandbox
import Logging
import ServiceLifecycle
import Testing
import TestSupport
@testable import Engine
@testable import ReconcilerCore
@testable import ReconcilerStore

@Suite("Worker service")
struct WorkerServiceTests {
    @Test("Bounded workers finish every payment exactly once while hints pour in; graceful shutdown returns")
    func runsAndDrains() async throws {
        var settings = EngineHarness.fastSettings
        settings.maxConcurrency = 3
        settings.wakeupInterval = .seconds(1)
        try await EngineHarness.with(settings: settings) { h in
            var created: [CreatedSession] = []
            for index in 0..<40 {
                created.append(
                    try await h.track(
                        SessionSpec(orderAmount: 1_000 + index, schedule: [ScheduleStep(afterSeconds: Double(index % 7), status: "COMPLETED")])))
            }
            let scheduler = Scheduler()
            let workers = WorkerService(reconciler: h.reconciler, queue: h.store, scheduler: scheduler, logger: Logger(label: "test"))
            #expect(try await workers.loadOpenWork() == 40)
            let group = ServiceGroup(configuration: .init(services: [.init(service: workers)], logger: Logger(label: "test")))
            let running = Task { try await group.run() }

            // Move time only when the service is idle: nothing running, and it sleeps on the clock.
            var rounds = 0
            while try await h.store.summary(now: h.clock.now).ordersByPhase["closed"] ?? 0 < 40 {
                rounds += 1
                try #require(rounds < 2_000, "the service did not finish")
                // Hints for sessions that are already being worked on must not make a second worker run them.
                for session in created.prefix(5) { await scheduler.wake(.session(session.hppSessionId), at: h.clock.now) }
                // Idle: no worker, nothing due now, and both loops (dispatcher with a timeout when something is
                // scheduled, wakeup poller) asleep on the clock.
                try await waitUntil {
                    let next = await scheduler.nextDue()
                    guard await scheduler.runningCount == 0, next.map({ $0 > h.clock.now }) ?? true else { return false }
                    return h.clock.sleeperCount >= (next == nil ? 1 : 2)
                }
                #expect(await scheduler.runningCount <= settings.maxConcurrency)
                let next = await scheduler.nextDue() ?? h.clock.now.addingTimeInterval(1)
                h.clock.advance(by: Duration(timeInterval: max(0.001, next.timeIntervalSince(h.clock.now))))
            }
            await group.triggerGracefulShutdown()
            try await running.value
            h.expectNoDoubleEffects()
            #expect(h.effects(.captured).count == 40)
            // Every order placed once although five sessions were hinted on every round.
            #expect(h.sandbox.requests(route: "kp.create_order").count == 40)
        }
    }
}
