import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore
import ReconcilerStore

/// The decisions every store's ingest writes: what each delivery reads, writes and answers (no store involved).
@Suite("Ingest decisions")
struct IngestPlannerTests {
    func record(_ action: IngestRecord.Action, warning: String? = nil) -> IngestRecord {
        IngestRecord(dedupeKey: "k", kind: "hpp_status", source: "socket", summary: "callback", warning: warning, action: action)
    }

    func writes(_ decision: IngestDecision) -> (IngestWrites, IngestResult)? {
        guard case .write(let writes, let answer) = decision else { return nil }
        return (writes, answer)
    }

    @Test("A callback for a tracked session notes and wakes it; for an untracked one it starts tracking only a verified session")
    func sessionCallbacks() throws {
        let hint = record(.hintSession(hppSessionID: "h", trackIfUnknown: nil), warning: "unsigned")
        #expect(IngestPlanner.lookup(hint) == .session(hppSessionID: "h"))
        let (known, answer) = try #require(writes(IngestPlanner.decide(hint, found: .session(tracked: true), at: Fixtures.t0)))
        #expect(answer == .accepted(wake: [.session("h")]))
        #expect(known.wakeups == [.session("h")] && known.delivered && known.newSession == nil)
        #expect(known.events.map(\.detail) == [["source": "socket", "kind": "hpp_status", "warning": "unsigned"]])
        let (nothing, unknownAnswer) = try #require(writes(IngestPlanner.decide(hint, found: .session(tracked: false), at: Fixtures.t0)))
        #expect(nothing.isEmpty && unknownAnswer == .accepted(wake: []))

        let verified = record(.hintSession(hppSessionID: "h", trackIfUnknown: Fixtures.session("h", reference: nil)))
        let (tracking, _) = try #require(writes(IngestPlanner.decide(verified, found: .session(tracked: false), at: Fixtures.t0)))
        #expect(tracking.newSession == Fixtures.session("h", reference: nil))
        #expect(tracking.events.map(\.event.message) == ["callback; tracking it from this verified callback"])
    }

    @Test("A track request for a tracked session is a repeat and writes nothing")
    func trackRepeat() throws {
        let track = record(.track(Fixtures.session("h", reference: nil)))
        let (none, answer) = try #require(writes(IngestPlanner.decide(track, found: .session(tracked: true), at: Fixtures.t0)))
        #expect(none.isEmpty && answer == .repeated(firstSeen: Fixtures.t0))
        let (new, accepted) = try #require(writes(IngestPlanner.decide(track, found: .session(tracked: false), at: Fixtures.t0)))
        #expect(new.newSession == Fixtures.session("h", reference: nil) && accepted == .accepted(wake: [.session("h")]))
    }

    @Test("A capture request: 404 for an unknown order, 409 for one that takes none, else a request with its event and wakeup")
    func captures() throws {
        let capture = record(.capture(orderID: "o", amount: 300))
        #expect(IngestPlanner.lookup(capture) == .order(orderID: "o"))
        guard case .refuse(.refused(404, "unknown_order", let detail)) = IngestPlanner.decide(capture, found: .order(nil), at: Fixtures.t0) else {
            Issue.record("an unknown order was not refused with 404")
            return
        }
        #expect(detail == "order o is not tracked")
        let immediate = TrackedOrder(
            orderID: "o", hppSessionID: "h", kpSessionID: nil, merchantReference: nil, capturePolicy: .immediate, placedBy: .placeOrder,
            createdAt: Fixtures.t0)
        guard case .refuse(.refused(409, "not_capturable", _)) = IngestPlanner.decide(capture, found: .order(immediate), at: Fixtures.t0) else {
            Issue.record("an order without on_request capture was not refused with 409")
            return
        }
        var onRequest = immediate
        onRequest.capturePolicy = .onRequest
        let (request, answer) = try #require(writes(IngestPlanner.decide(capture, found: .order(onRequest), at: Fixtures.t0)))
        #expect(answer == .accepted(wake: [.order("o")]))
        #expect(request.captureRequest?.amount == 300)
        #expect(request.captureRequest?.event.event.message == "capture of 300 requested by socket")
        #expect(request.captureRequest?.event.hppSessionID == "h")
    }

    @Test("A payment request event: a new one is followed from here, a known open one is read now")
    func paymentRequests() throws {
        let request = TrackedPaymentRequest(paymentRequestID: "pr", trackedAt: Fixtures.t0)
        let event = record(.hintPaymentRequest(request))
        let (new, _) = try #require(writes(IngestPlanner.decide(event, found: .paymentRequest(nil), at: Fixtures.t0)))
        #expect(new.paymentRequest == request)
        let later = Fixtures.t0.addingTimeInterval(60)
        let (open, _) = try #require(writes(IngestPlanner.decide(event, found: .paymentRequest(request), at: later)))
        #expect(open.paymentRequest == request.hinted(now: later))
    }
}
