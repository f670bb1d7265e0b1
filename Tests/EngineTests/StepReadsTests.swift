import Foundation
import KlarnaSandbox
import Testing
import TestSupport
@testable import Engine
@testable import ReconcilerCore
@testable import ReconcilerStore
@testable import SQLiteBackend

@Suite("A step's reads")
struct StepReadsTests {
    @Test(
        "What a step read at its start answers its reads of its unit, the unit's intents and the key's controls until it commits; other reads, and every read after the commit, go to the store"
    )
    func servedUntilTheCommit() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = FaultyStore(try SQLiteStore(path: directory.path + "/state.sqlite"))
        _ = try await store.track(Fixtures.session("a"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
        var setup = Change()
        setup.intents = [Intent(key: "place:a", kind: .placeOrder, subject: "a", now: Fixtures.t0)]
        try await store.commit(setup, at: Fixtures.t0)
        let reads = StepReads(base: store)
        // As a shared store reads them: the intents with the rest (this one leaves them to the reads that ask).
        var inputs = try await reads.stepInputs(for: .session("a"))
        #expect(inputs.intents == nil)
        inputs.intents = try await store.intents(subject: "a")
        store.reads.withLock { $0 = [] }

        try await StepReads.$snapshot.withValue(StepReads.Snapshot(key: .session("a"), inputs: inputs)) {
            #expect(try await reads.session("a") == inputs.session && inputs.session?.hppSessionID == "a")
            #expect(try await reads.intents(subject: "a").map(\.key) == ["place:a"])
            #expect(try await reads.intent("place:a")?.kind == .placeOrder)
            #expect(try await reads.operatorControls(for: .session("a")) == OperatorControls(held: false, pending: []))
            #expect(store.reads.withLock { $0 }.isEmpty, "served from the step's inputs")
            // Another unit, an intent of another subject: the store.
            _ = try await reads.session("b")
            _ = try await reads.intent("capture:o-b")
            _ = try await reads.operatorControls(for: .order("o-b"))
            #expect(store.reads.withLock { $0 } == ["session", "intent", "operatorControls"])

            var moved = try #require(inputs.session)
            moved.nextDueAt = Fixtures.t0.addingTimeInterval(60)
            var change = Change()
            change.sessions = [moved]
            try await reads.commit(change, at: Fixtures.t0)
            store.reads.withLock { $0 = [] }
            #expect(try await reads.session("a") == moved, "read from the store once the step committed")
            #expect(try await reads.intents(subject: "a").map(\.key) == ["place:a"])
            #expect(store.reads.withLock { $0 } == ["session", "intents"])
        }
        store.reads.withLock { $0 = [] }
        _ = try await reads.session("a")
        #expect(store.reads.withLock { $0 } == ["session"], "outside a step, every read goes to the store")

        // Inputs without the intents: the unit from them, the intents from the store.
        let unread = try await reads.stepInputs(for: .session("a"))
        store.reads.withLock { $0 = [] }
        try await StepReads.$snapshot.withValue(StepReads.Snapshot(key: .session("a"), inputs: unread)) {
            _ = try await reads.session("a")
            #expect(try await reads.intent("place:a")?.kind == .placeOrder)
            #expect(try await reads.intents(subject: "a").count == 1)
            #expect(store.reads.withLock { $0 } == ["intent", "intents"])
        }
    }

    @Test(
        "A step reads its key's controls and unit once: the session step that places the order and the order step that captures it read neither again"
    )
    func oneReadAStep() async throws {
        try await EngineHarness.withFaultyStore { h, counting in
            let created = try await h.track(SessionSpec(orderAmount: 10_000, schedule: [ScheduleStep(afterSeconds: 5, status: "COMPLETED")]))
            h.clock.advance(by: .seconds(6))
            counting.reads.withLock { $0 = [] }
            _ = try await h.reconciler.process(.session(created.hppSessionId))
            // The step's inputs (as the role's default reads them: the controls, then the session), read once.
            let sessionStep = counting.reads.withLock { $0 }
            #expect(Array(sessionStep.prefix(2)) == ["operatorControls", "session"], "\(sessionStep)")
            #expect(sessionStep.filter { $0 == "operatorControls" || $0 == "session" }.count == 2, "\(sessionStep)")
            let orderID = try #require(try await h.session(created).orderID)
            counting.reads.withLock { $0 = [] }
            _ = try await h.reconciler.process(.order(orderID))
            let orderStep = counting.reads.withLock { $0 }
            #expect(Array(orderStep.prefix(2)) == ["operatorControls", "order"], "\(orderStep)")
            #expect(orderStep.filter { $0 == "operatorControls" || $0 == "order" }.count == 2, "\(orderStep)")
            #expect(h.effects(.captured, order: orderID).count == 1)
        }
    }
}
