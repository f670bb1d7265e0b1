import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore
import ReconcilerStore

/// What every store promises, checked on SQLite and on PostgreSQL, test for test.
@Suite("Store conformance")
struct StoreConformanceTests {
    func hint(_ key: String, _ id: String) -> IngestRecord {
        IngestRecord(
            dedupeKey: key, kind: "hpp_status", source: "socket", summary: "status callback",
            action: .hintSession(hppSessionID: id, trackIfUnknown: nil))
    }

    @Test("Tracking twice keeps the first registration and says so", arguments: Backend.allCases)
    func trackIdempotent(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            #expect(
                try await s.store.track(Fixtures.session(), event: DomainEvent(.tracked, "first"), at: Fixtures.t0) == .tracked(Fixtures.session()))
            var other = Fixtures.session()
            other.merchantReference = "changed"
            guard case .existing(let existing) = try await s.store.track(other, event: DomainEvent(.tracked, "second"), at: Fixtures.t0) else {
                Issue.record("expected existing")
                return
            }
            #expect(existing == Fixtures.session())
            #expect(try await s.store.session("hpp-1") == Fixtures.session())
            #expect(try await s.store.timeline(for: "hpp-1").events.map(\.message) == ["first"])
        }
    }

    @Test("A commit is all or nothing", arguments: Backend.allCases)
    func atomicCommit(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            _ = try await s.store.track(Fixtures.session(), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            var changed = Fixtures.session()
            changed.phase = .closed
            var change = Change()
            change.sessions = [changed]
            change.outcomes = [changed.outcome(.cancelled, "x")]
            change.events = [NewEvent(hppSessionID: "hpp-1", orderID: nil, DomainEvent(.tracked, "m"))]
            try await s.store.commit(change, at: Fixtures.t0)
            #expect(try await s.store.session("hpp-1")?.phase == .closed)

            // A change whose intent cannot be written: the session written before it in the same commit must not stick.
            var failing = Change()
            failing.sessions = [Fixtures.session("hpp-2")]
            failing.intents = [Intent(key: "k", kind: .capture, subject: "x", now: Fixtures.t0)]
            try await s.dropTable("intents")
            await #expect(throws: (any Error).self) { try await s.store.commit(failing, at: Fixtures.t0) }
            #expect(try await s.store.session("hpp-2") == nil)
        }
    }

    @Test(
        "A commit that writes a shared intent lands only while the store holds the version its step read; otherwise nothing of it is written",
        arguments: Backend.allCases)
    func intentReadGuard(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            // Two sessions of one KP session, a and b, share its place-order intent.
            let fresh = Intent(key: "place:kp-a", kind: .placeOrder, subject: "a", now: Fixtures.t0)
            for id in ["a", "b"] { _ = try await s.store.track(Fixtures.session(id, kp: "kp-a"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0) }
            /// What a session's step commits when it marks the intent sent from the version it read.
            func sending(_ session: String, read: Intent?, reference: String) -> Change {
                var change = Change()
                var moved = Fixtures.session(session, kp: "kp-a")
                moved.merchantReference = reference
                change.sessions = [moved]
                change.intents = [(read ?? Intent(key: fresh.key, kind: .placeOrder, subject: session, now: Fixtures.t0)).sending(now: Fixtures.t0)]
                change.events = [NewEvent(hppSessionID: session, orderID: nil, DomainEvent(.attempt, "placing the order"))]
                change.intentRead = IntentVersion(key: fresh.key, read: read)
                return change
            }
            // Both sessions read no intent; a's step commits first.
            try await s.store.commit(sending("a", read: nil, reference: "a sent"), at: Fixtures.t0)
            #expect(try await s.store.intent(fresh.key).map { ($0.state, $0.attempts, $0.subject) } ?? (.intended, 0, "") == (.sent, 1, "a"))
            await #expect(throws: IntentMoved.self) { try await s.store.commit(sending("b", read: nil, reference: "b sent"), at: Fixtures.t0) }
            #expect(try await s.store.session("b")?.merchantReference == "ref-1", "nothing of b's commit was written")
            #expect(try await s.store.timeline(for: "b").events.map(\.message) == ["t"])
            #expect(try await s.store.intent(fresh.key)?.subject == "a")

            // b reads it again (sent, attempt 1) and records it as unclear; a's stale version no longer fits.
            let sent = try #require(try await s.store.intent(fresh.key))
            var unclear = Change()
            unclear.intents = [sent.ambiguous("timeout", now: Fixtures.t0)]
            unclear.intentRead = IntentVersion(key: fresh.key, read: sent)
            try await s.store.commit(unclear, at: Fixtures.t0)
            await #expect(throws: IntentMoved.self) { try await s.store.commit(sending("a", read: sent, reference: "a again"), at: Fixtures.t0) }
            #expect(try await s.store.intent(fresh.key)?.state == .ambiguous)

            // Attempts never go back: a write of fewer (a commit delayed past the other session's send) leaves the
            // intent as stored, and the rest of its change is written.
            var late = Change()
            late.intents = [
                Intent(key: fresh.key, kind: .placeOrder, subject: "a", now: Fixtures.t0).retrying("503", at: Fixtures.t0, now: Fixtures.t0)
            ]
            late.events = [NewEvent(hppSessionID: "a", orderID: nil, DomainEvent(.attempt, "late"))]
            try await s.store.commit(late, at: Fixtures.t0)
            #expect(try await s.store.intent(fresh.key).map { ($0.state, $0.attempts) } ?? (.intended, 0) == (.ambiguous, 1))
            #expect(try await s.store.timeline(for: "a").events.map(\.message).contains("late"))

            // The version matters only to a change that writes the intent.
            var readOnly = Change()
            var polled = Fixtures.session("a", kp: "kp-a")
            polled.merchantReference = "read only"
            readOnly.sessions = [polled]
            readOnly.intentRead = IntentVersion(key: fresh.key, read: nil)
            try await s.store.commit(readOnly, at: Fixtures.t0)
            #expect(try await s.store.session("a")?.merchantReference == "read only")
        }
    }

    @Test("Two handles that read the same version of a shared intent and mark it sent at once: exactly one commit lands", arguments: Backend.allCases)
    func intentReadGuardUnderConcurrency(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            let other = try await s.openAnother()
            for round in 0..<20 {
                let key = "place:kp-\(round)"
                for name in ["a", "b"] {
                    _ = try await s.store.track(
                        Fixtures.session("\(name)-\(round)", kp: "kp-\(round)"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
                }
                // Odd rounds race from a version stored before (an attempt that ended unclear), even ones from none.
                var stored: Intent?
                if round % 2 == 1 {
                    let unclear = Intent(key: key, kind: .placeOrder, subject: "c-\(round)", now: Fixtures.t0).sending(now: Fixtures.t0)
                        .ambiguous("timeout", now: Fixtures.t0)
                    var earlier = Change()
                    earlier.intents = [unclear]
                    try await s.store.commit(earlier, at: Fixtures.t0)
                    stored = unclear
                }
                let read = stored
                let outcomes = try await withThrowingTaskGroup(of: (String, Bool).self) { group in
                    for (name, store) in [("a", s.store), ("b", other)] {
                        var change = Change()
                        var sending = (read ?? Intent(key: key, kind: .placeOrder, subject: "", now: Fixtures.t0)).sending(now: Fixtures.t0)
                        sending.subject = "\(name)-\(round)"
                        change.intents = [sending]
                        change.events = [NewEvent(hppSessionID: "\(name)-\(round)", orderID: nil, DomainEvent(.attempt, "placing the order"))]
                        change.intentRead = IntentVersion(key: key, read: read)
                        group.addTask {
                            do {
                                try await store.commit(change, at: Fixtures.t0)
                                return (name, true)
                            } catch is IntentMoved {
                                return (name, false)
                            }
                        }
                    }
                    return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
                }
                let winners = outcomes.filter(\.value).map(\.key)
                #expect(winners.count == 1, "round \(round): \(outcomes)")
                let now = try await s.store.intent(key)
                #expect(now?.attempts == (read?.attempts ?? 0) + 1 && now?.subject == winners.first.map { "\($0)-\(round)" }, "round \(round)")
                for name in ["a", "b"] {
                    let events = try await s.store.timeline(for: "\(name)-\(round)").events.count
                    #expect(events == (winners.first == name ? 2 : 1), "round \(round): \(name)'s event only if its commit landed")
                }
            }
        }
    }

    @Test(
        "Customer tokens: the ones created at a checkout (with their session's account) and the ones charged or cancelled, the most recently used first; one token with its charges oldest first",
        arguments: Backend.allCases)
    func customerTokens(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            var session = Fixtures.session("hpp-tok")
            session.account = AccountID(rawValue: "nordic")!
            _ = try await s.store.track(session, event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            var made = Intent(key: "ct-1", kind: .customerToken, subject: "hpp-tok", now: Fixtures.t0).confirmed(result: "tok-made", now: Fixtures.t0)
            made.updatedAt = Fixtures.t0
            func charge(_ key: String, _ token: String, _ reference: String, at seconds: Double) -> Intent {
                var intent = Intent(key: key, kind: .charge, subject: token, amount: 100, now: Fixtures.t0.addingTimeInterval(seconds))
                intent.reference = reference
                return intent
            }
            var change = Change()
            change.intents = [
                made, charge("ch-1", "tok-made", "r-1", at: 10), charge("ch-2", "tok-other", "r-2", at: 20),
                charge("ch-3", "tok-made", "r-3", at: 30),
                TokenCancelRules.intent(token: "tok-other", key: "cancel-1", account: .default, now: Fixtures.t0.addingTimeInterval(5)),
                Intent(key: "ct-2", kind: .customerToken, subject: "hpp-tok", now: Fixtures.t0),  // not confirmed: no token
            ]
            try await s.store.commit(change, at: Fixtures.t0)
            let listed = try await s.store.customerTokens(limit: 10)
            #expect(listed.map(\.token) == ["tok-made", "tok-other"])
            #expect(listed.first?.account.rawValue == "nordic" && listed.first?.createdBy == "hpp-tok")
            #expect(listed.first?.charges.map(\.reference) == ["r-1", "r-3"])
            #expect(listed.last?.cancellation?.key == "cancel-1" && listed.last?.charges.map(\.reference) == ["r-2"])
            #expect(try await s.store.customerTokens(limit: 1).map(\.token) == ["tok-made"])
            let one = try #require(try await s.store.customerToken("tok-other"))
            #expect(one.charges.count == 1 && one.createdBy == nil && one.account == .default)
            #expect(try await s.store.customerToken("tok-none") == nil)
        }
    }

    @Test("Every value comes back as it was committed: sessions, orders, payment requests, intents", arguments: Backend.allCases)
    func roundTrip(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            var authorized = Fixtures.session("hpp-rt")
            authorized.phase = .authorized
            authorized.tokenExpiresAt = Fixtures.t0.addingTimeInterval(3_600)
            authorized.lastReadAt = Fixtures.t0.addingTimeInterval(0.123_456)
            var placed = Fixtures.order("o-rt", session: "hpp-rt", reference: "ref-1")
            placed.nextDueAt = Fixtures.t0.addingTimeInterval(60)
            var intent = Intent(key: "place:hpp-rt", kind: .placeOrder, subject: "hpp-rt", amount: 1_234, now: Fixtures.t0)
            intent.state = .sent
            intent.attempts = 2
            intent.nextAttemptAt = Fixtures.t0.addingTimeInterval(30)
            let request = TrackedPaymentRequest(paymentRequestID: "pr-1", trackedAt: Fixtures.t0)
            var change = Change()
            change.sessions = [authorized]
            change.newOrders = [placed]
            change.intents = [intent]
            change.paymentRequests = [request]
            try await s.store.commit(change, at: Fixtures.t0)
            #expect(try await s.store.session("hpp-rt") == authorized)
            #expect(try await s.store.order("o-rt") == placed)
            #expect(try await s.store.intent("place:hpp-rt") == intent)
            #expect(try await s.store.intents(subject: "hpp-rt") == [intent])
            #expect(try await s.store.paymentRequest("pr-1") == request)

            // A new order is inserted only if Klarna's id is not known yet; an update replaces it.
            var again = placed
            again.phase = .closed
            var insertOnly = Change()
            insertOnly.newOrders = [again]
            try await s.store.commit(insertOnly, at: Fixtures.t0)
            #expect(try await s.store.order("o-rt") == placed)
            var update = Change()
            update.orders = [again]
            try await s.store.commit(update, at: Fixtures.t0)
            #expect(try await s.store.order("o-rt") == again)
        }
    }

    @Test("Open work lists what is due with its plan's inputs; closed items drop out", arguments: Backend.allCases)
    func openWork(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            var a = Fixtures.session("a")
            a.lastReadAt = Fixtures.t0.addingTimeInterval(5)
            a.expiresAt = Fixtures.t0.addingTimeInterval(7_200)
            _ = try await s.store.track(a, event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            _ = try await s.store.track(Fixtures.session("b"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            var closed = Fixtures.session("b")
            closed.phase = .closed
            var change = Change()
            change.sessions = [closed]
            var pending = Fixtures.order("o-1", session: "b")
            pending.phase = .pendingFraud
            change.newOrders = [pending]
            change.paymentRequests = [TrackedPaymentRequest(paymentRequestID: "pr-1", trackedAt: Fixtures.t0)]
            try await s.store.commit(change, at: Fixtures.t0)
            let work = try await s.store.openWork()
            #expect(Set(work.map(\.key)) == [.session("a"), .order("o-1"), .paymentRequest("pr-1")])
            let sessionWork = try #require(work.first { $0.key == .session("a") })
            #expect(
                sessionWork.kind
                    == .session(.polling, PollProfile(trackedAt: Fixtures.t0, lastReadAt: a.lastReadAt, lastHintAt: nil, expiresAt: a.expiresAt)))
            #expect(sessionWork.due == a.nextDueAt)
            #expect(work.first { $0.key == .order("o-1") }?.kind == .order(.pendingFraud))
        }
    }

    @Test("Wakeups left by other processes are taken once, in order", arguments: Backend.allCases)
    func wakeups(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            _ = try await s.store.track(Fixtures.session("a"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            _ = try await s.store.track(Fixtures.session("b"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            let first = try await s.store.wakeups(after: 0, includingDelivered: false)
            #expect(first.keys == [.session("a"), .session("b")])
            let second = try await s.store.wakeups(after: first.last, includingDelivered: false)
            #expect(second.keys.isEmpty)
            #expect(second.last == first.last)
            _ = try await s.store.track(Fixtures.session("c"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            let third = try await s.store.wakeups(after: second.last, includingDelivered: false)
            #expect(third.keys == [.session("c")])
            #expect(third.last > second.last)
        }
    }

    @Test("Wakeups a delivery's ingest wrote are for a restart only: the running daemon woke itself already", arguments: Backend.allCases)
    func deliveredWakeups(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            _ = try await s.store.track(Fixtures.session("a"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            #expect(try await s.store.ingest(hint("e-1", "a"), at: Fixtures.t0) == .accepted(wake: [.session("a")]))
            let running = try await s.store.wakeups(after: 0, includingDelivered: false)
            #expect(running.keys == [.session("a")])
            #expect(try await s.store.wakeups(after: running.last, includingDelivered: false).keys.isEmpty)
            _ = try await s.store.ingest(hint("e-2", "a"), at: Fixtures.t0)
            #expect(try await s.store.wakeups(after: 0, includingDelivered: true).keys == [.session("a")])
        }
    }

    @Test("A delivery is recorded once: a repeat is acknowledged, counted and not processed again", arguments: Backend.allCases)
    func ingestDedupe(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            _ = try await s.store.track(Fixtures.session("a"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            #expect(try await s.store.ingest(hint("e-1", "a"), at: Fixtures.t0) == .accepted(wake: [.session("a")]))
            #expect(try await s.store.ingest(hint("e-1", "a"), at: Fixtures.t0.addingTimeInterval(5)) == .repeated(firstSeen: Fixtures.t0))
            #expect(try await s.store.timeline(for: "a").events.filter { $0.kind == "webhook" }.count == 1)
            // A hint for a session nobody tracks, without a verified session to start: nothing to wake.
            #expect(try await s.store.ingest(hint("e-2", "unknown"), at: Fixtures.t0) == .accepted(wake: []))
            // A verified callback for a new session starts tracking it.
            let fresh = Fixtures.session("new")
            let tracking = IngestRecord(
                dedupeKey: "e-3", kind: "hpp_status", source: "socket", summary: "s", action: .hintSession(hppSessionID: "new", trackIfUnknown: fresh)
            )
            #expect(try await s.store.ingest(tracking, at: Fixtures.t0) == .accepted(wake: [.session("new")]))
            #expect(try await s.store.session("new") == fresh)
            // A track request for a tracked session is a repeat.
            let track = IngestRecord(dedupeKey: nil, kind: "track", source: "socket", summary: "s", action: .track(fresh))
            #expect(try await s.store.ingest(track, at: Fixtures.t0) == .repeated(firstSeen: Fixtures.t0))
        }
    }

    @Test(
        "Deliveries found together are each recorded as alone, in order: a repeat within them is a repeat, a refusal refuses itself only",
        arguments: Backend.allCases)
    func batchIngest(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            _ = try await s.store.track(Fixtures.session("a"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            let capture = IngestRecord(
                dedupeKey: "cap-x", kind: "capture", source: "spool:c.json", summary: "capture", action: .capture(orderID: "o-x", amount: 1))
            let results = try await s.store.ingest([hint("b-1", "a"), capture, hint("b-1", "a"), hint("b-2", "a")], at: Fixtures.t0)
            #expect(
                results == [
                    .accepted(wake: [.session("a")]), .refused(status: 404, error: "unknown_order", detail: "order o-x is not tracked"),
                    .repeated(firstSeen: Fixtures.t0), .accepted(wake: [.session("a")]),
                ])
            #expect(try await s.store.timeline(for: "a").events.filter { $0.kind == "webhook" }.count == 2)
            // The refused one left nothing behind: once its order is tracked, the same delivery is accepted.
            var change = Change()
            change.newOrders = [Fixtures.order("o-x")]
            try await s.store.commit(change, at: Fixtures.t0)
            #expect(try await s.store.ingest([capture], at: Fixtures.t0) == [.accepted(wake: [.order("o-x")])])
        }
    }

    @Test("Order notifications, KP callbacks and payment request events wake what they name, and only what is tracked", arguments: Backend.allCases)
    func ingestHints(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            _ = try await s.store.track(Fixtures.session("a"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            _ = try await s.store.track(Fixtures.session("b"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            var change = Change()
            change.newOrders = [Fixtures.order("o-1", session: "a")]
            try await s.store.commit(change, at: Fixtures.t0)
            func record(_ key: String, _ action: IngestRecord.Action) -> IngestRecord {
                IngestRecord(
                    dedupeKey: key, kind: "k", source: "socket", summary: "hint \(key)", warning: key == "n-1" ? "late" : nil, action: action)
            }
            #expect(try await s.store.ingest(record("n-1", .hintOrder(orderID: "o-1")), at: Fixtures.t0) == .accepted(wake: [.order("o-1")]))
            #expect(try await s.store.ingest(record("n-2", .hintOrder(orderID: "o-unknown")), at: Fixtures.t0) == .accepted(wake: []))
            let noted = try #require(try await s.store.timeline(for: "o-1").events.first { $0.message == "hint n-1" })
            #expect(noted.hppSessionID == "a" && noted.orderID == "o-1" && noted.detail["warning"] == "late" && noted.detail["source"] == "socket")
            #expect(
                try await s.store.ingest(record("k-1", .hintSessionsOfPayment(kpSessionID: "kp-b")), at: Fixtures.t0)
                    == .accepted(wake: [.session("b")]))
            #expect(try await s.store.ingest(record("k-2", .hintSessionsOfPayment(kpSessionID: "kp-none")), at: Fixtures.t0) == .accepted(wake: []))

            let request = TrackedPaymentRequest(paymentRequestID: "pr-1", trackedAt: Fixtures.t0)
            #expect(
                try await s.store.ingest(record("p-1", .hintPaymentRequest(request)), at: Fixtures.t0) == .accepted(wake: [.paymentRequest("pr-1")]))
            #expect(try await s.store.paymentRequest("pr-1")?.paymentRequestID == "pr-1")
            #expect(
                try await s.store.ingest(record("p-2", .hintPaymentRequest(request)), at: Fixtures.t0.addingTimeInterval(9))
                    == .accepted(wake: [.paymentRequest("pr-1")]))
            #expect(try await s.store.paymentRequest("pr-1") == request.hinted(now: Fixtures.t0.addingTimeInterval(9)))
            #expect(try await s.store.ingest(record("r-1", .recordOnly), at: Fixtures.t0) == .accepted(wake: []))
            #expect(try await s.store.ingest(record("r-1", .recordOnly), at: Fixtures.t0.addingTimeInterval(1)) == .repeated(firstSeen: Fixtures.t0))
            let woken = try await s.store.wakeups(after: 0, includingDelivered: true).keys
            #expect(woken == [.session("a"), .session("b"), .order("o-1"), .session("b"), .paymentRequest("pr-1"), .paymentRequest("pr-1")])
        }
    }

    @Test("A refused delivery leaves nothing but its rejection: sent again once it can be taken, it is accepted", arguments: Backend.allCases)
    func refusedIngest(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            let capture = IngestRecord(
                dedupeKey: "cap-1", kind: "capture", source: "socket", summary: "capture", action: .capture(orderID: "o-1", amount: 500))
            #expect(
                try await s.store.ingest(capture, at: Fixtures.t0)
                    == .refused(status: 404, error: "unknown_order", detail: "order o-1 is not tracked"))
            try await s.store.recordRejection(
                source: "socket", status: 404, error: "unknown_order", detail: "order o-1 is not tracked", at: Fixtures.t0)
            var change = Change()
            change.newOrders = [Fixtures.order("o-1")]
            try await s.store.commit(change, at: Fixtures.t0)
            #expect(try await s.store.ingest(capture, at: Fixtures.t0) == .accepted(wake: [.order("o-1")]))
            #expect(try await s.store.oldestCaptureRequest(orderID: "o-1")?.amount == 500)
            let summary = try await s.store.summary(now: Fixtures.t0)
            #expect(summary.rejectionsLastDay == 1)
            #expect(summary.lastRejection?.contains("socket 404 unknown_order: order o-1 is not tracked") == true)
        }
    }

    @Test("Capture requests: only for open on_request orders, oldest first", arguments: Backend.allCases)
    func captureRequests(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            #expect(try await s.store.requestCapture(orderID: "nope", amount: nil, at: Fixtures.t0) == .unknownOrder)
            var change = Change()
            change.newOrders = [Fixtures.order("o-1", session: "h"), Fixtures.order("o-2", session: "h2", policy: .immediate)]
            try await s.store.commit(change, at: Fixtures.t0)
            guard case .accepted(let first) = try await s.store.requestCapture(orderID: "o-1", amount: 100, at: Fixtures.t0) else {
                Issue.record("refused"); return
            }
            _ = try await s.store.requestCapture(orderID: "o-1", amount: nil, at: Fixtures.t0.addingTimeInterval(1))
            #expect(
                try await s.store.oldestCaptureRequest(orderID: "o-1")
                    == CaptureRequestItem(id: first, orderID: "o-1", amount: 100, requestedAt: Fixtures.t0))
            guard case .refused(let reason) = try await s.store.requestCapture(orderID: "o-2", amount: nil, at: Fixtures.t0) else {
                Issue.record("accepted"); return
            }
            #expect(reason.contains("immediate"))

            var done = Change()
            done.finishedCaptureRequests = [(id: first, state: .done, note: "captured")]
            try await s.store.commit(done, at: Fixtures.t0)
            #expect(try await s.store.oldestCaptureRequest(orderID: "o-1")?.amount == nil)
            #expect(try await s.store.wakeups(after: 0, includingDelivered: false).keys.contains(.order("o-1")))
        }
    }

    @Test(
        "Refund requests: recorded once per reference as an intent with a wakeup; a repeat, a conflict and an unknown order write nothing; open work lists the order until the refund ends, its ledger entry kept",
        arguments: Backend.allCases)
    func refundRequests(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            func ask(_ order: String, _ amount: Int, _ reference: String) async throws -> IngestResult {
                let ask = RefundAsk(orderID: order, amount: amount, reference: reference)
                return try await s.store.ingest(
                    IngestRecord(
                        dedupeKey: nil, kind: "refund_request", source: "test", summary: "refund",
                        action: .refund(ask, key: "key-\(order)-\(reference)"),
                        callerWakes: false), at: Fixtures.t0)
            }
            var closed = Fixtures.order("o-1", session: "h")
            closed.phase = .closed
            closed.outcome = .captured
            closed.nextDueAt = nil
            var change = Change()
            change.newOrders = [closed]
            try await s.store.commit(change, at: Fixtures.t0)
            #expect(try await s.store.openWork().isEmpty)

            #expect(try await ask("o-1", 500, "r-1") == .accepted(wake: [.order("o-1")]))
            #expect(try await ask("o-1", 500, "r-1") == .repeated(firstSeen: Fixtures.t0))
            #expect(
                try await ask("o-1", 700, "r-1")
                    == .refused(
                        status: 409, error: "reference_conflict",
                        detail: "reference r-1 on order o-1 already names a refund of 500 (intended); a refund of 700 needs a reference of its own"))
            guard case .refused(404, "unknown_order", _) = try await ask("o-9", 500, "r-1") else {
                Issue.record("an unknown order was taken")
                return
            }
            let intents = try await s.store.intents(subject: "o-1")
            #expect(intents.map(\.kind) == [.refund])
            #expect(intents.first?.reference == "r-1" && intents.first?.amount == 500 && intents.first?.nextAttemptAt == Fixtures.t0)
            #expect(try await s.store.wakeups(after: 0, includingDelivered: false).keys == [.order("o-1")])
            #expect(try await s.store.timeline(for: "o-1").events.map(\.kind) == ["refund_requested"])
            #expect(try await s.store.openWork() == [OpenWork(key: .order("o-1"), due: Fixtures.t0, kind: .refund)])

            // An open order with a refund: one row, due by the earlier of the two.
            var open = Fixtures.order("o-2", session: "h2")
            open.nextDueAt = Fixtures.t0.addingTimeInterval(3_600)
            var opened = Change()
            opened.newOrders = [open]
            try await s.store.commit(opened, at: Fixtures.t0)
            #expect(try await ask("o-2", 100, "r-2") == .accepted(wake: [.order("o-2")]))
            let both = try await s.store.openWork()
            #expect(both.filter { $0.key == .order("o-2") }.count == 1)
            let row = try #require(both.first { $0.key == .order("o-2") })
            #expect(row.due == Fixtures.t0 && row.kind == .order(.checking), "\(row)")

            var done = Change()
            done.intents = [try #require(intents.first).confirmed(result: "refund-1", now: Fixtures.t0)]
            done.ledgerRefunds = [LedgerRefund(orderID: "o-1", refundID: "refund-1", amount: 500, at: Fixtures.t0, source: .daemon)]
            try await s.store.commit(done, at: Fixtures.t0)
            #expect(try await s.store.openWork().map(\.key) == [.order("o-2")])
            #expect(try await s.store.ledger(orderIDs: ["o-1"], account: .default)["o-1"]?.refunds.map(\.refundID) == ["refund-1"])
        }
    }

    @Test(
        "Two handles ask for one refund at once: one records it, the other answers from it (a repeat with the same amount, 409 with another)",
        arguments: Backend.allCases)
    func concurrentRefundRequests(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            var change = Change()
            change.newOrders = [Fixtures.order("o-1", session: "h")]
            try await s.store.commit(change, at: Fixtures.t0)
            let other = try await s.openAnother()
            for (round, amounts) in [(1, (500, 500)), (2, (500, 700))] {
                let reference = "r-\(round)"
                func ask(_ store: any ReconcilerStore, _ amount: Int) async throws -> IngestResult {
                    let ask = RefundAsk(orderID: "o-1", amount: amount, reference: reference)
                    return try await store.ingest(
                        IngestRecord(
                            dedupeKey: nil, kind: "refund_request", source: "test", summary: "refund",
                            action: .refund(ask, key: "key-\(reference)"), callerWakes: false), at: Fixtures.t0)
                }
                async let first = ask(s.store, amounts.0)
                async let second = ask(other, amounts.1)
                let answers = try await [first, second]
                #expect(answers.filter { $0 == .accepted(wake: [.order("o-1")]) }.count == 1, "\(answers)")
                let rest = try #require(answers.first { $0 != .accepted(wake: [.order("o-1")]) })
                if amounts.0 == amounts.1 {
                    #expect(rest == .repeated(firstSeen: Fixtures.t0), "\(rest)")
                } else {
                    guard case .refused(409, "reference_conflict", _) = rest else {
                        Issue.record("another amount under one reference at once: \(rest)")
                        return
                    }
                }
            }
            #expect(try await s.store.intents(subject: "o-1").count == 2)
        }
    }

    @Test("show finds a payment by HPP id, KP id, order id or merchant reference", arguments: Backend.allCases)
    func timelineLookup(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            _ = try await s.store.track(Fixtures.session("hpp-9", reference: "shop-42"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            var ordered = Fixtures.session("hpp-9", reference: "shop-42")
            ordered.phase = .ordered
            ordered.orderID = "o-9"
            var change = Change()
            change.sessions = [ordered]
            change.newOrders = [Fixtures.order("o-9", session: "hpp-9", reference: "shop-42")]
            change.events = [NewEvent(hppSessionID: "hpp-9", orderID: "o-9", DomainEvent(.orderPlaced, "placed"), detail: ["intent": "k"])]
            change.outcomes = [Outcome(kind: .orderPlaced, reason: "r", hppSessionID: "hpp-9", orderID: "o-9")]
            change.intents = [
                Intent(key: "place:hpp-9", kind: .placeOrder, subject: "hpp-9", now: Fixtures.t0),
                Intent(key: "capture:o-9", kind: .capture, subject: "o-9", now: Fixtures.t0.addingTimeInterval(1)),
            ]
            try await s.store.commit(change, at: Fixtures.t0.addingTimeInterval(1))
            for id in ["hpp-9", "kp-hpp-9", "o-9", "shop-42"] {
                let found = try await s.store.timeline(for: id)
                #expect(found.sessions.map(\.hppSessionID) == ["hpp-9"], "\(id)")
                #expect(found.orders.map(\.orderID) == ["o-9"], "\(id)")
                #expect(found.events.map(\.kind) == ["tracked", "order_placed"], "\(id)")
                #expect(found.events.last?.detail == ["intent": "k"])
                #expect(found.events.last?.at == Fixtures.t0.addingTimeInterval(1))
                #expect(found.outcomes.map(\.outcome.kind) == [.orderPlaced])
                #expect(found.intents.map(\.key) == ["place:hpp-9", "capture:o-9"])
            }
            #expect(try await s.store.timeline(for: "unknown").sessions.isEmpty)
            let view = try await s.store.payment("shop-42")
            #expect(view.orders.map(\.orderID) == ["o-9"])
        }
    }

    @Test("list filters by phase, outcome, intent state or kind, and account, newest first", arguments: Backend.allCases)
    func listing(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            _ = try await s.store.track(Fixtures.session("a"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            var other = Fixtures.session("b")
            let us = AccountID(rawValue: "us")!
            other.account = us
            _ = try await s.store.track(other, event: DomainEvent(.tracked, "t"), at: Fixtures.t0.addingTimeInterval(1))
            var closed = Fixtures.session("c")
            closed.phase = .closed
            var change = Change()
            change.sessions = [closed]
            change.intents = [Intent(key: "cap", kind: .capture, subject: "o", now: Fixtures.t0)]
            try await s.store.commit(change, at: Fixtures.t0.addingTimeInterval(2))
            #expect(try await s.store.list(phase: nil, account: nil, limit: 10).sessions.map(\.hppSessionID) == ["c", "b", "a"])
            #expect(try await s.store.list(phase: nil, account: nil, limit: 2).sessions.count == 2)
            #expect(try await s.store.list(phase: "polling", account: nil, limit: 10).sessions.map(\.hppSessionID) == ["b", "a"])
            #expect(try await s.store.list(phase: "capture", account: nil, limit: 10).intents.map(\.key) == ["cap"])
            #expect(try await s.store.list(phase: "intended", account: nil, limit: 10).intents.map(\.key) == ["cap"])
            // By account: the session tracked as us's, and the intents of its units only (a session's intents name
            // its HPP session, as the engine writes them).
            var placing = Change()
            placing.intents = [Intent(key: "place-b", kind: .placeOrder, subject: other.hppSessionID, now: Fixtures.t0)]
            try await s.store.commit(placing, at: Fixtures.t0.addingTimeInterval(3))
            let ours = try await s.store.list(phase: nil, account: us, limit: 10)
            #expect(ours.sessions.map(\.hppSessionID) == ["b"] && ours.sessions.first?.account == us)
            #expect(ours.intents.map(\.key) == ["place-b"])
            #expect(try await s.store.list(phase: "polling", account: .default, limit: 10).sessions.map(\.hppSessionID) == ["a"])
            #expect(try await s.store.sessionAccount(hppSessionID: "b", kpSessionID: nil) == us)
            #expect(try await s.store.sessionAccount(hppSessionID: nil, kpSessionID: other.kpSessionID) == us)
            #expect(try await s.store.sessionAccount(hppSessionID: "nobody", kpSessionID: nil) == nil)
        }
    }

    @Test("status counts, oldest open item, next deadline, backlog and Klarna health", arguments: Backend.allCases)
    func summary(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            var a = Fixtures.session("a")
            a.expiresAt = Fixtures.t0.addingTimeInterval(7_200)
            _ = try await s.store.track(a, event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            var b = Fixtures.session("b")
            b.trackedAt = Fixtures.t0.addingTimeInterval(10)
            b.nextDueAt = Fixtures.t0.addingTimeInterval(500)
            b.phase = .authorized
            b.tokenExpiresAt = Fixtures.t0.addingTimeInterval(3_600)
            _ = try await s.store.track(b, event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            var change = Change()
            change.health = [(key: .klarnaOK, detail: ""), (key: .klarnaError, detail: "HTTP 503")]
            change.outcomes = [Outcome(kind: .cancelled, reason: "r", hppSessionID: "x")]
            try await s.store.commit(change, at: Fixtures.t0.addingTimeInterval(5))
            let summary = try await s.store.summary(now: Fixtures.t0.addingTimeInterval(100))
            #expect(summary.sessionsByPhase == ["polling": 1, "authorized": 1])
            #expect(summary.outcomesByKind == ["cancelled": 1])
            #expect(summary.oldestOpenID == "a")
            #expect(summary.oldestOpenSince == Fixtures.t0)
            #expect(summary.nextDeadlineWhat == "session b")
            #expect(summary.nextDeadline == Fixtures.t0.addingTimeInterval(3_600))
            #expect(summary.backlog == 1)
            #expect(summary.nextDueAt == Fixtures.t0)
            #expect(summary.undeliveredOutcomes == 1)
            #expect(summary.lastKlarnaErrorDetail == "HTTP 503")
            #expect(summary.lastKlarnaSuccess == Fixtures.t0.addingTimeInterval(5))
            let live = try await s.store.liveStatus()
            #expect(live.lastKlarnaError == Fixtures.t0.addingTimeInterval(5))
            #expect(live.unfinishedIntents == 0)
            let snapshot = try await s.store.stateSnapshot()
            #expect(snapshot.openSessionsByPhase == ["polling": 1, "authorized": 1])
            #expect(snapshot.oldestOpenSince == Fixtures.t0)
            #expect(snapshot.nextDeadline == Fixtures.t0.addingTimeInterval(3_600))
            #expect(snapshot.outboxBacklog == 1 && snapshot.notifyBacklog == 1)
            try await s.store.probeWrites()
        }
    }

    @Test("Outcomes wait for their outbox file and their notification; a failed notification comes back when due", arguments: Backend.allCases)
    func outcomeQueue(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            var change = Change()
            change.outcomes = [
                Outcome(kind: .captured, reason: "r", hppSessionID: "a", orderID: "o-a"), Outcome(kind: .cancelled, reason: "r", hppSessionID: "b"),
            ]
            try await s.store.commit(change, at: Fixtures.t0)
            let pending = try await s.store.undeliveredOutcomes(now: Fixtures.t0, limit: 10)
            #expect(pending.map(\.outcome.kind) == [.captured, .cancelled])
            #expect(pending.allSatisfy { !$0.outboxWritten && !$0.notified && $0.at == Fixtures.t0 })
            #expect(try await s.store.undeliveredOutcomes(now: Fixtures.t0, limit: 1).count == 1)
            let (first, second) = (pending[0].id, pending[1].id)
            try await s.store.markOutboxWritten([first, second], notified: false)
            let written = try await s.store.undeliveredOutcomes(now: Fixtures.t0, limit: 10)
            #expect(written.map(\.id) == [first, second], "written, still to be notified")
            #expect(written.allSatisfy { $0.outboxWritten && !$0.notified })
            try await s.store.notifyFailed(first, nextAt: Fixtures.t0.addingTimeInterval(60))
            try await s.store.markNotified(second)
            #expect(try await s.store.undeliveredOutcomes(now: Fixtures.t0, limit: 10).isEmpty)
            let due = try await s.store.undeliveredOutcomes(now: Fixtures.t0.addingTimeInterval(60), limit: 10)
            #expect(due.map(\.id) == [first])
            #expect(due.first?.notifyAttempts == 1)
            #expect(due.first?.notifyNextAt == Fixtures.t0.addingTimeInterval(60))
            try await s.store.notifyFailed(first, nextAt: nil)  // given up
            #expect(try await s.store.undeliveredOutcomes(now: Fixtures.t0.addingTimeInterval(3_600), limit: 10).isEmpty)

            // Without notify.url: written and delivered in one mark.
            var more = Change()
            more.outcomes = [Outcome(kind: .expired, reason: "r", hppSessionID: "c")]
            try await s.store.commit(more, at: Fixtures.t0)
            let third = try #require(try await s.store.undeliveredOutcomes(now: Fixtures.t0, limit: 10).first).id
            try await s.store.markOutboxWritten([third], notified: true)
            #expect(try await s.store.undeliveredOutcomes(now: Fixtures.t0.addingTimeInterval(3_600), limit: 10).isEmpty)
        }
    }

    @Test("Reload requests are answered up to the newest the daemon saw", arguments: Backend.allCases)
    func reloadMailbox(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            #expect(try await s.store.newestReloadRequest() == nil)
            let first = try await s.store.requestReload(at: Fixtures.t0)
            let second = try await s.store.requestReload(at: Fixtures.t0)
            #expect(try await s.store.newestReloadRequest() == second)
            #expect(try await s.store.reloadAnswer(first) == nil)
            try await s.store.answerReloads(through: second, ok: false, message: "config error: x", at: Fixtures.t0)
            #expect(try await s.store.reloadAnswer(first) == ReloadAnswer(ok: false, message: "config error: x"))
            #expect(try await s.store.reloadAnswer(second) == ReloadAnswer(ok: false, message: "config error: x"))
            #expect(try await s.store.newestReloadRequest() == nil)
            let third = try await s.store.requestReload(at: Fixtures.t0)
            try await s.store.answerReloads(through: third, ok: true, message: "reloaded", at: Fixtures.t0)
            #expect(try await s.store.reloadAnswer(second)?.message == "config error: x", "an answered request was answered again")
            #expect(try await s.store.reloadAnswer(third) == ReloadAnswer(ok: true, message: "reloaded"))
        }
    }

    @Test(
        "A step's inputs in one read are what the separate reads give: the hold and pending requests in order, the unit, its intents oldest first; nothing of another unit",
        arguments: Backend.allCases)
    func stepInputs(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            _ = try await s.store.track(Fixtures.session("a"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            _ = try await s.store.track(Fixtures.session("b"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            var change = Change()
            change.newOrders = [Fixtures.order("o-a", session: "a")]
            change.paymentRequests = [TrackedPaymentRequest(paymentRequestID: "pr-1", trackedAt: Fixtures.t0)]
            // a2 is a second session of a's KP session: the intents they share come with either's inputs.
            _ = try await s.store.track(Fixtures.session("a2", kp: "kp-a"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            change.intents = [
                Intent(key: "place:a", kind: .placeOrder, subject: "a", now: Fixtures.t0),
                Intent(key: "token:a2", kind: .customerToken, subject: "a2", now: Fixtures.t0),
                Intent(key: "capture:o-a:2", kind: .capture, subject: "o-a", now: Fixtures.t0.addingTimeInterval(2)),
                Intent(key: "capture:o-a:1", kind: .capture, subject: "o-a", now: Fixtures.t0.addingTimeInterval(1)),
                Intent(key: "place:b", kind: .placeOrder, subject: "b", now: Fixtures.t0),
            ]
            change.holds = [(key: .order("o-a"), by: "uid 0 (root)")]
            try await s.store.commit(change, at: Fixtures.t0)
            _ = try await s.store.submit(
                [
                    OperatorRequest(key: .order("o-a"), action: .release, requestedBy: "uid 0 (root)", requestedAt: Fixtures.t0),
                    OperatorRequest(key: .order("o-a"), action: .retry, orderID: "o-a", requestedBy: "uid 1000 (alice)", requestedAt: Fixtures.t0),
                    OperatorRequest(key: .session("b"), action: .hold, requestedBy: "uid 0 (root)", requestedAt: Fixtures.t0),
                ], delivered: false, at: Fixtures.t0)

            for key in [WorkKey.session("a"), .order("o-a"), .paymentRequest("pr-1"), .session("nobody"), .order("none")] {
                let inputs = try await s.store.stepInputs(for: key)
                #expect(inputs.controls == (try await s.store.operatorControls(for: key)), "\(key)")
                var intents: [Intent] = []
                if let subject = key.intentSubject { intents = try await s.store.intents(subject: subject) }
                if key.orderID == nil {
                    #expect(inputs.intents == nil, "\(key): only an order's intents come with the rest")
                } else {
                    #expect(inputs.intents == nil || inputs.intents == intents, "\(key): the order's intents, or none read")
                    #expect(s.backend == .sqlite || inputs.intents != nil, "PostgreSQL reads an order's with the rest")
                }
                #expect(s.backend == .sqlite || inputs.unitRead, "PostgreSQL reads the unit with the rest")
                if inputs.unitRead {
                    switch key {
                    case .session(let id):
                        #expect(inputs.session == (try await s.store.session(id)) && inputs.order == nil && inputs.paymentRequest == nil)
                    case .order(let id):
                        #expect(inputs.order == (try await s.store.order(id)) && inputs.session == nil && inputs.paymentRequest == nil)
                    case .paymentRequest(let id):
                        #expect(inputs.paymentRequest == (try await s.store.paymentRequest(id)) && inputs.session == nil && inputs.order == nil)
                    case .customerToken:
                        Issue.record("a customer token's step reads its intent alone")
                    }
                }
            }
            let order = try await s.store.stepInputs(for: .order("o-a"))
            #expect(order.controls.held && order.controls.pending.map(\.action) == [.release, .retry])
            #expect(order.controls.pending.last?.orderID == "o-a" && order.controls.pending.last?.requestedBy == "uid 1000 (alice)")
            if order.unitRead { #expect(order.order?.orderID == "o-a") }
            if let intents = order.intents { #expect(intents.map(\.key) == ["capture:o-a:1", "capture:o-a:2"], "oldest first") }
            let session = try await s.store.stepInputs(for: .session("a"))
            #expect(!session.controls.held && session.controls.pending.isEmpty)
            if session.unitRead { #expect(session.session?.hppSessionID == "a") }
            #expect(s.backend == .sqlite || session.sessionIntents != nil, "PostgreSQL reads a session's shared intents with the rest")
            for id in ["a", "a2"] {
                let shared = try await s.store.stepInputs(for: .session(id)).sessionIntents
                if s.backend == .postgres {
                    #expect(Set(shared?.map(\.key) ?? []) == ["place:a", "token:a2"], "\(id): those of its KP session only")
                }
            }
            #expect(try await s.store.stepInputs(for: .order("o-a")).sessionIntents == nil, "only a session's step reads them")
            let b = try await s.store.stepInputs(for: .session("b")).sessionIntents
            #expect(s.backend == .sqlite || b?.map(\.key) == ["place:b"])
            let request = try await s.store.stepInputs(for: .paymentRequest("pr-1"))
            if request.unitRead { #expect(request.paymentRequest?.paymentRequestID == "pr-1") }
            let none = try await s.store.stepInputs(for: .order("none"))
            #expect(none.controls == OperatorControls(held: false, pending: []) && none.order == nil)
            #expect(s.backend == .sqlite || none.intents == [], "PostgreSQL: an order without intents, read as none")
        }
    }

    @Test("Operator requests wait for the engine's answer; holds are placed, listed and lifted", arguments: Backend.allCases)
    func operatorRequests(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            _ = try await s.store.track(Fixtures.session("a"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            var change = Change()
            change.newOrders = [Fixtures.order("o-a", session: "a")]
            try await s.store.commit(change, at: Fixtures.t0)
            let asked = OperatorRequest(key: .session("a"), action: .hold, requestedBy: "uid 1000 (alice)", requestedAt: Fixtures.t0)
            let retry = OperatorRequest(key: .order("o-a"), action: .retry, orderID: "o-x", requestedBy: "uid 0 (root)", requestedAt: Fixtures.t0)
            let ids = try await s.store.submit([asked, retry], delivered: false, at: Fixtures.t0)
            #expect(ids.count == 2)
            #expect(Set(try await s.store.keysWithPendingOperatorRequests()) == [.session("a"), .order("o-a")])
            let controls = try await s.store.operatorControls(for: .session("a"))
            #expect(!controls.held)
            #expect(controls.pending.map(\.action) == [.hold])
            #expect(controls.pending.first?.requestedBy == "uid 1000 (alice)")
            #expect(try await s.store.operatorControls(for: .order("o-a")).pending.first?.orderID == "o-x")
            #expect(
                try await s.store.timeline(for: "a").events.contains {
                    $0.kind == "operator_request" && $0.message == "hold requested by uid 1000 (alice)"
                })
            #expect(Set(try await s.store.wakeups(after: 0, includingDelivered: false).keys) == [.session("a"), .order("o-a")])

            var answer = Change()
            answer.holds = [(key: .session("a"), by: "uid 1000 (alice)")]
            answer.answeredRequests = [(id: ids[0], state: .done, note: "held")]
            try await s.store.commit(answer, at: Fixtures.t0.addingTimeInterval(1))
            #expect(try await s.store.operatorControls(for: .session("a")) == OperatorControls(held: true, pending: []))
            #expect(try await s.store.operatorRequests(ids).map(\.state) == [.done, .pending])
            #expect(try await s.store.operatorRequests(ids).first?.note == "held")
            #expect(
                try await s.store.holds([.session("a"), .order("o-a")]) == [
                    .session("a"): Hold(since: Fixtures.t0.addingTimeInterval(1), by: "uid 1000 (alice)")
                ])
            #expect(try await s.store.list(phase: "held", account: nil, limit: 10).sessions.map(\.hppSessionID) == ["a"])
            #expect(try await s.store.summary(now: Fixtures.t0).held == 1)
            #expect(try await s.store.payment("a").held == [.session("a")])

            // One commit that lifts one hold and places another; a hold placed and lifted in one commit is lifted.
            var release = Change()
            release.releases = [.session("a"), .order("o-b")]
            release.holds = [(key: .order("o-a"), by: "uid 1000 (alice)"), (key: .order("o-b"), by: "uid 1000 (alice)")]
            try await s.store.commit(release, at: Fixtures.t0)
            #expect(try await s.store.holds([.session("a")]).isEmpty)
            #expect(try await s.store.heldOrders(among: ["o-a", "o-b", "o-c"]) == ["o-a"])
            #expect(try await s.store.keysWithPendingOperatorRequests() == [.order("o-a")])
        }
    }

    @Test("Retention removes a finished payment whole, batch by batch; a dry run only counts", arguments: Backend.allCases)
    func prune(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            func payment(_ id: String, closed: Bool = true, intent: Intent.State = .confirmed, delivered: Bool = true) async throws {
                _ = try await s.store.track(Fixtures.session(id), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
                guard closed else { return }
                var done = Fixtures.session(id)
                done.phase = .closed
                var change = Change()
                change.sessions = [done]
                change.outcomes = [done.outcome(.cancelled, "consumer cancelled")]
                var sideEffect = Intent(key: "intent-\(id)", kind: .placeOrder, subject: id, now: Fixtures.t0)
                sideEffect.state = intent
                change.intents = [sideEffect]
                try await s.store.commit(change, at: Fixtures.t0)
                guard delivered else { return }
                for outcome in try await s.store.undeliveredOutcomes(now: Fixtures.t0, limit: 100) where outcome.outcome.hppSessionID == id {
                    try await s.store.markOutboxWritten([outcome.id], notified: true)
                }
            }
            try await payment("done-1")
            try await payment("done-2")
            try await payment("open", closed: false)
            try await payment("unsettled", intent: .ambiguous)
            try await payment("undelivered", delivered: false)
            try await s.store.recordRejection(source: "socket", status: 400, error: "bad_json", detail: "x", at: Fixtures.t0)
            let cutoffs = PruneCutoffs(
                closedPaymentsBefore: Fixtures.t0.addingTimeInterval(1), eventsBefore: nil, rejectionsBefore: Fixtures.t0.addingTimeInterval(1),
                spoolDoneBefore: nil,
                outboxAcknowledgedBefore: nil)
            let counted = try await s.store.prune(cutoffs, limit: -1, dryRun: true)
            #expect(counted.payments == 2 && counted.rejections == 1)
            #expect(try await s.store.session("done-1") != nil)
            #expect(try await s.store.prune(cutoffs, limit: 1, dryRun: false).payments == 1)
            #expect(try await s.store.prune(cutoffs, limit: 1, dryRun: false).payments == 1)
            #expect(try await s.store.prune(cutoffs, limit: 1, dryRun: false).isEmpty)
            for gone in ["done-1", "done-2"] {
                #expect(try await s.store.session(gone) == nil)
                #expect(try await s.store.intent("intent-\(gone)") == nil)
                let timeline = try await s.store.timeline(for: gone)
                #expect(timeline.events.isEmpty && timeline.outcomes.isEmpty)
            }
            for kept in ["open", "unsettled", "undelivered"] { #expect(try await s.store.session(kept) != nil, "\(kept) was pruned") }
        }
    }

    // MARK: Concurrent writers

    @Test(
        "Two handles deliver the same webhooks at once: each is accepted exactly once, each repeat names the first's time",
        arguments: Backend.allCases)
    func concurrentDeliveries(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            _ = try await s.store.track(Fixtures.session("a"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
            let other = try await s.openAnother()
            // Each attempt at its own time, so that a repeat's first-seen time says which delivery it found.
            let results = try await withThrowingTaskGroup(of: (Int, IngestResult).self) { group in
                for attempt in 0..<60 {
                    let store = attempt.isMultiple(of: 2) ? s.store : other
                    let record = hint("event-\(attempt % 12)", "a")
                    group.addTask { (attempt, try await store.ingest(record, at: Fixtures.t0.addingTimeInterval(Double(attempt)))) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let accepted = results.filter { $0.1 == .accepted(wake: [.session("a")]) }
            #expect(accepted.count == 12)
            #expect(Set(accepted.map { $0.0 % 12 }).count == 12)
            for (attempt, result) in results {
                guard case .repeated(let firstSeen) = result else { continue }
                let first = try #require(accepted.first { $0.0 % 12 == attempt % 12 })
                #expect(firstSeen == Fixtures.t0.addingTimeInterval(Double(first.0)))
            }
            #expect(results.filter { if case .repeated = $0.1 { true } else { false } }.count == 48)
            #expect(try await s.store.timeline(for: "a").events.filter { $0.kind == "webhook" }.count == 12)
        }
    }

    @Test(
        "Verified callbacks for many new sessions at once, each sent twice: every session tracked once from its callback, with one event, and every repeat counted",
        arguments: Backend.allCases)
    func concurrentCallbacks(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            // One handle: on PostgreSQL the callbacks that arrive together share statements (IngestBatcher).
            let results = try await withThrowingTaskGroup(of: (Int, IngestResult).self) { group in
                for attempt in 0..<80 {
                    let id = "cb-\(attempt % 40)"
                    let record = IngestRecord(
                        dedupeKey: "callback-\(attempt % 40)", kind: "hpp_status", source: "socket", summary: "status callback",
                        action: .hintSession(hppSessionID: id, trackIfUnknown: Fixtures.session(id)))
                    group.addTask { [store = s.store] in (attempt, try await store.ingest(record, at: Fixtures.t0)) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let accepted = results.filter { if case .accepted = $0.1 { true } else { false } }
            #expect(accepted.count == 40)
            #expect(Set(accepted.map { $0.0 % 40 }).count == 40)
            #expect(results.filter { if case .repeated = $0.1 { true } else { false } }.count == 40)
            for index in 0..<40 {
                #expect(try await s.store.session("cb-\(index)") != nil)
                #expect(try await s.store.timeline(for: "cb-\(index)").events.count == 1)
            }
        }
    }

    @Test("Two handles track the same sessions at once: one registration each, one event each", arguments: Backend.allCases)
    func concurrentTracks(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            let other = try await s.openAnother()
            let results = try await withThrowingTaskGroup(of: TrackResult.self) { group in
                for attempt in 0..<40 {
                    let store = attempt.isMultiple(of: 2) ? s.store : other
                    let tracked = Fixtures.session("s-\(attempt % 8)")
                    group.addTask { try await store.track(tracked, event: DomainEvent(.tracked, "t"), at: Fixtures.t0) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(results.filter { if case .tracked = $0 { true } else { false } }.count == 8)
            for index in 0..<8 { #expect(try await s.store.timeline(for: "s-\(index)").events.count == 1) }
        }
    }

    @Test("Commits from many tasks on two handles all land, and every wakeup is taken exactly once", arguments: Backend.allCases)
    func concurrentCommitsAndWakeups(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            let other = try await s.openAnother()
            // Writers track sessions (each leaves a wakeup) while two readers take wakeups: none lost, none twice.
            let taken = try await withThrowingTaskGroup(of: [WorkKey].self) { group in
                for writer in 0..<4 {
                    let store = writer.isMultiple(of: 2) ? s.store : other
                    group.addTask {
                        for index in 0..<25 {
                            _ = try await store.track(Fixtures.session("w\(writer)-\(index)"), event: DomainEvent(.tracked, "t"), at: Fixtures.t0)
                        }
                        return []
                    }
                }
                for reader in 0..<2 {
                    let store = reader == 0 ? s.store : other
                    group.addTask {
                        var keys: [WorkKey] = []
                        var last: Int64 = 0
                        for _ in 0..<50 {
                            let batch = try await store.wakeups(after: last, includingDelivered: false)
                            keys += batch.keys
                            last = batch.last
                            await Task.yield()
                        }
                        return keys
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            let rest = try await s.store.wakeups(after: 0, includingDelivered: false).keys
            let all = taken + rest
            #expect(all.count == 100, "wakeups taken: \(all.count)")
            #expect(Set(all).count == 100)
            #expect(try await s.store.openWork().count == 100)
        }
    }
}
