import Engine
import Foundation
import HTTPServer
import KlarnaAPI
import KlarnaSandbox
import Logging
import ReconcilerCore
import Testing
import TestSupport

/// Klarna's Settlements API as the sandbox serves it, read by the real client over real sockets, and each payout
/// matched against a ledger of what the shop did: every match and mismatch class, pagination, and an outage.
@Suite("Settlements against the sandbox")
struct SettlementTests {
    @Test("A payout pays what was captured: a SALE and its fee per capture, totals that add up by Klarna's formula, every line matched")
    func payoutMatchesTheLedger() async throws {
        try await Settling.with { s in
            let orders = [try await s.capturedOrder(20_000), try await s.capturedOrder(12_000), try await s.capturedOrder(8_000)]
            s.clock.advance(by: .seconds(86_400))
            let made = try s.sandbox.settle()
            #expect(made.count == 1)

            let payouts = try await s.client.allPayouts()
            let payout = try #require(payouts.first)
            #expect(payouts.count == 1)
            #expect(try await s.client.payout(reference: payout.paymentReference) == payout)
            #expect(payout.currencyCode == "SEK")
            #expect(payout.merchantSettlementType == .net)
            // 2.5 % fees (1,000) with 25 % VAT on them (250): 40,000 − 1,000 − 250.
            #expect(payout.totals.saleAmount == 40_000)
            #expect(payout.totals.feeAmount == 1_000)
            #expect(payout.totals.taxAmount == 250)
            #expect(payout.totals.settlementAmount == 38_750)

            let transactions = try await s.client.allTransactions(paymentReference: payout.paymentReference)
            #expect(transactions.map(\.type) == [.sale, .fee, .sale, .fee, .sale, .fee])
            #expect(transactions.filter { $0.type == .return }.isEmpty)
            let reconciliation = s.reconcile(payout, transactions, ledger: orders)
            #expect(reconciliation.findings.isEmpty, "\(reconciliation.findings.map(\.reason))")
            #expect(reconciliation.matchedCount == 6)
            #expect(reconciliation.unmatchedCount == 0)
            #expect(Set(reconciliation.settledCaptures.keys) == Set(orders.flatMap { $0.captures.map(\.key) }))
            #expect(reconciliation.report.net == 38_750)
            #expect(reconciliation.report.fees == 1_250)
        }
    }

    @Test("Pagination: 14 transactions read 3 at a time come whole and in order, in 5 pages; 5 payouts 2 at a time in 3")
    func pagination() async throws {
        try await Settling.with { s in
            for amount in stride(from: 10_000, through: 16_000, by: 1_000) { _ = try await s.capturedOrder(amount) }
            let payout = try #require(try s.sandbox.settle().first)
            let before = s.sandbox.requests(route: "settlements.list_transactions").count
            let paged = try await s.client.allTransactions(paymentReference: payout.paymentReference, pageSize: 3)
            #expect(s.sandbox.requests(route: "settlements.list_transactions").count - before == 5)
            let whole = try await s.client.allTransactions(paymentReference: payout.paymentReference)
            #expect(paged.count == 14)
            #expect(paged == whole)
            #expect(paged.filter { $0.type == .sale }.map(\.amount) == Array(stride(from: 10_000, through: 16_000, by: 1_000)))

            for amount in [1_000, 2_000, 3_000, 4_000] {
                _ = try await s.capturedOrder(amount)
                s.clock.advance(by: .seconds(3_600))
                _ = try s.sandbox.settle()
            }
            let payoutsBefore = s.sandbox.requests(route: "settlements.list_payouts").count
            let payouts = try await s.client.allPayouts(pageSize: 2)
            #expect(s.sandbox.requests(route: "settlements.list_payouts").count - payoutsBefore == 3)
            #expect(payouts.count == 5)
            #expect(payouts.map(\.payoutDate) == payouts.map(\.payoutDate).sorted())
            #expect(Set(payouts.map(\.paymentReference)).count == 5)
            let first = try await s.client.payouts(size: 2)
            #expect(first.pagination.total == 5)
            #expect(first.pagination.next != nil)
        }
    }

