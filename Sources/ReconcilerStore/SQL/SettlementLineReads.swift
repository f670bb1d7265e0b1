import Foundation
import ReconcilerCore

extension WorkStore where Self: StatementRunner {
    public func settlementLines(merchantReference: String, account: AccountID, limit: Int) async throws -> [SettledLine] {
        let decoder = JSONDecoder()
        return try await rows(
            of: """
                SELECT l.data FROM settlement_lines l JOIN payouts p ON p.payment_reference = l.payment_reference
                WHERE \(json: "l.data", StoredJSON.lineMerchantReference) = \(merchantReference) AND p.account = \(account.rawValue)
                ORDER BY p.payout_date DESC, l.ordinal LIMIT \(limit)
                """
        ).map { try decoder.decode(LineReconciliation.self, from: Data(($0.string(0) ?? "").utf8)).line }
    }
}

extension SettlementReports where Self: StatementRunner {
    public func settlementLines(orderIDs: [String]) async throws -> [LineReconciliation] {
        let decoder = JSONDecoder()
        let found = try await rows(
            of: """
                SELECT p.payout_date, l.data FROM settlement_lines l JOIN payouts p ON p.payment_reference = l.payment_reference
                WHERE l.order_id \(anyOf: orderIDs)
                """
        ).map { row in
            RecordedLine(
                payoutDate: row.date(0) ?? .distantPast, line: try decoder.decode(LineReconciliation.self, from: Data((row.string(1) ?? "").utf8)))
        }
        return RecordedLine.inReportOrder(found)
    }
}
