import Foundation
import ReconcilerCore
import ReconcilerStore
import SQLiteBackend
import Testing

/// `klarna-reconciler settlements` and `show` against a real SQLite store file, filled through the public store API
/// with payouts matched by ``SettlementMatcher`` from hand-made lines. No daemon runs: the commands read the store.
@Suite("settlements and show read recorded payouts", .serialized)
struct SettlementsCommandTests {
    /// 2026-11-02T07:00:00Z and a week later.
    let first = Date(timeIntervalSince1970: 1_793_602_800)
    let second = Date(timeIntervalSince1970: 1_794_207_600)

    /// The shop's ledger: order-1 was captured (cap-1) and partly refunded (ref-1) by the daemon; order-2 is known
    /// with no capture. order-ghost is in no ledger at all.
    var ledger: [String: LedgerOrder] {
        [
            "order-1": LedgerOrder(
                orderID: "order-1", merchantReference: "shop-2001", currency: "EUR",
                captures: [
                    LedgerCapture(orderID: "order-1", captureID: "cap-1", amount: 19_900, currency: "EUR", capturedAt: first, source: .daemon)
                ],
                refunds: [LedgerRefund(orderID: "order-1", refundID: "ref-1", amount: 5_000, at: first, source: .daemon)]),
            "order-2": LedgerOrder(orderID: "order-2", merchantReference: "shop-2002", currency: "EUR"),
        ]
    }

    /// PAYOUT01: order-1's SALE and FEE (with VAT), and a SALE with its FEE for order-ghost (an orphan).
    var payoutOne: PayoutReconciliation {
        let reference = "PAYOUT01"
        let lines = [
            SettledLine(
                paymentReference: reference, ordinal: 0, kind: .sale, detailedType: "PURCHASE", amount: 19_900, orderID: "order-1",
                captureID: "cap-1", currency: "EUR"),
            SettledLine(
                paymentReference: reference, ordinal: 1, kind: .fee, detailedType: "PURCHASE_FEE_PERCENTAGE", amount: 498, vatAmount: 125,
                orderID: "order-1", captureID: "cap-1", currency: "EUR"),
            SettledLine(
                paymentReference: reference, ordinal: 2, kind: .sale, detailedType: "PURCHASE", amount: 4_200, orderID: "order-ghost",
                captureID: "cap-x", currency: "EUR"),
            SettledLine(
                paymentReference: reference, ordinal: 3, kind: .fee, detailedType: "PURCHASE_FEE_PERCENTAGE", amount: 105, vatAmount: 26,
                orderID: "order-ghost", captureID: "cap-x", currency: "EUR"),
        ]
        let totals = SettledTotals(saleAmount: 24_100, feeAmount: 603, taxAmount: 151, settlementAmount: 23_346)
        let payout = SettledPayout(paymentReference: reference, payoutDate: first, currency: "EUR", settlementType: "NET", totals: totals)
        return SettlementMatcher.reconcile(payout: payout, lines: lines, orders: ledger)
    }

