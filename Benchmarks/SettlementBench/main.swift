import Foundation
import ReconcilerCore
import ReconcilerStore
import SQLiteBackend

// klarna-settlement-bench [--captures N] [--payout-orders M] [--payouts P] [--folder DIR]
//
// Settlement matching against a ledger of N captures (two per order), as `key value` lines:
//  1. in memory: the matcher over P payouts of M orders each (a SALE per capture and a FEE with VAT per order), the
//     ledger a dictionary of N captures; next to it, in the same run, the bare hash join (each SALE's capture looked
//     up by order and capture id, nothing else) as the reference; and the memory the ledger takes (RSS before and
//     after building it).
//  2. through the store: the same ledger in a real SQLite file (orders and ledger rows, committed as the engine's
//     steps write them), each payout read from the ledger by its order ids, matched and recorded in one transaction
//     (SettlementStore), as the daemon's settlement service does.

func option(_ name: String, _ fallback: Int) -> Int {
    let arguments = CommandLine.arguments
    guard let at = arguments.firstIndex(of: name), at + 1 < arguments.count, let value = Int(arguments[at + 1]) else { return fallback }
    return value
}

func report(_ key: String, _ value: Any) { print("\(key) \(value)") }

/// VmRSS or VmHWM of this process, KiB.
func memory(_ field: String) -> Int {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    let line = status.split(separator: "\n").first { $0.hasPrefix(field + ":") }
    return line.flatMap { Int($0.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") } ?? 0
}

func seconds(_ duration: Duration) -> Double {
    let (whole, attoseconds) = duration.components
    return Double(whole) + Double(attoseconds) / 1e18
}

let captureCount = option("--captures", 1_000_000)
let ordersPerPayout = option("--payout-orders", 5_000)
let payoutCount = option("--payouts", 20)
let folder =
    CommandLine.arguments.firstIndex(of: "--folder").map { CommandLine.arguments[$0 + 1] }
    ?? FileManager.default.temporaryDirectory.appendingPathComponent("klarna-settlement-bench-\(getpid())").path
let orderCount = captureCount / 2
let start = Date(timeIntervalSince1970: 1_800_000_000)

func orderID(_ index: Int) -> String { "order-\(index)" }
func captureID(_ index: Int, _ which: Int) -> String { "capture-\(index)-\(which)" }
func amount(_ index: Int, _ which: Int) -> Int { 1_000 + (index % 9_000) + which * 7 }

/// The payouts: payout `p` settles orders p*M ..< (p+1)*M, every capture a SALE, every order a FEE with VAT.
func payout(_ p: Int) -> (SettledPayout, [SettledLine]) {
    let reference = "bench-payout-\(p)"
    var lines: [SettledLine] = []
    lines.reserveCapacity(ordersPerPayout * 3)
    for index in (p * ordersPerPayout)..<((p + 1) * ordersPerPayout) {
        for which in 0..<2 {
            lines.append(
                SettledLine(
                    paymentReference: reference, ordinal: lines.count, kind: .sale, amount: amount(index, which),
                    orderID: orderID(index), captureID: captureID(index, which), currency: "SEK", captureDate: start))
        }
        lines.append(
            SettledLine(
                paymentReference: reference, ordinal: lines.count, kind: .fee, amount: 59, vatAmount: 15,
                orderID: orderID(index), currency: "SEK"))
    }
    var figures = PayoutFigures(lines: lines, totals: SettledTotals(settlementAmount: 0))
    figures.settlement = figures.formulaSettlement
    let totals = SettledTotals(
        saleAmount: figures.sale, feeAmount: figures.fee, taxAmount: figures.tax, settlementAmount: figures.settlement)
    return (
        SettledPayout(
            paymentReference: reference, payoutDate: start.addingTimeInterval(Double(p) * 86_400), currency: "SEK", settlementType: "NET",
            totals: totals), lines
    )
}

func ledgerOrder(_ index: Int) -> LedgerOrder {
    LedgerOrder(
        orderID: orderID(index), merchantReference: "ref-\(index)", currency: "SEK",
        captures: (0..<2).map { which in
            LedgerCapture(
                orderID: orderID(index), captureID: captureID(index, which), amount: amount(index, which), currency: "SEK",
                capturedAt: start, source: .daemon)
        })
}

precondition(payoutCount * ordersPerPayout <= orderCount, "the payouts settle more orders than the ledger holds")
let payouts = (0..<payoutCount).map(payout)
let lineCount = payouts.reduce(0) { $0 + $1.1.count }
report("ledger_captures", orderCount * 2)
report("settlement_lines", lineCount)

// 1. In memory.
do {
    let before = memory("VmRSS")
    var ledger: [String: LedgerOrder] = [:]
    ledger.reserveCapacity(orderCount)
    for index in 0..<orderCount { ledger[orderID(index)] = ledgerOrder(index) }
    let after = memory("VmRSS")
    report("memory_ledger_kib", after - before)
    report("memory_bytes_per_capture", (after - before) * 1024 / max(1, orderCount * 2))

    let clock = ContinuousClock()
    var findings = 0
    var matched = 0
    let matching = clock.measure {
        for (settled, lines) in payouts {
            let result = SettlementMatcher.reconcile(payout: settled, lines: lines, orders: ledger)
            findings += result.findings.count
            matched += result.matchedCount
        }
    }
    // The reference: only the lookups the SALEs need, nothing decided.
    var found = 0
    let join = clock.measure {
        for (_, lines) in payouts {
            for line in lines where line.kind == .sale {
                if let order = ledger[line.orderID ?? ""], order.captures.contains(where: { $0.captureID == line.captureID }) { found += 1 }
            }
        }
    }
    guard findings == 0, matched == lineCount else {
        FileHandle.standardError.write(
            Data("in memory: \(findings) findings, \(matched) of \(lineCount) matched; the bench's payouts are wrong\n".utf8))
        exit(1)
    }
    report("memory_lines_per_second", Int(Double(lineCount) / seconds(matching)))
    report("memory_join_sales_per_second", Int(Double(found) / seconds(join)))
    report("memory_sales_per_second", Int(Double(found) / seconds(matching)))
    report("peak_rss_kib", memory("VmHWM"))
}

// 2. Through the store, with the peak RSS reset first (clear_refs 5) so that it is this phase's own: the daemon
//    holds only the ledger of the orders one payout names, never the whole ledger.
do {
    try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
    report("store_rss_before_kib", memory("VmRSS"))
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: folder) }
    let path = folder + "/state.sqlite"
    let store = try SQLiteStore(path: path)
    let clock = ContinuousClock()
    let filling = try await clock.measure {
        for batch in stride(from: 0, to: orderCount, by: 20_000) {
            var change = Change()
            for index in batch..<min(orderCount, batch + 20_000) {
                var order = TrackedOrder(
                    orderID: orderID(index), hppSessionID: nil, kpSessionID: nil, merchantReference: "ref-\(index)",
                    capturePolicy: .immediate, placedBy: .none, createdAt: start)
                order.currency = "SEK"
                order.phase = .closed
                order.outcome = .captured
                order.nextDueAt = nil
                change.orders.append(order)
                change.ledgerCaptures += ledgerOrder(index).captures
            }
            try await store.commit(change, at: start)
        }
    }
    report("store_fill_seconds", String(format: "%.1f", seconds(filling)))
    let size =
        ((try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0)
        + ((try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0)
    report("store_mib", size >> 20)

    let settlements: any SettlementStore = store
    var findings = 0
    let syncing = try await clock.measure {
        for (settled, lines) in payouts {
            let orderIDs = Array(Set(lines.compactMap(\.orderIDGiven)))
            let ledger = try await settlements.ledger(orderIDs: orderIDs, account: .default)
            let result = SettlementMatcher.reconcile(payout: settled, lines: lines, orders: ledger)
            findings += result.findings.count
            guard try await settlements.record(result, outcomes: [], at: start) else {
                FileHandle.standardError.write(Data("payout \(settled.paymentReference) was recorded already\n".utf8))
                exit(1)
            }
        }
    }
    guard findings == 0 else {
        FileHandle.standardError.write(Data("through the store: \(findings) findings; the ledger read is wrong\n".utf8))
        exit(1)
    }
    report("store_lines_per_second", Int(Double(lineCount) / seconds(syncing)))
    report("store_peak_rss_kib", memory("VmHWM"))
}
