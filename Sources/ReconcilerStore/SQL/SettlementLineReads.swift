import Foundation
import ReconcilerCore

extension WorkStore where Self: StatementRunner {
    public func settlementLines(merchantReference: String, account: AccountID, limit: Int) async throws -> [SettledLine] {
        return try await rows(
            of: """
                SELECT l.data FROM settlement_lines l JOIN payouts p ON p.payment_reference = l.payment_reference
                WHERE \(json: "l.data", StoredJSON.lineMerchantReference) = \(merchantReference) AND p.account = \(account.rawValue)
                ORDER BY p.payout_date DESC, l.ordinal LIMIT \(limit)
                """
        ).map { try $0.decoded(LineReconciliation.self).line }
    }
}

extension SettlementReports where Self: StatementRunner {
    public func settlementLines(orderIDs: [String]) async throws -> [LineReconciliation] {
        let found = try await rows(
            of: """
                SELECT p.payout_date, l.data FROM settlement_lines l JOIN payouts p ON p.payment_reference = l.payment_reference
                WHERE l.order_id \(anyOf: orderIDs)
                """
        ).map { row in
            RecordedLine(
                payoutDate: row.date(0) ?? .distantPast, line: try row.decoded(LineReconciliation.self, 1))
        }
        return RecordedLine.inReportOrder(found)
    }
}