    @Test(
        "Every mismatch class: an amount that differs, an orphan, captures and refunds made outside the daemon, a reversal, a holdback and its release, totals off by one, a capture never settled"
    )
    func everyMismatchClass() async throws {
        try await Settling.with { s in
            let fine = try await s.capturedOrder(20_000)
            let altered = try await s.capturedOrder(12_000)
            let neverPaid = try await s.capturedOrder(9_000)
            var refunded = try await s.capturedOrder(8_000)
            let portalCaptured = try await s.capturedOrder(10_000, capture: false)
            let portalRefunded = try await s.capturedOrder(6_000)

            try s.sandbox.alterSettledAmount(captureID: try #require(altered.captures.first?.captureID), by: 100)
            try s.sandbox.omitFromSettlement(captureID: try #require(neverPaid.captures.first?.captureID))
            let orphan = try s.sandbox.inventTransaction(amount: 4_200, currency: "SEK")
            let portalCaptureID = try s.sandbox.portalCapture(order: portalCaptured.orderID, amount: 10_000)
            // A refund the daemon saw on an order read is in its ledger (observed); the other one it never saw.
            let seenRefund = try s.sandbox.portalRefund(order: refunded.orderID, amount: 3_000)
            refunded.refunds.append(LedgerRefund(orderID: refunded.orderID, refundID: seenRefund, amount: 3_000, at: s.clock.now, source: .observed))
            let unseenRefund = try s.sandbox.portalRefund(order: portalRefunded.orderID, amount: 1_500)
            s.clock.advance(by: .seconds(3_600))
            let ledger = [fine, altered, neverPaid, refunded, portalCaptured, portalRefunded]

            _ = try s.sandbox.settle(PayoutSpec(holdback: 5_000, reversals: [fine.orderID: 2_000]))
            let first = try #require(try await s.client.allPayouts().first)
            let one = s.reconcile(first, try await s.client.allTransactions(paymentReference: first.paymentReference), ledger: ledger)

            let mismatch = try #require(one.findings(.amountMismatch).first)
            #expect(one.findings(.amountMismatch).count == 1)
            #expect(mismatch.orderID == altered.orderID)
            #expect(mismatch.expected == 12_000)
            #expect(mismatch.actual == 12_100)
            #expect(mismatch.delta == 100)

            #expect(one.findings(.orphan).map(\.orderID) == [orphan])
            #expect(one.findings(.orphan).first?.actual == 4_200 - 105 - 26, "the orphan's SALE less its fee and the VAT on the fee")

            #expect(one.findings(.unknownCapture).map(\.captureID) == [portalCaptureID])
            #expect(one.findings(.unknownCapture).map(\.orderID) == [portalCaptured.orderID])
            #expect(one.findings(.unknownRefund).map(\.refundID) == [unseenRefund])
            let returnMatch = one.lines.first { $0.line.refundIDGiven == seenRefund }
            #expect(returnMatch?.match == .refund(RefundKey(orderID: refunded.orderID, refundID: seenRefund), byAmount: false))
            #expect(returnMatch?.source == .observed)

            let reversal = try #require(one.findings(.reversal).first)
            #expect(reversal.orderID == fine.orderID)
            #expect(reversal.actual == 2_000)
            #expect(reversal.reversalReference?.hasPrefix("krn:klarna:eu1:dispute:") == true)

            let holdback = try #require(one.lines.first { $0.line.kind == .holdback })
            #expect(holdback.match == .payoutLevel)
            #expect(holdback.signedAmount == -5_000)
            #expect(one.findings(.totalsMismatch).isEmpty, "\(one.findings(.totalsMismatch).map(\.reason))")
            #expect(one.findings(.duplicateSettlement).isEmpty)

            // The next payout releases the holdback, and its totals are off by one minor unit.
            _ = try await s.capturedOrder(5_000)
            try s.sandbox.breakTotals(by: 1)
            s.clock.advance(by: .seconds(86_400))
            _ = try s.sandbox.settle(PayoutSpec(releaseHoldbacks: true))
            let second = try #require(try await s.client.allPayouts().last)
            #expect(second.paymentReference != first.paymentReference)
            let two = s.reconcile(second, try await s.client.allTransactions(paymentReference: second.paymentReference), ledger: ledger)
            #expect(two.lines.first { $0.line.kind == .release }?.signedAmount == 5_000)
            let off = try #require(two.findings(.totalsMismatch).first { $0.figure == .settlement })
            #expect(off.delta == 1 || off.delta == -1, "\(off.reason)")

            // The omitted capture is overdue once settle_within_days has passed since it was captured, and only it.
            let settled = Set(one.settledCaptures.keys).union(two.settledCaptures.keys)
            let captures = ledger.flatMap(\.captures)
            let early = UnsettledCaptures.check(captures, now: s.clock.now, settleWithinDays: 7, settled: settled, flagged: [])
            #expect(early.overdue.isEmpty)
            s.clock.advance(by: .seconds(7 * 86_400))
            let late = UnsettledCaptures.check(captures, now: s.clock.now, settleWithinDays: 7, settled: settled, flagged: [])
            #expect(late.overdue.map(\.key) == neverPaid.captures.map(\.key))
        }
    }

    @Test(
        "A walk asks its caller before every page (each page is a call of the rate budget); what the caller throws ends the walk before the request goes out"
    )
    func pacedWalk() async throws {
        try await Settling.with { s in
            for amount in [10_000, 11_000, 12_000] { _ = try await s.capturedOrder(amount) }
            let payout = try #require(try s.sandbox.settle().first)
            let asked = Counter()
            let pages = s.sandbox.requests(route: "settlements.list_transactions").count
            let transactions = try await s.client.allTransactions(
                paymentReference: payout.paymentReference, pageSize: 2, beforeEachPage: { asked.add() })
            #expect(transactions.count == 6)
            #expect(asked.value == 3)
            #expect(s.sandbox.requests(route: "settlements.list_transactions").count - pages == 3)

            let listed = s.sandbox.requests(route: "settlements.list_payouts").count
            await #expect(throws: NoBudget.self) { _ = try await s.client.allPayouts(beforeEachPage: { throw NoBudget() }) }
            #expect(s.sandbox.requests(route: "settlements.list_payouts").count == listed)
        }
    }

    struct NoBudget: Error {}

    @Test(
        "A Settlements API outage: 503 and 429 fail the read with a retryable error (the 429 with Klarna's reset), a reset fails the whole walk instead of a short list; afterwards the same reads return everything"
    )
    func outage() async throws {
        try await Settling.with { s in
            for amount in [10_000, 11_000, 12_000] { _ = try await s.capturedOrder(amount) }
            let payout = try #require(try s.sandbox.settle().first)

            s.sandbox.addFault(SandboxFault(route: "settlements.*", kind: .status, status: 503, count: 1))
            let unavailable = try await #require(throws: KlarnaAPIError.self) { try await s.client.allPayouts() }
            #expect(unavailable.status == 503)
            #expect(unavailable.retryDisposition == .retry(notBefore: nil))

            s.sandbox.addFault(SandboxFault(route: "settlements.list_transactions", kind: .rateLimit, resetSeconds: 2, count: 1))
            let limited = try await #require(throws: KlarnaAPIError.self) {
                try await s.client.allTransactions(paymentReference: payout.paymentReference)
            }
            #expect(limited.status == 429)
            #expect(limited.rateLimit.reset == .seconds(2))
            #expect(limited.retryDisposition == .retry(notBefore: .seconds(2)))

            // Every page after the first is reset (a single reset is hidden: libcurl sends a read again by itself, on a
            // fresh connection, when its connection died before any answer).
            let before = s.sandbox.requests(route: "settlements.list_transactions").count
            s.sandbox.addFault(SandboxFault(route: "settlements.list_transactions", kind: .reset, count: nil, skip: 1))
            let reset = try await #require(throws: KlarnaAPIError.self) {
                try await s.client.allTransactions(paymentReference: payout.paymentReference, pageSize: 2)
            }
            #expect(reset.status == nil)
            let walk = s.sandbox.requests(route: "settlements.list_transactions").dropFirst(before)
            #expect(walk.first?.status == 200)
            #expect(walk.dropFirst().allSatisfy { $0.fault == "reset" })
            s.sandbox.clearFaults()
            if case .retry = reset.retryDisposition {} else { Issue.record("a reset read is retryable: \(reset)") }

            #expect(try await s.client.allPayouts().map(\.paymentReference) == [payout.paymentReference])
            #expect(try await s.client.allTransactions(paymentReference: payout.paymentReference, pageSize: 2).count == 6)
        }
    }

