import Engine
import Foundation
import Logging
import ReconcilerCore
import ReconcilerStore
import Telemetry

/// The one path every delivery takes, from the socket or the spool: read and verify, then commit with its dedupe
/// key, then wake the engine. The caller acknowledges only after ``ingest(_:source:)`` returns `accepted`.
public struct Ingestor: Sendable {
    public struct Answer: Sendable, Equatable {
        public let status: Int
        /// `accepted`, `repeat`, or the error word of a refusal.
        public let word: String
        public let detail: String

        public var accepted: Bool { status == 202 }
    }

    /// What a reload may change: the keys and policy deliveries are verified with, the default capture policy.
    public struct Rules: Sendable {
        public var reader: WebhookReader
        public var defaultCapturePolicy: CapturePolicy

        public init(reader: WebhookReader, defaultCapturePolicy: CapturePolicy) {
            self.reader = reader
            self.defaultCapturePolicy = defaultCapturePolicy
        }
    }

    private let rules: Live<Rules>
    let store: any IngestStore
    let clock: any WallClock
    let logger: Logger
    /// Hands keys with new work to the running engine at once (the wakeups table is the durable fallback).
    let wake: @Sendable ([WorkKey]) async -> Void
    /// Rung after a dispute hint is recorded: the dispute service reads its hints at once (the hint rows are the
    /// durable fallback, read at every sync).
    let disputeBell: Doorbell?

    public init(
        reader: WebhookReader, store: any IngestStore, defaultCapturePolicy: CapturePolicy, clock: any WallClock,
        logger: Logger, disputeBell: Doorbell? = nil, wake: @escaping @Sendable ([WorkKey]) async -> Void
    ) {
        self.init(
            rules: Rules(reader: reader, defaultCapturePolicy: defaultCapturePolicy), store: store, clock: clock, logger: logger,
            disputeBell: disputeBell, wake: wake)
    }

    public init(
        rules: Rules, store: any IngestStore, clock: any WallClock, logger: Logger, disputeBell: Doorbell? = nil,
        wake: @escaping @Sendable ([WorkKey]) async -> Void
    ) {
        self.rules = Live(rules)
        self.store = store
        self.clock = clock
        self.logger = logger
        self.disputeBell = disputeBell
        self.wake = wake
    }

    /// Takes new keys and policies (configuration reload) for every delivery from now on.
    public func update(_ rules: Rules) { self.rules.replace(with: rules) }

    public func ingest(_ delivery: Delivery, source: String) async -> Answer {
        let answer = await take(delivery, source: source)
        Self.count(source: source, answer.accepted ? answer.word : nil, refusedFor: answer.word)
        return answer
    }

    /// Deliveries found together (the spool's files), committed together in the order given: one answer each, in
    /// order. A delivery the store did not record (it failed, all at once or part way) is a 503.
    public func ingest(_ deliveries: [(delivery: Delivery, source: String)]) async -> [Answer] {
        let now = clock.now
        let rules = self.rules.value
        var answers = [Answer?](repeating: nil, count: deliveries.count)
        var taken: [(index: Int, record: IngestRecord, warning: String?)] = []
        for (index, (delivery, source)) in deliveries.enumerated() {
            switch verified(delivery, source: source, rules: rules, now: now) {
            case .success(let (record, warning)): taken.append((index, record, warning))
            case .failure(let rejection): answers[index] = await recordRefusal(rejection, source: source, at: now)
            }
        }
        do {
            // Results for those recorded, in order; any after them were not (the store failed part way).
            let results = taken.isEmpty ? [] : try await store.ingest(taken.map(\.record), at: now)
            for (item, result) in zip(taken, results) {
                answers[item.index] = await conclude(item.record, warning: item.warning, result, source: deliveries[item.index].source, at: now)
            }
        } catch {
            for item in taken { answers[item.index] = storeFailed(error, source: deliveries[item.index].source) }
        }
        return zip(deliveries, answers).map { pair in
            let answer = pair.1 ?? storeFailed(nil, source: pair.0.source)
            Self.count(source: pair.0.source, answer.accepted ? answer.word : nil, refusedFor: answer.word)
            return answer
        }
    }

    /// A request refused before it became a delivery (an unknown route, a wrong method on a known one): logged,
    /// recorded in the store and counted like every other refusal.
    public func refuse(_ rejection: Rejection, source: String) async -> Answer {
        let answer = await recordRefusal(rejection, source: source, at: clock.now)
        Self.count(source: source, nil, refusedFor: answer.word)
        return answer
    }

    /// Logs a refusal and records it in the store (`status` counts the last day's and shows the last one).
    private func recordRefusal(_ rejection: Rejection, source: String, at now: Date) async -> Answer {
        logger.warning(
            "refused a delivery from \(source): \(rejection)",
            metadata: [
                "source": .string(source), "error": .string(rejection.error), MessageID.metadataKey: .string(MessageID.deliveryRefused.rawValue),
            ])
        try? await store.recordRejection(source: source, status: rejection.status, error: rejection.error, detail: rejection.detail, at: now)
        return Answer(status: rejection.status, word: rejection.error, detail: rejection.detail)
    }

    /// A delivery in the metrics: `result` is `accepted` or `repeat`, `nil` for a refusal for `reason` (also the
    /// spool files refused before they reach here).
    static func count(source: String, _ result: String?, refusedFor reason: String) {
        let from = source.hasPrefix("spool") ? "spool" : "socket"
        Telemetry.count(.deliveries, ("source", from), ("result", result ?? "refused"))
        if result == nil { Telemetry.count(.refusals, ("source", from), ("reason", reason)) }
    }

