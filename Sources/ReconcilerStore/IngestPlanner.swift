import Foundation
import ReconcilerCore

// An ingest decided once for every store: what it reads, and from that what it writes and answers. A store does the
// reading and the writing in its own dialect and decides nothing.

/// What deciding an ingest needs read, in the transaction that writes it.
public enum IngestLookup: Sendable, Equatable {
    case nothing
    /// Whether the session is tracked.
    case session(hppSessionID: String)
    /// The open sessions of a KP session.
    case openSessionsOfPayment(kpSessionID: String)
    /// Whether the order is tracked, and its session.
    case orderSession(orderID: String)
    /// The order, locked against a concurrent step until the commit.
    case order(orderID: String)
    /// The payment request, locked against a concurrent step until the commit.
    case paymentRequest(id: String)
    /// The order, and the intent recorded under a refund's idempotency key.
    case refund(orderID: String, key: String)
    /// The intent recorded under a key (a charge's, a token cancellation's).
    case intent(key: String)
}

/// What a store found for an ``IngestLookup``, in the same order of cases.
public enum IngestFound: Sendable {
    case nothing
    case session(tracked: Bool)
    case openSessions([String])
    /// `nil`: not tracked; else the order's session (which may be none).
    case orderSession(hppSessionID: String??)
    case order(TrackedOrder?)
    case paymentRequest(TrackedPaymentRequest?)
    case refund(order: TrackedOrder?, existing: Intent?)
    case intent(existing: Intent?)
}

/// A capture request to record; its event's detail gains `request`, the new request's id.
public struct CaptureRequestRow: Sendable {
    public var orderID: String
    public var amount: Int?
    public var event: NewEvent
}

/// The rows an ingest writes besides its delivery's.
public struct IngestWrites: Sendable {
    /// Tracked from now on; only ever inserted, never over a session tracked already.
    public var newSession: TrackedSession?
    /// Inserted or updated.
    public var paymentRequest: TrackedPaymentRequest?
    public var captureRequest: CaptureRequestRow?
    /// A new intent (a refund, a charge), inserted.
    public var intent: Intent?
    /// A dispute for the dispute service of its account to read (kept until it has).
    public var disputeHint: DisputeHint?
    public var events: [NewEvent] = []
    /// Keys to wake; `delivered`: the caller wakes the engine itself once this commits (the row then only matters after
    /// a crash).
    public var wakeups: [WorkKey] = []
    public var delivered = true

    public init() {}

    public var isEmpty: Bool {
        newSession == nil && paymentRequest == nil && captureRequest == nil && intent == nil && disputeHint == nil && events.isEmpty
            && wakeups.isEmpty
    }
}

public enum IngestDecision: Sendable {
    /// Write these rows (with the delivery's) and answer.
    case write(IngestWrites, IngestResult)
    /// Write nothing, not even the delivery's row, and answer.
    case refuse(IngestResult)
}

public enum IngestPlanner {
    /// What `record` needs read before it is decided.
    public static func lookup(_ record: IngestRecord) -> IngestLookup {
        switch record.action {
        case .hintSession(let id, _): .session(hppSessionID: id)
        case .track(let session): .session(hppSessionID: session.hppSessionID)
        case .hintSessionsOfPayment(let kpSessionID): .openSessionsOfPayment(kpSessionID: kpSessionID)
        case .hintOrder(let orderID): .orderSession(orderID: orderID)
        case .capture(let orderID, _): .order(orderID: orderID)
        case .hintPaymentRequest(let request): .paymentRequest(id: request.paymentRequestID)
        case .refund(let ask, let key): .refund(orderID: ask.orderID, key: key)
        case .charge(_, let key, _), .cancelToken(_, let key, _): .intent(key: key)
        case .recordOnly, .hintDispute: .nothing
        }
    }

