@testable import Engine
import Foundation
import KlarnaAPI
import KlarnaSandbox
import ReconcilerCore
import ReconcilerStore
import Testing
import TestSupport

@Suite("One JSON convention (OperatorJSON)")
struct OperatorJSONTests {
    @Test("snake_case keys back to the property names, ID and URL in capitals; a map's keys untouched")
    func propertyNames() {
        #expect(OperatorJSON.propertyName("hpp_session_id") == "hppSessionID")
        #expect(OperatorJSON.propertyName("klarna_reference") == "klarnaReference")
        #expect(OperatorJSON.propertyName("base_url") == "baseURL")
        #expect(OperatorJSON.propertyName("id") == "id")
        #expect(OperatorJSON.propertyName("phase") == "phase")
        #expect(OperatorJSON.propertyName("_0") == "_0")
    }

    @Test("Dates: UTC to the millisecond, rounded, so that text read back prints the same text")
    func dates() throws {
        #expect(OperatorJSON.format(Date(timeIntervalSince1970: 1_800_000_000.123)) == "2027-01-15T08:00:00.123Z")
        #expect(OperatorJSON.format(Date(timeIntervalSince1970: 1_800_000_000.9996)) == "2027-01-15T08:00:01.000Z")
        for step in 0..<2_000 {
            let date = Date(timeIntervalSince1970: 1_800_000_000 + Double(step) * 0.001 + 0.0004)
            let text = OperatorJSON.format(date)
            let read = try #require(KlarnaJSON.parseDate(text))
            #expect(OperatorJSON.format(read) == text)
        }
    }

    @Test(
        "What the operators' socket serves (status, list, a payment's story with its intents, events and outcomes) reads back into the same document")
    func roundTrip() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(
                SessionSpec(orderAmount: 12_000, merchantReference: "json-1", schedule: [ScheduleStep(afterSeconds: 1, status: "COMPLETED")]))
            try await h.run(for: .seconds(30))
            #expect(try await h.outcomes(created).contains(.captured))
            let desk = OperatorDesk(store: h.store)
            let story = try #require(try await desk.story("json-1"))
            try Self.expectRoundTrip(story)
            try Self.expectRoundTrip(try await desk.listing(state: nil, limit: 100))
            try Self.expectRoundTrip(try await desk.status(now: h.clock.now))
            let text = String(decoding: try OperatorJSON.encoder().encode(story), as: UTF8.self)
            #expect(text.contains(#""hpp_session_id":"\#(created.hppSessionId)""#))
            #expect(!text.contains("hppSessionID"))
        }
    }

    /// Encoded, decoded and encoded again: the same bytes (a key that does not read back would be lost or fail).
    static func expectRoundTrip<T: Codable>(_ value: T, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let first = try OperatorJSON.encoder().encode(value)
        let again = try OperatorJSON.encoder().encode(try OperatorJSON.decoder().decode(T.self, from: first))
        #expect(
            first == again, "\(String(decoding: first, as: UTF8.self))\n\(String(decoding: again, as: UTF8.self))", sourceLocation: sourceLocation)
    }
}
