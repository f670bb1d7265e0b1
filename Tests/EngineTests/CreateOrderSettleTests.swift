import Foundation
import KlarnaAPI
import KlarnaSandbox
import Synchronization
import Testing
import TestSupport
@testable import Engine
@testable import ReconcilerCore
import ReconcilerStore
import Settings
@testable import SQLiteBackend

/// Issue 22, part 5: after a create-order whose fate is unclear, no second one for the same authorization token
/// before the settle period (`engine.create_order_settle_seconds`) has passed; only a request provably never sent is
/// retried at once.
///
/// The engine and the sandbox share one manual clock, as in ``EngineHarness``: the sandbox holds a create-order (or its
/// answer) in sandbox time, so nothing moves while the engine waits for it, and the client's timeout (real time) always
/// fires first. The settle period is then sandbox time too, and the sandbox counts any create-order that arrives while
/// an earlier one for its token is pending.
@Suite("Create-order settle period against the sandbox")
struct CreateOrderSettleTests {
    static let completesSoon = [ScheduleStep(afterSeconds: 5, status: "IN_PROGRESS"), ScheduleStep(afterSeconds: 30, status: "COMPLETED")]
    static let settle: Duration = .seconds(40)

    /// ``EngineHarness`` with this suite's settle period and the first `refusedCreateOrders` create-orders sent to a
    /// port nobody listens on (a real connect failure: refused before the request's first byte).
    static func with(
        settle: Duration = CreateOrderSettleTests.settle, requestTimeout: Duration, refusedCreateOrders: Int = 0,
        _ body: (EngineHarness) async throws -> Void
    ) async throws {
        let refusing = try RefusingPort()
        var settings = EngineHarness.fastSettings
        settings.createOrderSettle = settle
        settings.longestCall = requestTimeout + .seconds(1)
        try await EngineHarness.with(
            settings: settings, requestTimeout: requestTimeout,
            wrapTransport: { RefusingTransport($0, refusing: refusedCreateOrders, closedPort: refusing.port) }, body)
        withExtendedLifetime(refusing) {}
    }

