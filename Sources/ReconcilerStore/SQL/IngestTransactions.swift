import Foundation
import ReconcilerCore

/// A delivery's, a track's and a capture request's transactions, written once: what ``IngestPlanner`` decides from
/// what its lookup finds, and the rows it writes. Safe with several writers at once (PostgreSQL): every insert that
/// another transaction may race keeps the row it finds, and the decision is made again from it.
public enum IngestTransactions {
    /// The delivery's row, then what ``IngestPlanner`` decides. A refused delivery leaves no row at all.
    ///
    /// Throws before the transaction starts what it may write of the record's own (a session to track, encoded here, off
    /// a shared writer).
    public static func ingest(_ record: IngestRecord, at: Date, holder: String?) throws -> Transaction<IngestResult> {
        let lookup = IngestPlanner.lookup(record)
        let encoded = try Encoded(record, at: at)
        let decided = find(lookup).then { decide(record, found: $0, lookup: lookup, at: at, holder: holder, encoded: encoded) }
        guard let key = record.dedupeKey else { return decided }
        // Two deliveries of one key at once: the second waits for the first's commit (PostgreSQL), then finds its row.
        return .read(
            """
            INSERT INTO deliveries (dedupe_key, kind, source, received_at, summary) VALUES (\(key), \(record.kind), \(record.source), \(at),
              \(record.summary))
            ON CONFLICT (dedupe_key) DO NOTHING RETURNING 1
            """
        ) { fresh in
            guard fresh.isEmpty else { return decided }
            return .read("UPDATE deliveries SET repeats = repeats + 1 WHERE dedupe_key = \(key) RETURNING received_at") {
                .answer(.repeated(firstSeen: $0.first?.date(0) ?? at))
            }
        }
    }

    /// The insert of the session a record may start tracking, made before the transaction.
    struct Encoded: Sendable {
        let session: (id: String, insert: Statement)?

        init(_ record: IngestRecord, at: Date) throws {
            switch record.action {
            case .hintSession(_, let session?), .track(let session):
                self.session = (session.hppSessionID, try WorkWrites.session(session, at: at, .keep))
            default:
                self.session = nil
            }
        }

        static let none = Encoded()
        private init() { session = nil }

        func sessionInsert(_ session: TrackedSession, at: Date) throws -> Statement {
            if let encoded = self.session, encoded.id == session.hppSessionID { return encoded.insert }
            return try WorkWrites.session(session, at: at, .keep)
        }
    }

    private static func decide(
        _ record: IngestRecord, found: IngestFound, lookup: IngestLookup, at: Date, holder: String?, encoded: Encoded
    ) -> Transaction<IngestResult> {
        switch IngestPlanner.decide(record, found: found, at: at) {
        case .refuse(let answer): return .rollBack(answer)
        case .write(let writes, let answer):
            return apply(writes, at: at, holder: holder, encoded: encoded).then { applied in
                switch applied {
                case .written: .answer(answer)
                // Another delivery tracked it since the lookup (and woke it): decided again as tracked.
                case .sessionTrackedMeanwhile:
                    decide(record, found: .session(tracked: true), lookup: lookup, at: at, holder: holder, encoded: encoded)
                // Another request recorded it since the lookup: decided again from what it recorded.
                case .recordedMeanwhile:
                    find(lookup).then { decide(record, found: $0, lookup: lookup, at: at, holder: holder, encoded: encoded) }
                }
            }
        }
    }

    /// What ``IngestPlanner`` reads, the order and the payment request locked until the commit (a concurrent step's
    /// commit waits, and the decision holds).
    static func find(_ lookup: IngestLookup) -> Transaction<IngestFound> {
        switch lookup {
        case .nothing:
            return .answer(.nothing)
        case .session(let id):
            return .read("SELECT 1 FROM sessions WHERE hpp_session_id = \(id)") { .answer(.session(tracked: !$0.isEmpty)) }
        case .openSessionsOfPayment(let kpSessionID):
            return .read(
                "SELECT hpp_session_id FROM sessions WHERE kp_session_id = \(kpSessionID) AND next_due IS NOT NULL ORDER BY hpp_session_id\(Statement.byteOrder)"
            ) {
                .answer(.openSessions($0.compactMap { $0.string(0) }))
            }
        case .orderSession(let orderID):
            return .read("SELECT hpp_session_id FROM orders WHERE order_id = \(orderID)") {
                .answer(.orderSession(hppSessionID: $0.first.map { $0.string(0) }))
            }
        case .order(let orderID):
            return lockedOrder(orderID).then { .answer(.order($0)) }
        case .paymentRequest(let id):
            return .read("SELECT data FROM payment_requests WHERE payment_request_id = \(id)\(Statement.forUpdate)") {
                .answer(.paymentRequest(try $0.first?.decoded(TrackedPaymentRequest.self)))
            }
        case .intent(let key):
            return .read("SELECT data FROM intents WHERE key = \(key)") { .answer(.intent(existing: try $0.first?.decoded(Intent.self))) }
        case .refund(let orderID, let key):
            return .run(["SELECT data FROM orders WHERE order_id = \(orderID)", "SELECT data FROM intents WHERE key = \(key)"]) { rows in
                .answer(.refund(order: try rows[0].first?.decoded(TrackedOrder.self), existing: try rows[1].first?.decoded(Intent.self)))
            }
        }
    }

    /// Locked until the commit, so that what is decided from it holds against a concurrent step's commit.
    static func lockedOrder(_ orderID: String) -> Transaction<TrackedOrder?> {
        .read("SELECT data FROM orders WHERE order_id = \(orderID)\(Statement.forUpdate)") { .answer(try $0.first?.decoded(TrackedOrder.self)) }
    }