    /// PAYOUT02, a week later: a holdback, order-1's refund, and a SALE of order-2 for a capture the ledger does not
    /// know (drift). Its settlement type, open in Klarna's API, carries a comma and quotes to test CSV quoting.
    var payoutTwo: PayoutReconciliation {
        let reference = "PAYOUT02"
        let lines = [
            SettledLine(paymentReference: reference, ordinal: 0, kind: .holdback, detailedType: "ROLLING_RESERVE", amount: 1_000, currency: "EUR"),
            SettledLine(
                paymentReference: reference, ordinal: 1, kind: .return, detailedType: "PURCHASE_RETURN", amount: 5_000, orderID: "order-1",
                captureID: "", refundID: "ref-1", currency: "EUR"),
            SettledLine(
                paymentReference: reference, ordinal: 2, kind: .sale, detailedType: "PURCHASE", amount: 3_000, orderID: "order-2", captureID: "cap-9",
                currency: "EUR"),
        ]
        let totals = SettledTotals(saleAmount: 3_000, returnAmount: 5_000, holdbackAmount: 1_000, settlementAmount: -3_000)
        let payout = SettledPayout(
            paymentReference: reference, payoutDate: second, currency: "EUR", settlementType: #"GROSS_FEE, "invoiced""#, totals: totals)
        return SettlementMatcher.reconcile(payout: payout, lines: lines, orders: ledger)
    }

    /// A daemon fixture's folder (never started) whose store holds order-1, order-2 and order-3 (shop-2001…2003)
    /// and, unless `payouts` is false, both payouts.
    func recorded(payouts: Bool = true) async throws -> DaemonFixture {
        let fixture = try await DaemonFixture()
        try FileManager.default.createDirectory(atPath: fixture.directory + "/state", withIntermediateDirectories: true)
        let store = try SQLiteStore(path: fixture.storePath)
        var change = Change()
        change.newOrders = [("order-1", "shop-2001"), ("order-2", "shop-2002"), ("order-3", "shop-2003")].map { id, reference in
            TrackedOrder(
                orderID: id, hppSessionID: nil, kpSessionID: nil, merchantReference: reference, capturePolicy: .immediate,
                placedBy: .placeOrder, createdAt: first)
        }
        try await store.commit(change, at: first)
        guard payouts else { return fixture }
        #expect(try await store.record(payoutOne, outcomes: [], at: first))
        #expect(try await store.record(payoutTwo, outcomes: [], at: second))
        return fixture
    }

    @Test("text: per payout its header, counts, figures, unmatched lines with reasons and findings; a total at the end")
    func text() async throws {
        let fixture = try await recorded()
        let result = try await fixture.cli(["settlements"])
        #expect(result.status == 0, "\(result.errors)")
        let lines = result.output.split(separator: "\n").map(String.init)
        #expect(lines.first == "Payout PAYOUT01  2026-11-02T07:00:00Z  EUR  NET  net 23346  net from lines 23346", "\(result.output)")
        for expected in [
            "  4 lines: 2 matched, 0 payout-level, 2 unmatched",
            "  sales 24100  returns 0  reversals 0  fees 754 (603 + VAT 151)  fee refunds 0",
            "    line 2  SALE +4200  order order-ghost, capture cap-x  order_unknown: order order-ghost is not in the ledger",
            "    line 3  FEE -105  order order-ghost, capture cap-x  order_unknown: order order-ghost is not in the ledger",
            #"Payout PAYOUT02  2026-11-09T07:00:00Z  EUR  GROSS_FEE, "invoiced"  net -3000  net from lines -3000"#,
            "  3 lines: 1 matched, 1 payout-level, 1 unmatched",
            "  commission 0  charges 0  credits 0  holdback 1000  release 0  corrections 0  other types 0",
            "    line 2  SALE +3000  order order-2, capture cap-9  capture_unknown: capture cap-9 is not in the ledger",
        ] {
            #expect(lines.contains(expected), "missing \(expected) in\n\(result.output)")
        }
        #expect(
            lines.contains { $0.hasPrefix("    orphan: order order-ghost is not in the ledger: paid at Klarna, unknown to the shop") },
            "\(result.output)")
        #expect(lines.contains { $0.hasPrefix("    unknown_capture: SALE of 3000 EUR settles capture cap-9 of order order-2") }, "\(result.output)")
        #expect(lines.last == "Total: 2 payouts, net 20346 EUR; 7 lines: 3 matched, 1 payout-level, 3 unmatched; 2 findings", "\(result.output)")
    }

    @Test("--json: an array of payout reports with snake_case keys and ISO 8601 dates")
    func json() async throws {
        let fixture = try await recorded()
        let result = try await fixture.cli(["settlements", "--json"])
        #expect(result.status == 0, "\(result.errors)")
        let reports = try #require(try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [[String: Any]])
        #expect(reports.map { $0["payment_reference"] as? String } == ["PAYOUT01", "PAYOUT02"])
        let one = reports[0]
        #expect((one["payout_date"] as? String)?.hasPrefix("2026-11-02T07:00:00") == true, "\(one)")
        #expect(one["net"] as? Int == 23_346 && one["net_from_lines"] as? Int == 23_346)
        #expect(one["fee_amount"] as? Int == 603 && one["fee_tax"] as? Int == 151 && one["fees"] as? Int == 754)
        #expect(one["matched_count"] as? Int == 2 && one["unmatched_count"] as? Int == 2 && one["finding_count"] as? Int == 1)
        let unmatched = try #require(one["unmatched"] as? [[String: Any]])
        #expect(unmatched.map { $0["ordinal"] as? Int } == [2, 3])
        #expect(unmatched.first?["reason"] as? String == "order_unknown" && unmatched.first?["order_id"] as? String == "order-ghost")
        #expect(unmatched.first?["kind"] as? String == "SALE" && unmatched.first?["amount"] as? Int == 4_200)
        let findings = try #require(one["findings"] as? [[String: Any]])
        #expect(findings.first?["kind"] as? String == "orphan" && findings.first?["line_ordinals"] as? [Int] == [2, 3])
        #expect(reports[1]["settlement_type"] as? String == #"GROSS_FEE, "invoiced""#)
    }

