import Foundation
import ReconcilerCore

/// A recorded settlement line with its payout's date, as a store reads it for
/// ``SettlementReports/settlementLines(orderIDs:)``.
public struct RecordedLine: Sendable {
    public var payoutDate: Date
    public var line: LineReconciliation

    public init(payoutDate: Date, line: LineReconciliation) {
        self.payoutDate = payoutDate
        self.line = line
    }

    /// By payout date, then payout, then ordinal: the report's order, the same from every store (which read the lines
    /// an order or a batch of orders at a time).
    public static func inReportOrder(_ lines: [RecordedLine]) -> [LineReconciliation] {
        lines.sorted { a, b in
            (a.payoutDate, a.line.line.paymentReference, a.line.line.ordinal) < (b.payoutDate, b.line.line.paymentReference, b.line.line.ordinal)
        }.map(\.line)
    }
}
