import Foundation
import Testing
import TestSupport
import ReconcilerCore
import ReconcilerStore

/// A statement written once: its text in each dialect, its values bound in order, and what both stores answer to it.
@Suite("Statements written once")
struct StatementTests {
    @Test("Each interpolated value is a placeholder in the dialect's form, numbered in order; a list is one parameter")
    func rendering() {
        let since = Date(timeIntervalSince1970: 1_000)
        let ids = ["a", "b"]
        let none: String? = nil
        let statement: Statement = """
            SELECT data FROM disputes WHERE order_id \(anyOf: ids) AND account = \(AccountID.default.rawValue) AND next_look <= \(since) \
            AND raw IS \(none) LIMIT \(5)
            """
        #expect(
            statement.text(in: .postgres)
                == "SELECT data FROM disputes WHERE order_id = ANY($1) AND account = $2 AND next_look <= $3 AND raw IS $4::text LIMIT $5")
        #expect(
            statement.text(in: .sqlite)
                == "SELECT data FROM disputes WHERE order_id IN (SELECT value FROM json_each(?1)) AND account = ?2 AND next_look <= ?3 AND raw IS ?4 LIMIT ?5"
        )
        #expect(statement.values == [.texts(ids), .text("default"), .date(since), .null(.text), .integer(5)])
        // A literal without interpolation is SQL as it is, with nothing bound.
        let plain: Statement = "SELECT 1"
        #expect(plain.text(in: .sqlite) == "SELECT 1" && plain.values.isEmpty)
    }

    @Test("Each path SQL reads from stored JSON names what the encoder writes (it fails when a property is renamed)")
    func storedJSONPaths() throws {
        let line = SettledLine(
            paymentReference: "P-1", ordinal: 0, kind: .sale, amount: 1_000, currency: "EUR", merchantReference: "shop-42")
        let recorded = try JSONEncoder().encode(LineReconciliation(line: line, signedAmount: 1_000, match: .unmatched(.orderUnknown), note: "n"))
        var value: Any? = try JSONSerialization.jsonObject(with: recorded)
        for key in StoredJSON.lineMerchantReference.keys { value = (value as? [String: Any])?[key] }
        #expect(value as? String == "shop-42")
        // A tracked order's currency, and a session's poll profile (numbers: seconds since 2001).
        let order =
            try JSONSerialization.jsonObject(
                with: try JSONEncoder().encode(Fixtures.order("o-1", session: nil, reference: nil, policy: .immediate, currency: "SEK")))
            as? [String: Any]
        #expect(StoredJSON.orderCurrency.keys.count == 1 && order?[StoredJSON.orderCurrency.keys[0]] as? String == "SEK")
        var session = Fixtures.session("h-1")
        session.lastReadAt = Date(timeIntervalSinceReferenceDate: 10)
        session.lastHintAt = Date(timeIntervalSinceReferenceDate: 20)
        session.expiresAt = Date(timeIntervalSinceReferenceDate: 30)
        let stored = try JSONSerialization.jsonObject(with: try JSONEncoder().encode(session)) as? [String: Any]
        let numbers = [StoredJSON.sessionLastReadAt, StoredJSON.sessionLastHintAt, StoredJSON.sessionExpiresAt].map { stored?[$0.keys[0]] as? Double }
        #expect(numbers == [10, 20, 30])
        let path: Statement = "SELECT 1 WHERE \(json: "data", StoredJSON.lineMerchantReference) = \("shop-42")"
        #expect(path.text(in: .sqlite) == "SELECT 1 WHERE json_extract(data, '$.line.merchantReference') = ?1")
        #expect(path.text(in: .postgres) == "SELECT 1 WHERE (data::jsonb #>> '{line,merchantReference}') = $1")
    }

    @Test("Both stores answer a statement alike: a list parameter of any length, times compared, rows read by position", arguments: Backend.allCases)
    func bothStores(_ backend: Backend) async throws {
        try await StoreUnderTest.with(backend) { s in
            let t0 = Fixtures.t0
            var change = Change()
            change.newOrders = ["o-1", "o-2", "o-3"].map { Fixtures.order($0, session: nil, reference: nil, policy: .immediate, currency: "EUR") }
            try await s.store.commit(change, at: t0)
            let runner = try #require((s.store as? RecordingStore)?.base as? any StatementRunner)
            let wanted = ["o-3", "o-1", "o-404"]
            let rows = try await runner.rows(of: "SELECT order_id, created_at FROM orders WHERE order_id \(anyOf: wanted) ORDER BY order_id")
            #expect(rows.map { $0.string(0) } == ["o-1", "o-3"])
            #expect(rows.allSatisfy { $0.date(1).map { abs($0.timeIntervalSince(t0)) < 0.001 } ?? false })
            #expect(try await runner.rows(of: "SELECT order_id FROM orders WHERE order_id \(anyOf: [String]())").isEmpty)
            let later = try await runner.rows(of: "SELECT count(*) FROM orders WHERE created_at > \(t0.addingTimeInterval(-1))")
            #expect(later.first?.int(0) == 3)
        }
    }
}