    private func take(_ delivery: Delivery, source: String) async -> Answer {
        let now = clock.now
        let (record, warning): (IngestRecord, String?)
        switch verified(delivery, source: source, rules: rules.value, now: now) {
        case .success(let taken): (record, warning) = taken
        case .failure(let rejection): return await recordRefusal(rejection, source: source, at: now)
        }
        do {
            return await conclude(record, warning: warning, try await store.ingest(record, at: now), source: source, at: now)
        } catch {
            return storeFailed(error, source: source)
        }
    }

    /// The delivery read and verified, as the record the store takes, or why it is refused.
    private func verified(_ delivery: Delivery, source: String, rules: Rules, now: Date) -> Result<(IngestRecord, String?), Rejection> {
        do {
            let (webhook, warning) = try rules.reader.read(delivery)
            return .success(
                (Self.record(webhook, warning: warning, source: source, defaultCapturePolicy: rules.defaultCapturePolicy, now: now), warning))
        } catch {
            return .failure(error)
        }
    }

    /// The store could not take it: 503, so the sender (or the spool's rescan) tries again. `error`: what failed.
    private func storeFailed(_ error: (any Error)?, source: String) -> Answer {
        logger.error("cannot record a delivery from \(source): \(error.map { "\($0)" } ?? "not recorded")", metadata: ["source": .string(source)])
        return Answer(status: 503, word: "store_unavailable", detail: "the delivery could not be stored durably; send it again")
    }

    /// What the store's result means for the sender, logged, and the engine woken for what has work now.
    private func conclude(_ record: IngestRecord, warning: String?, _ result: IngestResult, source: String, at now: Date) async -> Answer {
        switch result {
        case .accepted(let keys):
            logger.info("\(record.summary)", metadata: ["source": .string(source), "kind": .string(record.kind)])
            if let warning { logger.warning("\(warning)", metadata: ["source": .string(source)]) }
            await wake(keys)
            if case .hintDispute = record.action { disputeBell?.ring() }
            return Answer(status: 202, word: "accepted", detail: record.summary)
        case .repeated(let firstSeen):
            logger.info("repeat of a delivery first seen \(firstSeen.formatted(.iso8601)): \(record.summary)", metadata: ["source": .string(source)])
            return Answer(status: 202, word: "repeat", detail: "already received at \(firstSeen.formatted(.iso8601))")
        case .refused(let status, let error, let detail):
            return await recordRefusal(Rejection(status, error, detail), source: source, at: now)
        }
    }

    static func record(_ webhook: Webhook, warning: String?, source: String, defaultCapturePolicy: CapturePolicy, now: Date) -> IngestRecord {
        let action: IngestRecord.Action
        let summary: String
        switch webhook {
        case .hppStatus(let eventID, let hppSessionID, let kpSessionID, let status):
            summary = "HPP status callback \(status ?? "?") (event \(eventID)) for HPP session \(hppSessionID)"
            // Only a verified callback may start tracking: it binds the HPP session to its KP session.
            let newSession = (warning == nil ? kpSessionID : nil).map {
                TrackedSession(
                    hppSessionID: hppSessionID, kpSessionID: $0, mode: nil, merchantReference: nil,
                    capturePolicy: defaultCapturePolicy, purpose: .buy, trackedAt: now)
            }
            action = .hintSession(hppSessionID: hppSessionID, trackIfUnknown: newSession)
        case .kpAuthorization(let kpSessionID, let tail, _):
            summary = "KP authorization callback for KP session \(kpSessionID) (token …\(tail))"
            action = .hintSessionsOfPayment(kpSessionID: kpSessionID)
        case .omNotification(let orderID, let eventType):
            summary = "OM notification \(eventType) for order \(orderID)"
            action = .hintOrder(orderID: orderID)
        case .klarnaDispute(let eventID, let eventType, let disputeID, let orderID):
            summary = "Klarna dispute webhook \(eventType) (event \(eventID)) for dispute \(disputeID) of order \(orderID ?? "?")"
            // A hint: the dispute service reads the dispute before anything is recorded of it.
            action = .hintDispute(disputeID: disputeID)
        case .klarnaNetwork(let eventID, let eventType, let paymentRequestID, let state):
            summary =
                "Klarna Network \(eventType) (event \(eventID)) for \(paymentRequestID ?? "an unnamed payment request") in state \(state ?? "?")"
            // Signed, so it may start following the payment request; the engine reads it before any outcome.
            action = paymentRequestID.map { .hintPaymentRequest(TrackedPaymentRequest(paymentRequestID: $0, trackedAt: now)) } ?? .recordOnly
        case .track(let request):
            summary =
                "tracking requested over \(source) (mode \(request.mode?.rawValue ?? "inferred"), capture \((request.capture ?? defaultCapturePolicy).rawValue), intent \(request.purpose.rawValue))"
            action = .track(
                TrackedSession(
                    hppSessionID: request.hppSessionID, kpSessionID: request.kpSessionID, mode: request.mode,
                    merchantReference: request.merchantReference, capturePolicy: request.capture ?? defaultCapturePolicy,
                    purpose: request.purpose, trackedAt: now))
        case .capture(let orderID, let amount, _):
            summary = "capture of \(amount.map(String.init) ?? "the remaining amount") requested for order \(orderID)"
            action = .capture(orderID: orderID, amount: amount)
        case .refund(let ask):
            summary = "refund of \(ask.amount) requested for order \(ask.orderID), reference \(ask.reference)"
            action = .refund(ask, key: IdempotencyKey.make(.refund, ask.keyTarget))
        }
        return IngestRecord(dedupeKey: webhook.dedupeKey, kind: webhook.kind, source: source, summary: summary, warning: warning, action: action)
    }
}