    @Test("--csv: the report's columns as header, one RFC 4180 row per payout, CRLF line ends")
    func csv() async throws {
        let fixture = try await recorded()
        let result = try await fixture.cli(["settlements", "--csv"])
        #expect(result.status == 0, "\(result.errors)")
        #expect(result.output.hasSuffix("\r\n"))
        let rows = result.output.components(separatedBy: "\r\n")
        #expect(rows.count == 4 && rows[3].isEmpty, "\(rows)")
        #expect(rows[0] == PayoutReport.columns.joined(separator: ","))
        #expect(rows[1] == "PAYOUT01,2026-11-02T07:00:00Z,EUR,NET,4,2,0,2,24100,0,0,603,151,754,0,0,0,0,0,0,0,0,23346,23346,1,default", "\(rows[1])")
        #expect(
            rows[2]
                == #"PAYOUT02,2026-11-09T07:00:00Z,EUR,"GROSS_FEE, ""invoiced""",3,1,1,1,3000,5000,0,0,0,0,0,0,0,0,1000,0,0,0,-3000,-3000,1,default"#,
            "\(rows[2])")
    }

    @Test("--payout and --since filter; an unknown payout exits 1 saying so; bad input is a usage error (64)")
    func filtersAndErrors() async throws {
        let fixture = try await recorded()
        let one = try await fixture.cli(["settlements", "--payout", "PAYOUT02"])
        #expect(one.status == 0, "\(one.errors)")
        #expect(one.output.contains("Payout PAYOUT02") && !one.output.contains("PAYOUT01"), "\(one.output)")
        #expect(one.output.contains("Total: 1 payout, net -3000 EUR; 3 lines: 1 matched, 1 payout-level, 1 unmatched; 1 finding"), "\(one.output)")

        let bounds: [(since: String, payouts: [String])] = [
            ("2026-11-02", ["PAYOUT01", "PAYOUT02"]), ("2026-11-02T07:00:00Z", ["PAYOUT01", "PAYOUT02"]),
            ("2026-11-02T07:00:01Z", ["PAYOUT02"]), ("2026-11-05", ["PAYOUT02"]), ("2026-11-10", []),
        ]
        for (since, expected) in bounds {
            let result = try await fixture.cli(["settlements", "--since", since, "--json"])
            #expect(result.status == 0, "\(since): \(result.errors)")
            let reports = try #require(try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [[String: Any]])
            #expect(reports.compactMap { $0["payment_reference"] as? String } == expected, "--since \(since)")
        }
        let none = try await fixture.cli(["settlements", "--since", "2026-11-10"])
        #expect(none.status == 0 && none.output.hasPrefix("No payouts recorded dated on or after 2026-11-10."), "\(none.output)")

        let unknown = try await fixture.cli(["settlements", "--payout", "NOPE1234"])
        #expect(unknown.status == 1 && unknown.errors.contains("no payout NOPE1234 is recorded"), "\(unknown.errors)")
        let tooEarly = try await fixture.cli(["settlements", "--payout", "PAYOUT01", "--since", "2026-11-05"])
        #expect(tooEarly.status == 1 && tooEarly.errors.contains("no payout PAYOUT01 is recorded dated on or after 2026-11-05"), "\(tooEarly.errors)")

        for bad in ["2026-13-01", "2026-02-30", "yesterday", "02/11/2026"] {
            let result = try await fixture.cli(["settlements", "--since", bad])
            #expect(result.status == 64, "--since \(bad): \(result.output)")
            #expect(result.errors.contains("--since must be a day (YYYY-MM-DD, from its midnight UTC) or an ISO 8601 date-time"), "\(result.errors)")
            #expect(result.errors.contains("not \(bad)"), "\(result.errors)")
        }
        let both = try await fixture.cli(["settlements", "--json", "--csv"])
        #expect(both.status == 64 && both.errors.contains("--json and --csv exclude each other"), "\(both.errors)")
    }

    @Test("--since with a field out of range is a usage error (64), never rolled over into the next hour, day or month")
    func sinceFieldOutOfRange() async throws {
        let fixture = try await recorded()
        // Each would otherwise roll over to a moment before PAYOUT02 (2026-11-09T07:00:00Z) and list it.
        for bad in ["2026-11-08T25:00:00Z", "2026-11-08T08:61:00Z", "2026-11-08T08:00:60Z", "2026-11-31", "2026-11-08T08:00:00+25:00"] {
            let result = try await fixture.cli(["settlements", "--since", bad, "--json"])
            #expect(result.status == 64, "--since \(bad): \(result.output)")
            #expect(result.output.isEmpty, "--since \(bad): \(result.output)")
            #expect(result.errors.contains("--since must be a day") && result.errors.contains("not \(bad)"), "\(result.errors)")
        }
        let lastSecond = try await fixture.cli(["settlements", "--since", "2026-11-08T23:59:59Z", "--json"])
        #expect(lastSecond.status == 0, "\(lastSecond.errors)")
        let reports = try #require(try JSONSerialization.jsonObject(with: Data(lastSecond.output.utf8)) as? [[String: Any]])
        #expect(reports.compactMap { $0["payment_reference"] as? String } == ["PAYOUT02"])
    }

    @Test("no payouts recorded: the text says so and names settlements.enabled; JSON is empty, CSV only its header")
    func empty() async throws {
        let fixture = try await recorded(payouts: false)
        let text = try await fixture.cli(["settlements"])
        #expect(text.status == 0, "\(text.errors)")
        #expect(
            text.output.hasPrefix("No payouts recorded. The daemon fetches Klarna's payouts only with settlements.enabled: true"), "\(text.output)")
        let json = try await fixture.cli(["settlements", "--json"])
        #expect((try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [Any])?.isEmpty == true, "\(json.output)")
        let csv = try await fixture.cli(["settlements", "--csv"])
        #expect(csv.output == PayoutReport.columns.joined(separator: ",") + "\r\n")
    }

    @Test("show lists the payment's settlement lines: payout, type, amount, what each matched or why not; in JSON too")
    func show() async throws {
        let fixture = try await recorded()
        let settled = try await fixture.cli(["show", "shop-2001"])
        #expect(settled.status == 0, "\(settled.errors)")
        let lines = settled.output.split(separator: "\n").map(String.init)
        let start = try #require(lines.firstIndex(of: "Settlement lines"), "\(settled.output)")
        #expect(
            Array(lines[(start + 1)...]) == [
                "  payout PAYOUT01 line 0  SALE +19900 EUR  capture: capture cap-1 of order order-1",
                "  payout PAYOUT01 line 1  FEE -498 EUR (VAT 125)  order: fee on order order-1, capture cap-1",
                "  payout PAYOUT02 line 1  RETURN -5000 EUR  refund: refund ref-1 of order order-1",
            ], "\(settled.output)")

        let drift = try await fixture.cli(["show", "shop-2002"])
        #expect(
            drift.output.contains("  payout PAYOUT02 line 2  SALE +3000 EUR  unmatched (capture_unknown): capture cap-9 is not in the ledger"),
            "\(drift.output)")
        let unsettled = try await fixture.cli(["show", "order-3"])
        #expect(unsettled.output.contains("Settlement lines: none (no recorded payout names this payment's orders)"), "\(unsettled.output)")

        let json = try await fixture.cli(["show", "shop-2001", "--json"])
        #expect(json.status == 0, "\(json.errors)")
        let story = try #require(try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [String: Any])
        #expect((story["orders"] as? [[String: Any]])?.first?["order_id"] as? String == "order-1", "\(json.output)")
        let settlementLines = try #require(story["settlement_lines"] as? [[String: Any]], "\(json.output)")
        #expect(settlementLines.map { $0["matched"] as? String } == ["capture", "order", "refund"])
        #expect(settlementLines.map { $0["amount"] as? Int } == [19_900, -498, -5_000])
        #expect(settlementLines[1]["vat_amount"] as? Int == 125 && settlementLines[1]["capture_id"] as? String == "cap-1")
        #expect(settlementLines.allSatisfy { $0["source"] as? String == "daemon" || $0["matched"] as? String == "order" })
        #expect(settlementLines.map { $0["payment_reference"] as? String } == ["PAYOUT01", "PAYOUT01", "PAYOUT02"])
    }
}
