import Foundation
import ReconcilerCore

/// How payouts matched against the ledger are printed: the text and CSV of `klarna-reconciler settlements` (its
/// JSON is ``PayoutReport`` itself), and one settlement line as `show` prints it. Amounts are minor units, signed
/// where a line's effect on the payout is meant, as magnitudes where Klarna's formula names a figure.
enum SettlementReportRenderer {
    /// Every payout with its counts, figures, unmatched lines and findings, then one total line (per currency), and
    /// one per account when the payouts are of another account than the default one.
    static func text(_ reports: [PayoutReport]) -> String {
        var lines: [String] = []
        let byAccount = Dictionary(grouping: reports, by: \.account)
        let namesAccounts = byAccount.keys.contains { $0 != .default }
        for report in reports {
            let agrees = report.net == report.netFromLines ? "" : " (differs: see the findings)"
            let account = namesAccounts ? "  account \(report.account)" : ""
            lines.append(
                "Payout \(report.paymentReference)  \(report.payoutDate.formatted(.iso8601))  \(report.currency)  \(report.settlementType)  net \(report.net)  net from lines \(report.netFromLines)\(agrees)\(account)"
            )
            lines.append(
                "  \(counted(report.lineCount, "line")): \(report.matchedCount) matched, \(report.payoutLevelCount) payout-level, \(report.unmatchedCount) unmatched"
            )
            lines.append(
                "  sales \(report.sales)  returns \(report.returns)  reversals \(report.reversals)  fees \(report.fees) (\(report.feeAmount) + VAT \(report.feeTax))  fee refunds \(report.feeRefunds)"
            )
            lines.append(
                "  commission \(report.commission)  charges \(report.charges)  credits \(report.credits)  holdback \(report.holdback)  release \(report.release)  corrections \(report.corrections)  other types \(report.otherTypes)"
            )
            if !report.unmatched.isEmpty { lines.append("  Unmatched lines") }
            for line in report.unmatched {
                let ids = [line.orderID.map { "order \($0)" }, line.captureID.map { "capture \($0)" }, line.refundID.map { "refund \($0)" }]
                    .compactMap { $0 }.joined(separator: ", ")
                lines.append(
                    "    line \(line.ordinal)  \(line.kind) \(Minor.signedText(line.amount))\(ids.isEmpty ? "" : "  \(ids)")  \(line.reason.rawValue): \(line.explanation)"
                )
            }
            if !report.findings.isEmpty { lines.append("  Findings") }
            for finding in report.findings {
                lines.append("    \(finding.kind.rawValue): \(finding.reason)")
            }
        }
        lines.append(total("Total", reports))
        if namesAccounts {
            for (account, reports) in byAccount.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                lines.append(total("  account \(account)", reports))
            }
        }
        return lines.joined(separator: "\n")
    }

    /// `Total: 2 payouts, net 465000 EUR, 1200 SEK; 9 lines: 7 matched, 1 payout-level, 1 unmatched; 3 findings` (the
    /// title `Total`; an account's line has its own).
    static func total(_ title: String, _ reports: [PayoutReport]) -> String {
        // Saturating (Minor): an absurd amount from Klarna is shown as it is reported, it must not stop the command.
        var net: [String: Int] = [:]
        for report in reports { net[report.currency] = Minor.add(net[report.currency] ?? 0, report.net) }
        let nets = net.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
        func sum(_ count: (PayoutReport) -> Int) -> Int { Minor.sum(reports.map(count)) }
        return "\(title): \(counted(reports.count, "payout"))\(nets.isEmpty ? "" : ", net \(nets)"); \(counted(sum(\.lineCount), "line")): "
            + "\(sum(\.matchedCount)) matched, \(sum(\.payoutLevelCount)) payout-level, \(sum(\.unmatchedCount)) unmatched; "
            + counted(sum(\.findingCount), "finding")
    }

    /// `1 line`, `2 lines`.
    static func counted(_ count: Int, _ noun: String) -> String { "\(count) \(noun)\(count == 1 ? "" : "s")" }

    /// RFC 4180: a header of ``PayoutReport/columns`` and one row per payout, CRLF after each record.
    static func csv(_ reports: [PayoutReport]) -> String {
        ([PayoutReport.columns] + reports.map(\.columnValues))
            .map { row in row.map(csvField).joined(separator: ",") + "\r\n" }
            .joined()
    }

    /// A field quoted when it holds a comma, a quote or a line break, its quotes doubled.
    static func csvField(_ value: String) -> String {
        // By scalar: "\r\n" is one Character, equal neither to "\r" nor to "\n".
        guard value.unicodeScalars.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return value }
        return "\"" + value.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    /// `payout XISA93DJ line 1  FEE -498 EUR (VAT 125)  order: fee on order …`: where the line is, what it moved,
    /// and what it matched or why not.
    static func line(_ line: SettlementLineView) -> String {
        let vat = line.vatAmount.map { " (VAT \($0))" } ?? ""
        let what = line.unmatchedReason.map { "unmatched (\($0.rawValue))" } ?? line.matched
        return
            "payout \(line.paymentReference) line \(line.ordinal)  \(line.type) \(Minor.signedText(line.amount)) \(line.currency)\(vat)  \(what): \(line.note)"
    }
}