    @Test(
        "A settlements read that answers garbage or nothing in time fails retryably; an id that carries a query or a path of its own stays one value")
    func garbageTimeoutAndHostileIDs() async throws {
        try await Settling.with { s in
            let order = try await s.capturedOrder(10_000)
            let payout = try #require(try s.sandbox.settle().first)

            s.sandbox.addFault(SandboxFault(route: "settlements.list_payouts", kind: .malformed, count: 1))
            let garbage = try await #require(throws: KlarnaAPIError.self) { try await s.client.allPayouts() }
            if case .undecodableResponse = garbage.failure {} else { Issue.record("not an unreadable answer: \(garbage)") }
            #expect(garbage.retryDisposition == .retry(notBefore: nil))

            s.sandbox.addFault(SandboxFault(route: "settlements.read_payout", kind: .delay, delayMs: 3_000, count: 1))
            // Only this read runs on a client that waits 1 s: the setup's reads may take longer on a loaded machine.
            let late = try await #require(throws: KlarnaAPIError.self) {
                try await s.withClient(requestTimeout: .seconds(1)) { try await $0.payout(reference: payout.paymentReference) }
            }
            #expect(late.status == nil)
            if case .retry = late.retryDisposition {} else { Issue.record("a timed-out read is retryable: \(late)") }

            // A reference smuggling a second filter in is one (unknown) reference: nothing comes back, not the order's lines.
            let smuggled = try await s.client.allTransactions(paymentReference: "\(payout.paymentReference)&order_id=\(order.orderID)")
            #expect(smuggled.isEmpty)
            let escaped = try await #require(throws: KlarnaAPIError.self) { try await s.client.payout(reference: "../transactions") }
            #expect(escaped.status == 404)
            #expect(try await s.client.allTransactions(paymentReference: payout.paymentReference).count == 2)

            // An empty reference would be ignored by the server and widen the answer to every transaction: refused
            // before any request.
            let listed = s.sandbox.requests(route: "settlements.list_transactions").count
            let empty = try await #require(throws: KlarnaAPIError.self) { try await s.client.allTransactions(paymentReference: "") }
            #expect(empty.description.contains("empty resource id or query value"))
            #expect(s.sandbox.requests(route: "settlements.list_transactions").count == listed)
        }
    }

    @Test("A schedule that holds back and releases pays out when something is due, not on every run")
    func scheduleWithHoldback() async throws {
        try await Settling.with { s in
            try s.sandbox.setSettlementSchedule(everySeconds: 60, spec: PayoutSpec(holdback: 500, releaseHoldbacks: true))
            _ = try await s.capturedOrder(10_000)
            s.clock.advance(by: .seconds(86_400))
            let payouts = try await s.client.allPayouts()
            #expect(payouts.count == 1)
            #expect(payouts.first?.totals.holdbackAmount == 500)
        }
    }

    @Test("The payout summary sums each currency's payouts between two dates")
    func summary() async throws {
        try await Settling.with { s in
            let start = s.clock.now
            _ = try await s.capturedOrder(20_000)
            _ = try await s.capturedOrder(10_000, currency: "EUR")
            s.clock.advance(by: .seconds(3_600))
            _ = try s.sandbox.settle()
            _ = try await s.capturedOrder(4_000)
            s.clock.advance(by: .seconds(3_600))
            _ = try s.sandbox.settle()
            let summaries = try await s.client.payoutSummary(from: start, to: s.clock.now)
            let sek = try #require(summaries.first { $0.settlementCurrency == "SEK" })
            #expect(summaries.count == 2)
            #expect(sek.totalSaleAmount == 24_000)
            #expect(sek.totalFeeAmount == 600)
            let payouts = try await s.client.allPayouts(currency: "SEK")
            #expect(payouts.count == 2)
            #expect(sek.totalSettlementAmount == payouts.map(\.totals.settlementAmount).reduce(0, +))
            await #expect(throws: KlarnaAPIError.self) { _ = try await s.client.payout(reference: "NOSUCHPY") }
        }
    }
}