    /// What `record` writes and answers, given what its ``lookup(_:)`` found (`found` answers that lookup).
    public static func decide(_ record: IngestRecord, found: IngestFound, at: Date) -> IngestDecision {
        var detail = ["source": record.source, "kind": record.kind]
        if let warning = record.warning { detail["warning"] = warning }
        func note(_ hpp: String?, _ order: String?, _ message: String) -> NewEvent {
            NewEvent(hppSessionID: hpp, orderID: order, DomainEvent(.webhook, message), detail: detail)
        }
        var writes = IngestWrites()
        writes.delivered = record.callerWakes
        switch (record.action, found) {
        case (.hintSession(let id, let newSession), .session(let tracked)):
            if tracked {
                writes.events = [note(id, nil, record.summary)]
            } else if let newSession {
                writes.newSession = newSession
                writes.events = [note(id, nil, "\(record.summary); tracking it from this verified callback")]
            } else {
                return .write(writes, .accepted(wake: []))
            }
            writes.wakeups = [.session(id)]
            return .write(writes, .accepted(wake: [.session(id)]))
        case (.track(let session), .session(let tracked)):
            // Tracked already: a repeat (its delivery's row stays, as a delivery seen).
            guard !tracked else { return .write(writes, .repeated(firstSeen: at)) }
            writes.newSession = session
            writes.events = [note(session.hppSessionID, nil, record.summary)]
            writes.wakeups = [.session(session.hppSessionID)]
            return .write(writes, .accepted(wake: writes.wakeups))
        case (.hintSessionsOfPayment, .openSessions(let ids)):
            writes.events = ids.map { note($0, nil, record.summary) }
            writes.wakeups = ids.map(WorkKey.session)
            return .write(writes, .accepted(wake: writes.wakeups))
        case (.hintOrder(let orderID), .orderSession(let session)):
            guard let session else { return .write(writes, .accepted(wake: [])) }
            writes.events = [note(session, orderID, record.summary)]
            writes.wakeups = [.order(orderID)]
            return .write(writes, .accepted(wake: writes.wakeups))
        case (.capture(let orderID, let amount), .order(let order)):
            switch captureRequest(orderID: orderID, amount: amount, order: order, requestedBy: record.source) {
            case .write(let writes): return .write(writes, .accepted(wake: [.order(orderID)]))
            case .unknownOrder: return .refuse(.refused(status: 404, error: "unknown_order", detail: "order \(orderID) is not tracked"))
            case .refused(let why): return .refuse(.refused(status: 409, error: "not_capturable", detail: why))
            }
        case (.hintPaymentRequest(let request), .paymentRequest(let known)):
            if let known {
                guard known.isOpen else { return .write(writes, .accepted(wake: [])) }
                writes.paymentRequest = known.hinted(now: at)
            } else {
                writes.paymentRequest = request
            }
            writes.wakeups = [.paymentRequest(request.paymentRequestID)]
            return .write(writes, .accepted(wake: writes.wakeups))
        case (.refund(let ask, let key), .refund(let order, let existing)):
            switch RefundRules.request(ask, key: key, order: order, existing: existing, now: at) {
            case .record(let intent):
                writes.intent = intent
                writes.events = [
                    NewEvent(
                        hppSessionID: order?.hppSessionID, orderID: ask.orderID,
                        DomainEvent(.refundRequested, "refund of \(ask.amount) requested by \(record.source), reference \(ask.reference)"),
                        detail: ["intent": key, "source": record.source])
                ]
                writes.wakeups = [.order(ask.orderID)]
                return .write(writes, .accepted(wake: writes.wakeups))
            case .repeated(let intent):
                return .refuse(.repeated(firstSeen: intent.createdAt))
            case .refused(let status, let error, let reason):
                return .refuse(.refused(status: status, error: error, detail: reason))
            }
        case (.charge(let ask, let key, let capture), .intent(let existing)):
            switch ChargeRules.request(ask, key: key, capture: capture, existing: existing, now: at) {
            case .record(let intent):
                writes.intent = intent
                writes.events = [
                    NewEvent(
                        hppSessionID: nil, orderID: nil,
                        DomainEvent(
                            .chargeRequested,
                            "charge of \(ask.amount) \(ask.currency) requested by \(record.source), reference \(ask.reference), capture \(capture.rawValue)"
                        ),
                        detail: ["intent": key, "source": record.source, "charge_reference": ask.reference])
                ]
                writes.wakeups = [.customerToken(key)]
                return .write(writes, .accepted(wake: writes.wakeups))
            case .repeated(let intent):
                return .refuse(.repeated(firstSeen: intent.createdAt))
            case .refused(let status, let error, let reason):
                return .refuse(.refused(status: status, error: error, detail: reason))
            }
        case (.cancelToken(let token, let key, let account), .intent(let existing)):
            if let existing { return .refuse(.repeated(firstSeen: existing.createdAt)) }
            writes.intent = TokenCancelRules.intent(token: token, key: key, account: account, now: at)
            writes.events = [
                NewEvent(
                    hppSessionID: nil, orderID: nil,
                    DomainEvent(.operatorRequest, "cancellation of customer token \(Redact.tail(token)) requested by \(record.source)"),
                    detail: ["intent": key, "source": record.source])
            ]
            writes.wakeups = [.customerToken(key)]
            return .write(writes, .accepted(wake: writes.wakeups))
        case (.hintDispute(let hint), _):
            writes.disputeHint = hint
            return .write(writes, .accepted(wake: []))
        case (.recordOnly, _):
            return .write(writes, .accepted(wake: []))
        default:
            preconditionFailure("an ingest decided from what another lookup found: \(lookup(record)) answered by \(found)")
        }
    }

    /// A capture request for `order` (nil: not tracked), asked by `requestedBy` (`the command line`, `socket`, …).
    public static func captureRequest(orderID: String, amount: Int?, order: TrackedOrder?, requestedBy: String) -> CaptureRequestDecision {
        guard let order else { return .unknownOrder }
        if let refusal = order.captureRequestRefusal { return .refused(refusal) }
        let what = amount.map { "capture of \($0) requested by \(requestedBy)" } ?? "capture of the remaining amount requested by \(requestedBy)"
        var writes = IngestWrites()
        writes.captureRequest = CaptureRequestRow(
            orderID: orderID, amount: amount,
            event: NewEvent(hppSessionID: order.hppSessionID, orderID: orderID, DomainEvent(.captureRequested, what)))
        writes.wakeups = [.order(orderID)]
        return .write(writes)
    }
}

public enum CaptureRequestDecision: Sendable {
    case write(IngestWrites)
    case unknownOrder
    /// The order does not take capture requests now; why.
    case refused(String)
}
