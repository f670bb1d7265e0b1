import Foundation
import ReconcilerCore

/// Reads of one statement each, written once for both stores.
extension SettlementStore where Self: StatementRunner {
    public func recordedPayouts(among references: [String]) async throws -> Set<String> {
        // One list parameter, looked up by primary key, whatever its length.
        Set(try await rows(of: "SELECT payment_reference FROM payouts WHERE payment_reference \(anyOf: references)").compactMap { $0.string(0) })
    }
}

extension ReloadMailbox where Self: StatementRunner {
    public func newestReloadRequest() async throws -> Int64? {
        try await rows(of: "SELECT max(id) FROM reloads WHERE answered_at IS NULL").first?.int(0).map(Int64.init)
    }
}