/// A Settlements API that pages wrongly, on a real socket: each walk through it must fail, never return a short or
/// doubled list (settled money would look missing, or settled twice).
@Suite("Settlements: a server that pages wrongly")
struct SettlementPagingTests {
    static let row =
        #"{"type":"SALE","amount":100,"order_id":"o-1","capture_id":"c-1","sale_date":"2027-01-01T00:00:00Z","capture_date":"2027-01-01T00:00:00Z","currency_code":"SEK"}"#

    @Test("It ignores offset and echoes none: the same page again fails the walk")
    func ignoredOffset() async throws {
        try await Self.walk(answer: { _ in #"{"transactions":[\#(Self.row),\#(Self.row)],"pagination":{"count":2,"total":4}}"# }) { error in
            #expect(error.description.contains("repeats the one before it"), "\(error)")
        }
    }

    @Test("It sends an empty page before its total: the walk fails")
    func emptyBeforeTotal() async throws {
        try await Self.walk(answer: { offset in
            offset == 0
                ? #"{"transactions":[\#(Self.row),\#(Self.row)],"pagination":{"count":2,"total":4,"offset":0}}"#
                : #"{"transactions":[],"pagination":{"count":0,"total":4,"offset":\#(offset)}}"#
        }) { error in
            #expect(error.description.contains("an empty page at offset 2 of 4"), "\(error)")
        }
    }

    /// Serves `answer(offset)` for every transactions page and expects `allTransactions` to fail with a paging error.
    static func walk(answer: @escaping @Sendable (Int) -> String, _ check: (KlarnaAPIError) -> Void) async throws {
        let server = try await HTTPServer.bind(.tcp(host: "127.0.0.1", port: 0), logger: Logger(label: "test.pages")) { request in
            let offset = request.query["offset"].flatMap { Int($0) } ?? 0
            return .response(ServerResponse(status: 200, headers: [("Content-Type", "application/json")], body: Array(answer(offset).utf8)))
        }
        let serving = Task { try await server.run() }
        defer { serving.cancel() }
        let transport = CurlTransport(configuration: .init(connectTimeout: .seconds(2), requestTimeout: .seconds(10)))
        defer { transport.shutdown() }
        let client = KlarnaClient(
            configuration: KlarnaConfiguration(
                baseURL: "http://127.0.0.1:\(server.port!)", credentials: BasicCredentials(username: "m", password: "s")),
            transport: transport, logger: Logger(label: "test.client"))
        let error = try await #require(throws: KlarnaAPIError.self) { try await client.allTransactions(pageSize: 2) }
        check(error)
    }
}

/// A sandbox on a real loopback socket, a real libcurl client, and a manual clock both share.
private struct Settling {
    let sandbox: KlarnaSandbox
    let client: KlarnaClient
    let clock: ManualClock
    let baseURL: String