    enum Applied: Sendable {
        /// With the capture request's id when it recorded one.
        case written(captureRequestID: Int64?)
        /// Nothing written: the session to track was tracked by another delivery since the lookup.
        case sessionTrackedMeanwhile
        /// Nothing written: the intent to record (a refund, a charge) was recorded by another request since the lookup.
        case recordedMeanwhile
    }

    /// Writes what an ingest decided, unless a row it inserts was inserted meanwhile (then nothing).
    static func apply(_ writes: IngestWrites, at: Date, holder: String?, encoded: Encoded = .none) -> Transaction<Applied> {
        do {
            let session = try writes.newSession.map { try encoded.sessionInsert($0, at: at) }
            let intent = try writes.intent.map { try WorkWrites.intent($0, at: at, .keep) }
            var others = try writes.paymentRequest.map { [try WorkWrites.paymentRequest($0, at: at)] } ?? []
            others += writes.disputeHint.map { [WorkWrites.disputeHint($0, at: at)] } ?? []
            others += try writes.events.map { try WorkWrites.event($0, at: at) }
            others += writes.wakeups.map { WorkWrites.wakeup($0, delivered: writes.delivered, holder: holder) }
            // The session first, then the intent, each alone: nothing after either is written when another writer
            // inserted it meanwhile.
            let rest = Transaction<Applied>.run(others) { [writes] _ in
                guard let capture = writes.captureRequest else { return .answer(.written(captureRequestID: nil)) }
                return captureRequest(capture, at: at).then { .answer(.written(captureRequestID: $0)) }
            }
            let afterSession =
                intent.map { intent in
                    Transaction<Applied>.read(intent) { $0.isEmpty ? .answer(.recordedMeanwhile) : rest }
                } ?? rest
            return session.map { session in
                .read(session) { $0.isEmpty ? .answer(.sessionTrackedMeanwhile) : afterSession }
            } ?? afterSession
        } catch {
            return .run([]) { _ in throw error }
        }
    }

    /// A capture request and its event, whose detail names the request's id.
    private static func captureRequest(_ capture: CaptureRequestRow, at: Date) -> Transaction<Int64> {
        .read("INSERT INTO capture_requests (order_id, amount, requested_at) VALUES (\(capture.orderID), \(capture.amount), \(at)) RETURNING id") {
            rows in
            guard let id = rows.first?.int64(0) else { throw MissingRow(what: "the new capture request's id") }
            var event = capture.event
            event.detail["request"] = "\(id)"
            return .write([try WorkWrites.event(event, at: at)], answering: id)
        }
    }

    /// Starts tracking `session` unless it is tracked already.
    public static func track(_ session: TrackedSession, event: DomainEvent, at: Date) throws -> Transaction<TrackResult> {
        let event = try WorkWrites.event(NewEvent(hppSessionID: session.hppSessionID, orderID: nil, event), at: at)
        return .read(try WorkWrites.session(session, at: at, .keep)) { inserted in
            guard inserted.isEmpty else {
                return .write(
                    [event, WorkWrites.wakeup(.session(session.hppSessionID), delivered: false, holder: nil)], answering: .tracked(session))
            }
            return .read("SELECT data FROM sessions WHERE hpp_session_id = \(session.hppSessionID)") {
                .answer(.existing(try $0[0].decoded(TrackedSession.self)))
            }
        }
    }

    /// A capture request from the command line, decided against the order as a concurrent step commits it.
    public static func requestCapture(orderID: String, amount: Int?, at: Date) -> Transaction<CaptureRequestResult> {
        lockedOrder(orderID).then { order in
            switch IngestPlanner.captureRequest(orderID: orderID, amount: amount, order: order, requestedBy: "the command line") {
            case .write(var writes):
                writes.delivered = false
                return apply(writes, at: at, holder: nil).then { applied in
                    guard case .written(let id?) = applied else { throw MissingRow(what: "the capture request's id") }
                    return .answer(.accepted(id: id))
                }
            case .unknownOrder: return .answer(.unknownOrder)
            case .refused(let why): return .answer(.refused(why))
            }
        }
    }
}

/// A statement that returns a row (`RETURNING`) returned none.
struct MissingRow: Error, CustomStringConvertible {
    let what: String
    var description: String { "the store returned no row for \(what)" }
}

extension IngestStore where Self: StatementRunner {
    public func track(_ session: TrackedSession, event: DomainEvent, at: Date) async throws -> TrackResult {
        let result = try await transact(try IngestTransactions.track(session, event: event, at: at))
        if case .tracked = result { await announceWork() }
        return result
    }

    public func requestCapture(orderID: String, amount: Int?, at: Date) async throws -> CaptureRequestResult {
        let result = try await transact(IngestTransactions.requestCapture(orderID: orderID, amount: amount, at: at))
        if case .accepted = result { await announceWork() }
        return result
    }

    public func recordRejection(source: String, status: Int, error: String, detail: String, at: Date) async throws {
        _ = try await rows(
            writtenBy:
                "INSERT INTO rejections (at, source, status, error, detail) VALUES (\(at), \(source), \(status), \(error), \(String(detail.prefix(1_000))))"
        )
    }

    public func ingest(_ record: IngestRecord, at: Date) async throws -> IngestResult {
        try await ingestAlone(record, at: at)
    }

    /// One delivery in one transaction of its own.
    public func ingestAlone(_ record: IngestRecord, at: Date) async throws -> IngestResult {
        let result = try await transact(try IngestTransactions.ingest(record, at: at, holder: leaseHolder))
        // Its wakeups tell whoever holds those keys (another daemon, perhaps) to look now.
        if case .accepted(let wake) = result, !wake.isEmpty { await announceWork() }
        return result
    }
}
