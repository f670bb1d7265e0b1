import Engine
import Foundation
import HTTPServer
import Ingest
import ReconcilerCore
import ReconcilerStore
import SQLiteBackend
import Testing

/// The operators' socket's settlement routes (`GET /v2/settlements`, `GET /v2/payments/{id}/settlements`), called on
/// the handler the daemon serves, over a SQLite store holding one recorded payout.
@Suite("Operators' socket: settlement routes")
struct ControlSettlementRoutesTests {
    /// 2026-11-02T07:00:00Z.
    let payoutDate = Date(timeIntervalSince1970: 1_793_602_800)

    /// A store with order-1 (shop-2001) and PAYOUT01: order-1's SALE and FEE, and a SALE for an order nobody knows.
    func recordedStore(_ directory: TemporaryDirectory) async throws -> any ReconcilerStore {
        let store: any ReconcilerStore = try SQLiteStore(path: directory.path + "/state.sqlite")
        var change = Change()
        change.newOrders = [
            TrackedOrder(
                orderID: "order-1", hppSessionID: nil, kpSessionID: nil, merchantReference: "shop-2001", capturePolicy: .immediate,
                placedBy: .placeOrder, createdAt: payoutDate)
        ]
        try await store.commit(change, at: payoutDate)
        let lines = [
            SettledLine(
                paymentReference: "PAYOUT01", ordinal: 0, kind: .sale, amount: 19_900, orderID: "order-1", captureID: "cap-1", currency: "EUR"),
            SettledLine(
                paymentReference: "PAYOUT01", ordinal: 1, kind: .fee, amount: 498, vatAmount: 125, orderID: "order-1", captureID: "cap-1",
                currency: "EUR"),
            SettledLine(
                paymentReference: "PAYOUT01", ordinal: 2, kind: .sale, amount: 4_200, orderID: "order-ghost", captureID: "cap-x", currency: "EUR"),
        ]
        let payout = SettledPayout(
            paymentReference: "PAYOUT01", payoutDate: payoutDate, currency: "EUR", settlementType: "NET",
            totals: SettledTotals(saleAmount: 24_100, feeAmount: 498, taxAmount: 125, settlementAmount: 23_477))
        let ledger = LedgerOrder(
            orderID: "order-1", merchantReference: "shop-2001", currency: "EUR",
            captures: [
                LedgerCapture(orderID: "order-1", captureID: "cap-1", amount: 19_900, currency: "EUR", capturedAt: payoutDate, source: .daemon)
            ])
        let reconciliation = SettlementMatcher.reconcile(payout: payout, lines: lines, orders: ["order-1": ledger])
        #expect(try await store.record(reconciliation, outcomes: [], at: payoutDate))
        return store
    }

    func makeHandler(_ store: any ReconcilerStore) -> @Sendable (ServerRequest) async -> ServerReply {
        let control = ControlEndpoints(
            health: { HealthReport(heartbeats: [], stallAfter: .seconds(30), phase: .ready, uptime: .zero, open: 0, running: 0, backlog: 0) },
            readiness: Readiness(storeStaleAfter: .seconds(5)))
        return ControlHTTP.handler(desk: OperatorDesk(store: store), control: control, reports: store)
    }

    func get(_ handler: @Sendable (ServerRequest) async -> ServerReply, _ target: String) async throws -> (status: Int, body: Data) {
        guard case .response(let response) = await handler(ServerRequest(method: "GET", uri: target)) else {
            Issue.record("\(target): the connection was reset")
            return (0, Data())
        }
        return (response.status, Data(response.body))
    }

    @Test("GET /v2/settlements: the payout reports, filtered by since and payout; a bad since is 400")
    func payouts() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let handler = makeHandler(try await recordedStore(directory))
        let all = try await get(handler, "/v2/settlements")
        #expect(all.status == 200, "\(String(decoding: all.body, as: UTF8.self))")
        let reports = try OperatorJSON.decoder().decode([PayoutReport].self, from: all.body)
        #expect(reports.map(\.paymentReference) == ["PAYOUT01"])
        #expect(reports.first?.unmatched.map(\.reason) == [.orderUnknown])
        #expect(reports.first?.findings.map(\.kind) == [.orphan])

        for (query, expected) in [("since=2026-11-02", 1), ("since=2026-11-02T07%3A00%3A01Z", 0), ("payout=PAYOUT01", 1), ("payout=NOPE", 0)] {
            let answer = try await get(handler, "/v2/settlements?\(query)")
            #expect(answer.status == 200)
            #expect(try OperatorJSON.decoder().decode([PayoutReport].self, from: answer.body).count == expected, "\(query)")
        }
        let bad = try await get(handler, "/v2/settlements?since=yesterday")
        #expect(
            bad.status == 400 && String(decoding: bad.body, as: UTF8.self).contains("since must be a day"),
            "\(String(decoding: bad.body, as: UTF8.self))")
    }

    @Test("GET /v2/settlements?since= with a field out of range is 400, never rolled over into the next hour, day or month")
    func sinceFieldOutOfRange() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let handler = makeHandler(try await recordedStore(directory))
        // Each would otherwise roll over to a moment before PAYOUT01 (2026-11-02T07:00:00Z) and list it.
        for bad in ["2026-11-01T25:00:00Z", "2026-11-01T08:61:00Z", "2026-11-01T08:00:60Z", "2026-10-32", "2026-11-01T08:00:00-15:00"] {
            let answer = try await get(handler, "/v2/settlements?since=\(bad.replacingOccurrences(of: ":", with: "%3A"))")
            let body = String(decoding: answer.body, as: UTF8.self)
            #expect(answer.status == 400, "\(bad): \(body)")
            #expect(body.contains(#""error":"malformed""#) && body.contains("since must be a day") && body.contains("not \(bad)"), "\(bad): \(body)")
        }
        let lastSecond = try await get(handler, "/v2/settlements?since=2026-11-01T23%3A59%3A59Z")
        #expect(lastSecond.status == 200)
        #expect(try OperatorJSON.decoder().decode([PayoutReport].self, from: lastSecond.body).map(\.paymentReference) == ["PAYOUT01"])
    }

    @Test("GET /v2/payments/{id}/settlements: the lines of the payment's orders; 404 for an unknown payment")
    func paymentLines() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try await recordedStore(directory)
        let handler = makeHandler(store)
        let answer = try await get(handler, "/v2/payments/shop-2001/settlements")
        #expect(answer.status == 200, "\(String(decoding: answer.body, as: UTF8.self))")
        let lines = try OperatorJSON.decoder().decode([LineReconciliation].self, from: answer.body)
        #expect(lines.map(\.line.ordinal) == [0, 1])
        #expect(
            lines.map(\.match) == [
                .capture(CaptureKey(orderID: "order-1", captureID: "cap-1"), byAmount: false),
                .order("order-1", capture: CaptureKey(orderID: "order-1", captureID: "cap-1")),
            ])
        let unknown = try await get(handler, "/v2/payments/nobody/settlements")
        #expect(unknown.status == 404 && String(decoding: unknown.body, as: UTF8.self).contains("unknown_payment"))
    }
}