    static func with<T: Sendable>(_ body: (Settling) async throws -> T) async throws -> T {
        let clock = ManualClock(now: Date(timeIntervalSince1970: 1_800_000_000))
        let sandbox = KlarnaSandbox(configuration: .init(username: "merchant", password: "secret", clock: clock, random: SeededRandomSource(seed: 7)))
        let server = try await HTTPServer.bind(.tcp(host: "127.0.0.1", port: 0), logger: Logger(label: "test.sandbox")) { await sandbox.handle($0) }
        let serving = Task { try await server.run() }
        defer { serving.cancel() }
        let baseURL = "http://127.0.0.1:\(server.port!)"
        return try await Self.client(baseURL: baseURL, requestTimeout: .seconds(10)) { client in
            try await body(Settling(sandbox: sandbox, client: client, clock: clock, baseURL: baseURL))
        }
    }

    /// A client of the sandbox of its own, whose requests give up after `requestTimeout`.
    func withClient<T: Sendable>(requestTimeout: Duration, _ body: (KlarnaClient) async throws -> T) async throws -> T {
        try await Self.client(baseURL: baseURL, requestTimeout: requestTimeout, body)
    }

    private static func client<T: Sendable>(
        baseURL: String, requestTimeout: Duration, _ body: (KlarnaClient) async throws -> T
    ) async throws -> T {
        let transport = CurlTransport(configuration: .init(connectTimeout: .seconds(2), requestTimeout: requestTimeout))
        defer { transport.shutdown() }
        let client = KlarnaClient(
            configuration: KlarnaConfiguration(baseURL: baseURL, credentials: BasicCredentials(username: "merchant", password: "secret")),
            transport: transport, logger: Logger(label: "test.client"))
        return try await body(client)
    }

    /// An order placed through HPP and, unless `capture` is false, captured in full through the client, as the
    /// daemon does: what its ledger then knows of the order.
    func capturedOrder(_ amount: Int, currency: String = "SEK", capture: Bool = true) async throws -> LedgerOrder {
        let created = try sandbox.createSession(SessionSpec(orderAmount: amount, purchaseCurrency: currency, placeOrderMode: "PLACE_ORDER"))
        try sandbox.setHPPStatus(created.hppSessionId, "COMPLETED")
        let orderID = try #require(try await client.readHPPSession(id: created.hppSessionId).orderID)
        var order = LedgerOrder(orderID: orderID, currency: currency)
        if capture {
            let captured = try await client.createCapture(
                orderID: orderID, request: CaptureRequest(capturedAmount: amount), idempotencyKey: UUID().uuidString)
            order.captures.append(
                LedgerCapture(
                    orderID: orderID, captureID: captured.captureID, amount: amount, currency: currency, capturedAt: clock.now, source: .daemon))
        }
        clock.advance(by: .seconds(1))
        return order
    }

    func reconcile(_ payout: Payout, _ transactions: [SettlementTransaction], ledger: [LedgerOrder]) -> PayoutReconciliation {
        let orders = Dictionary(uniqueKeysWithValues: ledger.map { ($0.orderID, $0) })
        return SettlementMatcher.reconcile(
            payout: SettledPayout(payout), lines: SettledLine.lines(of: transactions, paymentReference: payout.paymentReference),
            orders: orders)
    }
}
