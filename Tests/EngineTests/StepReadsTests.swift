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
        "What a step read at its start answers its reads of the unit, an order's intents, a session's shared intents and the key's controls until it commits; other reads and every read after the commit go to the store"
    )
    func servedUntilTheCommit() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = FaultyStore(try SQLiteStore(path: directory.path + "/state.sqlite"))
        _ = try await store.track(Fixtures.session("a"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
        var setup = Change()
        setup.newOrders = [Fixtures.order("o-a", session: "a")]
        setup.intents = [
            Intent(key: "place:a", kind: .placeOrder, subject: "a", now: Fixtures.t0),
            Intent(key: "capture:o-a", kind: .capture, subject: "o-a", now: Fixtures.t0),
        ]
        try await store.commit(setup, at: Fixtures.t0)
        let reads = StepReads(base: store)
        // As a shared store reads them: the order and its intents with the rest (this one leaves them to the reads
        // that ask).
        var inputs = try await reads.stepInputs(for: .order("o-a"))
        #expect(!inputs.unitRead && inputs.intents == nil)
        inputs.unitRead = true
        inputs.order = try await store.order("o-a")
        inputs.intents = try await store.intents(subject: "o-a")
        store.reads.withLock { $0 = [] }

        try await StepReads.$snapshot.withValue(StepReads.Snapshot(key: .order("o-a"), inputs: inputs)) {
            #expect(try await reads.order("o-a") == inputs.order && inputs.order?.orderID == "o-a")
            #expect(try await reads.intents(subject: "o-a").map(\.key) == ["capture:o-a"])
            #expect(try await reads.intent("capture:o-a")?.kind == .capture)
            #expect(try await reads.operatorControls(for: .order("o-a")) == OperatorControls(held: false, pending: []))
            #expect(store.reads.withLock { $0 }.isEmpty, "served from the step's inputs")
            // Another unit, an intent of another subject: the store.
            _ = try await reads.order("o-b")
            _ = try await reads.intent("place:a")
            _ = try await reads.operatorControls(for: .session("a"))
            #expect(store.reads.withLock { $0 } == ["order", "intent", "operatorControls"])

            var moved = try #require(inputs.order)
            moved.nextDueAt = Fixtures.t0.addingTimeInterval(60)
            var change = Change()
            change.orders = [moved]
            try await reads.commit(change, at: Fixtures.t0)
            store.reads.withLock { $0 = [] }
            #expect(try await reads.order("o-a") == moved, "read from the store once the step committed")
            #expect(try await reads.intents(subject: "o-a").map(\.key) == ["capture:o-a"])
            #expect(store.reads.withLock { $0 } == ["order", "intents"])
        }
        store.reads.withLock { $0 = [] }
        _ = try await reads.order("o-a")
        #expect(store.reads.withLock { $0 } == ["order"], "outside a step, every read goes to the store")

        // A session's inputs, with its KP session's shared intents given (as a shared store reads them): the
        // place-order or customer-token intent of that KP session from them, found or not (the inputs hold every one
        // of them); any other intent, and the session's intents by subject, from the store.
        var session = try await reads.stepInputs(for: .session("a"))
        session.unitRead = true
        session.session = try await store.session("a")
        let kp = try #require(session.session?.kpSessionID)
        let placeKey = IdempotencyKey.make(.placeOrder, kp)
        session.sessionIntents = [Intent(key: placeKey, kind: .placeOrder, subject: "a-sibling", now: Fixtures.t0)]
        store.reads.withLock { $0 = [] }
        try await StepReads.$snapshot.withValue(StepReads.Snapshot(key: .session("a"), inputs: session)) {
            _ = try await reads.session("a")
            #expect(try await reads.intent(placeKey)?.subject == "a-sibling", "as read, though the store has none of that key")
            #expect(try await reads.intent(IdempotencyKey.make(.customerToken, kp)) == nil)
            #expect(store.reads.withLock { $0 }.isEmpty, "served from the step's inputs")
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
