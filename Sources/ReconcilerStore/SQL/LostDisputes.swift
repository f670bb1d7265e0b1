import Foundation
import ReconcilerCore

extension StatementRunner {
    /// The disputes Klarna closed against the shop for `orderIDs` (``LostDispute``), by order, each order's in
    /// dispute id order: what a ledger read attaches to its orders. Written once for both stores.
    public func lostDisputes(of orderIDs: [String]) async throws -> [String: [LostDispute]] {
        var lost: [String: [LostDispute]] = [:]
        let closed: Statement = """
            SELECT data FROM disputes WHERE order_id \(anyOf: orderIDs) AND state = \(DisputeState.closed.rawValue) ORDER BY dispute_id
            """
        for row in try await rows(of: closed) {
            let dispute = try row.decoded(TrackedDispute.self)
            guard let orderID = dispute.orderID, let one = LostDispute(dispute) else { continue }
            lost[orderID, default: []].append(one)
        }
        return lost
    }
}
