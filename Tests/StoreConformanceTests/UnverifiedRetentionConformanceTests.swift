import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore
import ReconcilerStore

/// What unauthenticated traffic leaves in a store (refusals, OM notifications for orders it does not know) goes by
/// its own retention and past a cap, oldest first; the same on SQLite and PostgreSQL.
@Suite("Store conformance: refusals and notifications for unknown orders")
struct UnverifiedRetentionConformanceTests {
    /// An OM notification's delivery record, keyed as Ingest keys it.
    func notification(_ orderID: String) -> IngestRecord {
        IngestRecord(
            dedupeKey: "\(RetentionPolicy.omNotificationKeyPrefix)\(orderID):FRAUD_RISK_ACCEPTED", kind: RetentionPolicy.omNotificationKind,
            source: "socket", summary: "OM notification FRAUD_RISK_ACCEPTED for order \(orderID)", action: .hintOrder(orderID: orderID))
    }

    /// Whether `orderID`'s notification is still recorded: a repeat of it is recognised as one.
    func isKept(_ store: any ReconcilerStore, _ orderID: String) async throws -> Bool {
        if case .repeated = try await store.ingest(notification(orderID), at: Fixtures.t0.addingTimeInterval(60)) { return true }
        return false
    }

    /// Unknown notifications u-0…u-4 and refusals r-0…r-4, one a second from `Fixtures.t0`; a notification for the
    /// known order `KNOWN:1_AB` (a colon and capitals in its id, as the key's event type has) before all of them.
    func fill(_ store: any ReconcilerStore) async throws {
        var change = Change()
        change.newOrders = [
            TrackedOrder(
                orderID: "KNOWN:1_AB", hppSessionID: nil, kpSessionID: nil, merchantReference: nil, capturePolicy: .onRequest, placedBy: .placeOrder,
                createdAt: Fixtures.t0)
        ]
        try await store.commit(change, at: Fixtures.t0.addingTimeInterval(-20))
        #expect(
            try await store.ingest(notification("KNOWN:1_AB"), at: Fixtures.t0.addingTimeInterval(-10)) == .accepted(wake: [.order("KNOWN:1_AB")]))
        for index in 0..<5 {
            let at = Fixtures.t0.addingTimeInterval(Double(index))
            #expect(try await store.ingest(notification("u-\(index)"), at: at) == .accepted(wake: []))
            try await store.recordRejection(source: "socket", status: 405, error: "method_not_allowed", detail: "r-\(index)", at: at)
        }
    }

    @Test("Past the cap the oldest go first; a notification for a known order is not one of them", arguments: Backend.allCases)
    func cap(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            try await fill(s.store)
            let cutoffs = PruneCutoffs(unverifiedRowCap: 3)
            let counted = try await s.store.prune(cutoffs, limit: -1, dryRun: true)
            #expect(counted.rejections == 2 && counted.unknownNotifications == 2, "\(counted)")
            for _ in 0..<2 {  // batches of one of each kind
                let batch = try await s.store.prune(cutoffs, limit: 1, dryRun: false)
                #expect(batch.rejections == 1 && batch.unknownNotifications == 1 && batch.deliveries == 0, "\(batch)")
            }
            #expect(try await s.store.prune(cutoffs, limit: 1, dryRun: false).isEmpty)

            // The three newest refusals stay: none is older than r-2.
            let summary = try await s.store.summary(now: Fixtures.t0.addingTimeInterval(5))
            #expect(summary.rejectionsLastDay == 3)
            #expect(summary.lastRejection?.hasSuffix("socket 405 method_not_allowed: r-4") == true, "\(summary.lastRejection ?? "none")")
            #expect(
                try await s.store.prune(PruneCutoffs(rejectionsBefore: Fixtures.t0.addingTimeInterval(2)), limit: -1, dryRun: true).rejections == 0)
            #expect(
                try await s.store.prune(PruneCutoffs(rejectionsBefore: Fixtures.t0.addingTimeInterval(3)), limit: -1, dryRun: true).rejections == 1)
            for kept in ["KNOWN:1_AB", "u-2", "u-3", "u-4"] { #expect(try await isKept(s.store, kept), "\(kept) was pruned") }
            for gone in ["u-0", "u-1"] { #expect(try await !isKept(s.store, gone), "\(gone) was kept") }
        }
    }

    @Test("Their own retention: unknown orders' notifications and refusals go by age, then the cap counts what is left", arguments: Backend.allCases)
    func ageThenCap(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            try await fill(s.store)
            // u-0, u-1 (and r-0, r-1) by age; of the rest, the two newest stay.
            let cutoffs = PruneCutoffs(
                rejectionsBefore: Fixtures.t0.addingTimeInterval(1.5), unknownNotificationsBefore: Fixtures.t0.addingTimeInterval(1.5),
                unverifiedRowCap: 2)
            let counted = try await s.store.prune(cutoffs, limit: -1, dryRun: true)
            #expect(counted.rejections == 3 && counted.unknownNotifications == 3, "\(counted)")
            var pruned = PruneCounts()
            while true {
                let batch = try await s.store.prune(cutoffs, limit: 1, dryRun: false)
                if batch.isEmpty { break }
                pruned += batch
            }
            #expect(pruned == counted)
            #expect(try await s.store.summary(now: Fixtures.t0.addingTimeInterval(5)).rejectionsLastDay == 2)
            for kept in ["KNOWN:1_AB", "u-3", "u-4"] { #expect(try await isKept(s.store, kept), "\(kept) was pruned") }
            for gone in ["u-0", "u-1", "u-2"] { #expect(try await !isKept(s.store, gone), "\(gone) was kept") }
        }
    }
}