    /// Nothing for the payment between an unclear create-order and the end of its settle period: every later KP read
    /// and create-order of `created` comes at least `settle` after `first` (the unclear one).
    static func expectSettled(
        _ h: EngineHarness, _ created: CreatedSession, after first: SandboxRequestRecord, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let later = h.sandbox.requests().filter { request in
            request.seq > first.seq
                && (request.route == "kp.create_order" || (request.route == "kp.read_session" && request.path.hasSuffix(created.kpSessionId)))
        }
        let early = later.filter { $0.at.timeIntervalSince(first.at) < Self.settle.timeInterval - 0.001 }
        #expect(
            early.isEmpty, "called within the settle period: \(early.map { "\($0.route) +\($0.at.timeIntervalSince(first.at)) s" })",
            sourceLocation: sourceLocation)
        #expect(!later.isEmpty, "the KP session is read when the settle period is over", sourceLocation: sourceLocation)
    }

    /// The payment ended and Klarna's one order is accounted for: linked and captured (once the order's id is found
    /// where Klarna names it), or `needs_attention` saying Klarna placed it.
    static func expectOneOrderAccountedFor(
        _ h: EngineHarness, _ created: CreatedSession, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let placed = h.effects(.orderPlaced, kp: created.kpSessionId)
        #expect(placed.count == 1, sourceLocation: sourceLocation)
        let session = try await h.session(created)
        #expect(!session.isOpen, "nothing stays open", sourceLocation: sourceLocation)
        let outcomes = try await h.store.timeline(for: created.hppSessionId).outcomes.map(\.outcome)
        if let orderID = session.orderID {
            #expect(orderID == placed.first?.orderId, sourceLocation: sourceLocation)
            #expect(outcomes.last?.kind == .captured, sourceLocation: sourceLocation)
        } else {
            #expect(outcomes.map(\.kind) == [.needsAttention], sourceLocation: sourceLocation)
            #expect(
                outcomes.first?.reason.contains("Klarna placed the order") == true, "\(outcomes.first?.reason ?? "")", sourceLocation: sourceLocation)
        }
    }

    @Test(
        "A create-order held up past the client's timeout, or answered too late: no second one meets it, the KP session is read only after the settle period",
        arguments: [SandboxFault.Kind.holdRequest, .holdAnswer])
    func heldCreateOrder(kind: SandboxFault.Kind) async throws {
        try await Self.with(requestTimeout: .seconds(2)) { h in
            let created = try await h.track(SessionSpec(orderAmount: 5_100, merchantReference: "held-1", schedule: Self.completesSoon))
            // Held for 25 s of sandbox time: far past the client's 2 s, inside the 40 s settle period.
            h.sandbox.addFault(SandboxFault(route: "kp.create_order", kind: kind, holdSeconds: 25, count: 1))
            try await h.run()

            let counts = h.sandbox.createOrderCounts()
            #expect(counts.map(\.received) == [1], "exactly one create-order reached Klarna")
            #expect(counts.allSatisfy { $0.overlapping == 0 }, "a create-order met a pending one: \(counts)")
            #expect(counts.first?.kpSessionId == created.kpSessionId)
            let first = try #require(h.sandbox.requests(route: "kp.create_order").first)
            Self.expectSettled(h, created, after: first)
            try await Self.expectOneOrderAccountedFor(h, created)
            h.expectNoDoubleEffects()

            // The operator sees the wait: why and until when, on the timeline (`show`) and in the log (journald).
            let events = try await h.store.timeline(for: created.hppSessionId).events
            let unclear = try #require(events.first { $0.kind == "ambiguous" })
            let until = TrackedSession.format(first.at.addingTimeInterval(Self.settle.timeInterval))
            #expect(unclear.detail["settle_until"] == until)
            #expect(unclear.message.contains("it may still be on its way to Klarna: settling until \(until)"), "\(unclear.message)")
            #expect(h.logs.all.contains { $0.contains("settling until \(until)") && $0.contains("settle_until=\(until)") })
        }
    }

    @Test("A settle period shorter than the hold lets a second create-order meet the first: the sandbox counts it (what the other tests fail on)")
    func shortSettleIsCaught() async throws {
        try await Self.with(settle: .seconds(10), requestTimeout: .seconds(2)) { h in
            let created = try await h.track(SessionSpec(orderAmount: 5_200, schedule: Self.completesSoon))
            h.sandbox.addFault(SandboxFault(route: "kp.create_order", kind: .holdRequest, holdSeconds: 60, count: 1))
            try await h.run()
            let counts = h.sandbox.createOrderCounts()
            #expect(counts.map(\.received) == [2])
            #expect(counts.map(\.overlapping) == [1])
            #expect(counts.first?.kpSessionId == created.kpSessionId)
        }
    }

    @Test("A create-order reset after it was sent, that Klarna never acted on: placed again after the settle period, then captured")
    func resetAfterSending() async throws {
        try await Self.with(requestTimeout: .seconds(10)) { h in
            let created = try await h.track(SessionSpec(orderAmount: 5_300, schedule: Self.completesSoon))
            h.sandbox.addFault(SandboxFault(route: "kp.create_order", kind: .reset, count: 1))
            try await h.run()
            #expect(try await h.outcomes(created) == [.orderPlaced, .captured])
            let attempts = h.sandbox.requests(route: "kp.create_order")
            #expect(attempts.count == 2)
            #expect(attempts.first?.status == nil, "the first was reset")
            Self.expectSettled(h, created, after: try #require(attempts.first))
            #expect(h.sandbox.createOrderCounts().map(\.overlapping) == [0])
            h.expectNoDoubleEffects()
            let events = try await h.store.timeline(for: created.hppSessionId).events
            #expect(events.contains { $0.kind == "ambiguous" && $0.detail["settle_until"] != nil })
            #expect(events.contains { $0.kind == "resolved" && $0.message.contains("settle period") })
            let intent = try #require(try await h.store.timeline(for: created.hppSessionId).intents.first { $0.kind == .placeOrder })
            #expect(intent.state == .confirmed && intent.attempts == 2)
        }
    }

    @Test("A create-order refused before its first byte (connect failure) is retried at once, without the settle period")
    func connectFailureRetriedAtOnce() async throws {
        try await Self.with(settle: .seconds(300), requestTimeout: .seconds(10), refusedCreateOrders: 1) { h in
            let created = try await h.track(SessionSpec(orderAmount: 5_400, schedule: Self.completesSoon))
            try await h.run()
            #expect(try await h.outcomes(created) == [.orderPlaced, .captured])
            #expect(h.sandbox.requests(route: "kp.create_order").count == 1, "the refused one never reached Klarna")
            let events = try await h.store.timeline(for: created.hppSessionId).events
            let attempts = events.filter { $0.kind == "attempt" && $0.message.hasPrefix("placing the order") }
            #expect(attempts.count == 2)
            if attempts.count == 2 {
                let gap = attempts[1].at.timeIntervalSince(attempts[0].at)
                #expect(gap < 5, "retried after the ordinary backoff (\(gap) s), not after the 300 s settle period")
            }
            let retry = try #require(events.first { $0.kind == "retry" })
            #expect(retry.message.contains("connect failed") && retry.message.contains("without a settle period"), "\(retry.message)")
            #expect(!events.contains { $0.kind == "ambiguous" || $0.kind == "settling" })
            h.expectNoDoubleEffects()
        }
    }

    @Test("A create-order found sent after a restart settles from when it was sent before the KP session is read")
    func sentFoundAfterRestart() async throws {
        try await Self.with(requestTimeout: .seconds(30)) { h in
            let created = try await h.track(SessionSpec(orderAmount: 5_500, schedule: Self.completesSoon))
            h.sandbox.addFault(SandboxFault(route: "kp.create_order", kind: .holdRequest, holdSeconds: 25, count: 1))
            // The daemon stops (its step is cancelled) while its create-order is held on the way: the intent stays sent.
            let stopped = Task { try await h.run() }
            try await waitUntil { !h.sandbox.requests(route: "kp.create_order").isEmpty }
            stopped.cancel()
            _ = await stopped.result
            let key = IdempotencyKey.make(.placeOrder, created.kpSessionId)
            #expect(try await h.store.intent(key)?.state == .sent)

            // Started again: the settle period counts from the latest the attempt could have ended, its sent mark
            // plus the longest call (the harness's 30 s request timeout + 1 s).
            try await h.run()
            let first = try #require(h.sandbox.requests(route: "kp.create_order").first)
            #expect(h.sandbox.createOrderCounts().map(\.received) == [1])
            #expect(h.sandbox.createOrderCounts().map(\.overlapping) == [0])
            Self.expectSettled(h, created, after: first)
            try await Self.expectOneOrderAccountedFor(h, created)
            let settling = try #require(try await h.store.timeline(for: created.hppSessionId).events.first { $0.kind == "settling" })
            #expect(settling.detail["settle_until"] == TrackedSession.format(first.at.addingTimeInterval(31 + Self.settle.timeInterval)))
            #expect(settling.message.contains("was sent at \(TrackedSession.format(first.at))"), "\(settling.message)")
        }
    }

    // MARK: Finding the order Klarna placed (issue 22, part 6)

    /// A create-order whose answer is held past the client's timeout (Klarna placed the order at once) has run its
    /// course up to the settle period: the order exists at Klarna, the daemon does not know its id, and nothing was
    /// read since. Returns the order's id.
    static func placedButUnheard(_ h: EngineHarness, _ created: CreatedSession) async throws -> String {
        h.sandbox.addFault(SandboxFault(route: "kp.create_order", kind: .holdAnswer, holdSeconds: 25, count: 1))
        try await h.run(for: .seconds(50))
        let placed = try #require(h.effects(.orderPlaced, kp: created.kpSessionId).first)
        let intent = try #require(try await h.store.intent(IdempotencyKey.make(.placeOrder, created.kpSessionId)))
        #expect(intent.state == .ambiguous && intent.settleUntil != nil, "still settling: \(intent.state)")
        return try #require(placed.orderId)
    }

    /// The order is linked, with an event saying where it was found, and then captured under the capture policy;
    /// Klarna saw one create-order.
    static func expectLinked(
        _ h: EngineHarness, _ created: CreatedSession, _ orderID: String, foundIn word: String, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let session = try await h.session(created)
        #expect(session.orderID == orderID, sourceLocation: sourceLocation)
        #expect(try await h.outcomes(created) == [.orderPlaced, .captured], sourceLocation: sourceLocation)
        #expect(h.effects(.captured, order: orderID).count == 1, sourceLocation: sourceLocation)
        #expect(h.sandbox.createOrderCounts().map(\.received) == [1], sourceLocation: sourceLocation)
        let timeline = try await h.store.timeline(for: created.hppSessionId)
        let linked = try #require(timeline.events.first { $0.kind == "order_linked" }, sourceLocation: sourceLocation)
        #expect(linked.detail["found_in"] == word, sourceLocation: sourceLocation)
        #expect(
            linked.message.hasPrefix("order \(orderID) linked to this payment: Klarna placed it after an unclear create-order, named by"),
            "\(linked.message)", sourceLocation: sourceLocation)
        #expect(
            timeline.intents.first { $0.kind == .placeOrder }.map { $0.state == .confirmed && $0.result == orderID } == true,
            sourceLocation: sourceLocation)
        #expect(h.logs.all.contains { $0.contains("linked to this payment") && $0.contains("found_in=\(word)") }, sourceLocation: sourceLocation)
        h.expectNoDoubleEffects(sourceLocation: sourceLocation)
    }

    @Test(
        "Klarna placed the order but its answer was lost: an OM notification for an order the daemon did not know names it by merchant reference, and it is linked and captured"
    )
    func linkedByNotification() async throws {
        try await Self.with(requestTimeout: .seconds(2)) { h in
            let created = try await h.track(SessionSpec(orderAmount: 5_600, merchantReference: "linked-om-1", schedule: Self.completesSoon))
            let orderID = try await Self.placedButUnheard(h, created)
            // Klarna's pending-order notification for it, and one for another merchant's order (which OM does not know).
            for notified in [orderID, "not-an-order-of-this-account"] {
                let record = IngestRecord(
                    dedupeKey: "\(RetentionPolicy.omNotificationKeyPrefix)\(notified):FRAUD_RISK_ACCEPTED", kind: RetentionPolicy.omNotificationKind,
                    source: "socket", summary: "OM notification FRAUD_RISK_ACCEPTED for order \(notified)", action: .hintOrder(orderID: notified))
                #expect(try await h.store.ingest(record, at: h.clock.now) == .accepted(wake: []))
            }
            try await h.run()
            try await Self.expectLinked(h, created, orderID, foundIn: "om_notification")
        }
    }

    @Test(
        "Klarna placed the order but its answer was lost: a recorded settlement SALE with the payment's merchant reference names it, and it is linked and captured"
    )
    func linkedBySettlementSale() async throws {
        try await Self.with(requestTimeout: .seconds(2)) { h in
            let created = try await h.track(SessionSpec(orderAmount: 5_700, merchantReference: "linked-sale-1", schedule: Self.completesSoon))
            let orderID = try await Self.placedButUnheard(h, created)
            // A payout whose SALE line carries the order, next to another shop reference's line. (Recorded as the
            // settlement sync would; the sandbox's order has nothing captured, so the daemon captures all of it.)
            let lines = [
                SettledLine(
                    paymentReference: "PAY-9", ordinal: 1, kind: .sale, amount: 100, orderID: orderID, currency: "SEK",
                    merchantReference: "linked-sale-1"),
                SettledLine(
                    paymentReference: "PAY-9", ordinal: 2, kind: .sale, amount: 900, orderID: "o-elsewhere", currency: "SEK",
                    merchantReference: "linked-sale-2"),
            ]
            let totals = SettledTotals(saleAmount: 1_000, settlementAmount: 1_000)
            let payout = PayoutReconciliation(
                payout: SettledPayout(paymentReference: "PAY-9", payoutDate: h.clock.now, currency: "SEK", settlementType: "NET", totals: totals),
                lines: lines.map { LineReconciliation(line: $0, signedAmount: $0.amount, match: .unmatched(.orderUnknown), note: "orphan") },
                findings: [], fromLines: PayoutFigures(lines: lines, totals: totals), totals: PayoutFigures(totals: totals))
            #expect(try await h.store.record(payout, outcomes: [], at: h.clock.now))
            try await h.run()
            try await Self.expectLinked(h, created, orderID, foundIn: "settlement_sale")
        }
    }

    @Test("Klarna placed the order and nothing names it: needs_attention saying what was searched and how to repair it")
    func nothingNamesIt() async throws {
        try await Self.with(requestTimeout: .seconds(2)) { h in
            let created = try await h.track(SessionSpec(orderAmount: 5_800, merchantReference: "unnamed-1", schedule: Self.completesSoon))
            _ = try await Self.placedButUnheard(h, created)
            try await h.run()
            #expect(try await h.outcomes(created) == [.needsAttention])
            let reason = try #require(try await h.store.timeline(for: created.hppSessionId).outcomes.first?.outcome.reason)
            #expect(reason.contains("Klarna placed the order but its order_id is unknown"), "\(reason)")
            #expect(
                reason.contains("nothing names it: the HPP session gives no order_id, and no OM notification for an unknown order since"), "\(reason)"
            )
            #expect(reason.hasSuffix("then `klarna-reconciler retry \(created.hppSessionId) --order-id ORDER_ID`"), "\(reason)")
            #expect(h.sandbox.createOrderCounts().map(\.received) == [1])
        }
    }

    // MARK: Configuration

    /// Loads a config with `extra` appended (and a password file), as the daemon would.
    func load(_ extra: String) async throws(SettingsError) -> Settings {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        try! "pw".write(toFile: directory.path + "/pw", atomically: true, encoding: .utf8)
        let yaml =
            "klarna:\n  base_url: https://api.playground.klarna.com\n  username: K123_abc\n  password_file: pw\n  request_timeout_seconds: 30\n"
            + extra
        try! yaml.write(toFile: directory.path + "/config.yaml", atomically: true, encoding: .utf8)
        return try await Settings.load(configPath: directory.path + "/config.yaml", environment: [:], credstore: directory.path + "/credstore")
    }

    /// The one-line error a config with `extra` is refused with; `nil` when it loads.
    func error(_ extra: String) async -> String? {
        do {
            _ = try await load(extra)
            return nil
        } catch {
            return error.description
        }
    }

    @Test("engine.create_order_settle_seconds: 120 by default, 30 to 900, shown by check-config; the testing key replaces it with any period")
    func configuration() async throws {
        let defaults = try await load("")
        #expect(defaults.engine.createOrderSettle == .seconds(120))
        #expect(defaults.effectiveDescription.contains("engine.create_order_settle_seconds: 120\n"))
        #expect(defaults.effectiveDescription.contains("testing.create_order_settle_ms: (none)"))
        #expect(try await load("engine:\n  create_order_settle_seconds: 900").engine.createOrderSettle == .seconds(900))
        let low = await error("engine:\n  create_order_settle_seconds: 29")
        #expect(low == "engine.create_order_settle_seconds: must be between 30 and 900, not 29")
        let high = await error("engine:\n  create_order_settle_seconds: 901")
        #expect(high == "engine.create_order_settle_seconds: must be between 30 and 900, not 901")
        let word = await error("engine:\n  create_order_settle_seconds: soon")
        #expect(word?.hasPrefix("engine.create_order_settle_seconds: must be a whole number") == true, "\(word ?? "loaded")")

        let testing = try await load("testing:\n  create_order_settle_ms: 1500")
        #expect(testing.engine.createOrderSettle == .milliseconds(1_500))
        #expect(testing.effectiveDescription.contains("testing.create_order_settle_ms: 1500 (replaces engine.create_order_settle_seconds)"))
    }

    @Test("The request timeout and the settle period together stay within half the authorization token's 60 minutes")
    func balancedWithTheToken() async throws {
        // With the 30 s request timeout; the testing key reaches past the operators' 900 s to the sum's limit.
        #expect(await error("testing:\n  create_order_settle_ms: 1770000") == nil)
        let refused = await error("testing:\n  create_order_settle_ms: 1771000")
        #expect(
            refused
                == "engine.create_order_settle_seconds: plus klarna.request_timeout_seconds must be at most 1800 (half the authorization token's 60 minutes, so that a create-order after an unclear one still goes out in time), not 1771 + 30"
        )
    }
}

/// Sends the first `refusing` create-orders to `closedPort`, where nothing listens: libcurl's connect is refused before
/// a byte of the request leaves. Everything else goes through unchanged.
final class RefusingTransport: HTTPTransport {
    private let base: CurlTransport
    private let remaining: Mutex<Int>
    private let closedPort: Int

    init(_ base: CurlTransport, refusing: Int, closedPort: Int) {
        self.base = base
        remaining = Mutex(refusing)
        self.closedPort = closedPort
    }

    func execute(_ request: HTTPRequest) async throws -> HTTPResponse {
        var request = request
        let isCreateOrder = request.method == "POST" && request.url.hasSuffix("/order")
        if isCreateOrder,
            remaining.withLock({ left in
                defer { left = max(0, left - 1) }
                return left > 0
            }), let path = URL(string: request.url)?.path
        {
            request.url = "http://127.0.0.1:\(closedPort)\(path)"
        }
        return try await base.execute(request)
    }
}
