import Foundation
import KlarnaSandbox
import Testing
@testable import Engine
@testable import ReconcilerCore
import ReconcilerStore

/// Issue 22, part 7: a graceful stop never cancels a create-order it sent. Once the stop begins, no step sends a side
/// effect it had not sent yet; the ones already sent are bounded by the request timeout, which the drain outlasts
/// (`engine.drain_timeout_seconds`, checked in ``SettingsTests``; the daemon's drain in ``SystemdProtocolTests``).
@Suite("Graceful stop: nothing new is sent")
struct GracefulStopTests {
    /// Steps `key` on `engine` `times` times, five seconds of the shared clock apart.
    func step(_ h: EngineHarness, _ engine: Reconciler, _ key: WorkKey, times: Int = 10) async throws {
        for _ in 0..<times {
            h.clock.advance(by: .seconds(5))
            _ = try await engine.process(key)
        }
    }

    @Test("Once a stop begins, an authorized payment's create-order is not sent but left intended, and the next start places it once")
    func nothingNewOnceStopping() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(orderAmount: 5_900, schedule: [ScheduleStep(afterSeconds: 1, status: "COMPLETED")]))
            let key = WorkKey.session(created.hppSessionId)
            h.reconciler.stopSendingSideEffects()
            try await step(h, h.reconciler, key)

            #expect(h.sandbox.requests(route: "kp.create_order").isEmpty, "nothing was sent once the stop began")
            let intentKey = IdempotencyKey.make(.placeOrder, created.kpSessionId)
            let intent = try #require(try await h.store.intent(intentKey))
            #expect(intent.state == .intended && intent.attempts == 0, "\(intent.state), \(intent.attempts) attempt(s)")
            #expect(try await h.session(created).phase == .authorized)
            #expect(
                h.logs.all.contains { $0.contains("stopping: place_order for KP session \(created.kpSessionId) not sent; the next start sends it") })

            // The next start: a new engine on the same store sends it, once, with no settle period (it never left).
            let next = Reconciler(
                store: h.store, accounts: h.reconciler.accounts, clock: h.clock, random: SeededRandomSource(seed: 12),
                settings: h.reconciler.settings, logger: h.logs.logger())
            try await step(h, next, key, times: 2)
            #expect(h.sandbox.requests(route: "kp.create_order").count == 1)
            #expect(try await h.store.intent(intentKey)?.state == .confirmed)
            #expect(try await h.session(created).phase == .ordered)
        }
    }
}
