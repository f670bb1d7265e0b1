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

    /// What a reload may change: the keys and policy deliveries are verified with, the accounts and their default
    /// capture policies.
    public struct Rules: Sendable {
        public var reader: WebhookReader
        public var accounts: AccountRouting

        public init(reader: WebhookReader, accounts: AccountRouting) {
            self.reader = reader
            self.accounts = accounts
        }

        /// The default account alone, with `defaultCapturePolicy`.
        public init(reader: WebhookReader, defaultCapturePolicy: CapturePolicy) {
            self.init(reader: reader, accounts: AccountRouting([.init(id: .default, merchantID: nil, capturePolicy: defaultCapturePolicy)]))
        }
    }

    private let rules: Live<Rules>
    let store: any IngestStore
    let clock: any WallClock
    let logger: Logger
    /// Hands keys with new work to the running engine at once, with their account when the delivery names it (the
    /// wakeups table is the durable fallback).
    let wake: @Sendable ([WorkKey], AccountID?) async -> Void
    /// Rung after a dispute hint is recorded: the account's dispute service reads its hints at once (the hint rows are
    /// the durable fallback, read at every sync).
    let disputeBells: DisputeBells
    /// Under disk pressure every delivery is refused (`503 disk_full`) before it is read; `nil`: not watched.
    let disk: DiskGuard?

    public init(
        reader: WebhookReader, store: any IngestStore, defaultCapturePolicy: CapturePolicy, clock: any WallClock,
        logger: Logger, disputeBells: DisputeBells = DisputeBells(), disk: DiskGuard? = nil,
        wake: @escaping @Sendable ([WorkKey], AccountID?) async -> Void
    ) {
        self.init(
            rules: Rules(reader: reader, defaultCapturePolicy: defaultCapturePolicy), store: store, clock: clock, logger: logger,
            disputeBells: disputeBells, disk: disk, wake: wake)
    }

    public init(
        rules: Rules, store: any IngestStore, clock: any WallClock, logger: Logger, disputeBells: DisputeBells = DisputeBells(),
        disk: DiskGuard? = nil, wake: @escaping @Sendable ([WorkKey], AccountID?) async -> Void
    ) {
        self.disk = disk
        self.rules = Live(rules)
        self.store = store
        self.clock = clock
        self.logger = logger
        self.disputeBells = disputeBells
        self.wake = wake
    }

    /// Takes new keys and policies (configuration reload) for every delivery from now on.
    public func update(_ rules: Rules) { self.rules.replace(with: rules) }

    public func ingest(_ delivery: Delivery, source: String) async -> Answer {
        var answer: Answer
        if let full = diskFull() { answer = full } else { answer = await take(delivery, source: source) }
        Self.count(source: source, answer.accepted ? answer.word : nil, refusedFor: answer.word)
        return answer
    }

    /// Deliveries found together (the spool's files), committed together in the order given: one answer each, in
    /// order. A delivery the store did not record (it failed, all at once or part way) is a 503.
    public func ingest(_ deliveries: [(delivery: Delivery, source: String)]) async -> [Answer] {
        if let full = diskFull() {
            for (_, source) in deliveries { Self.count(source: source, nil, refusedFor: full.word) }
            return deliveries.map { _ in full }
        }
        let now = clock.now
        let rules = self.rules.value
        var answers = [Answer?](repeating: nil, count: deliveries.count)
        var taken: [(index: Int, record: IngestRecord, warning: String?)] = []
        for (index, (delivery, source)) in deliveries.enumerated() {
            switch await verified(delivery, source: source, rules: rules, now: now) {
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
        switch await verified(delivery, source: source, rules: rules.value, now: now) {
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
    private func verified(_ delivery: Delivery, source: String, rules: Rules, now: Date) async -> Result<(IngestRecord, String?), Rejection> {
        do {
            let (webhook, warning) = try rules.reader.read(delivery)
            let record = try Self.record(webhook, warning: warning, source: source, accounts: rules.accounts, now: now)
            if rules.accounts.accounts.count > 1, let refusal = await accountConflict(webhook, record) { return .failure(refusal) }
            return .success((record, warning))
        } catch {
            return .failure(error)
        }
    }

    /// With several accounts: a callback whose (signed) account, or a track request whose account, is not the
    /// account of the payment it names (a track request for it would otherwise be a silent repeat, and the payment
    /// read with the other account's credentials). Read before the delivery's commit; a session tracked in between
    /// is of the account that tracked it, and the delivery then only makes it read again with that account's own
    /// credentials.
    private func accountConflict(_ webhook: Webhook, _ record: IngestRecord) async -> Rejection? {
        let (account, hpp, kp): (AccountID, String?, String?)
        switch (webhook, record.action) {
        case (.hppStatus(_, let hppSessionID, _, _, let named), _): (account, hpp, kp) = (named, hppSessionID, nil)
        case (.kpAuthorization(let kpSessionID, _, _, let named), _): (account, hpp, kp) = (named, nil, kpSessionID)
        case (.track, .track(let session)): (account, hpp, kp) = (session.account, session.hppSessionID, nil)
        default: return nil
        }
        do {
            guard let owner = try await store.sessionAccount(hppSessionID: hpp, kpSessionID: kp), owner != account else { return nil }
            return Rejection(
                409, "wrong_account",
                "\(hpp.map { "HPP session \($0)" } ?? "KP session \(kp ?? "")") is account \(owner)'s; this \(webhook.kind == "track_request" ? "request" : "callback's URL") names account \(account)"
            )
        } catch {
            return Rejection(503, "store_unavailable", "the delivery's account could not be checked; send it again")
        }
    }

    /// The refusal of everything while the disk is full: `503 disk_full`, naming the directory and its free space. Not
    /// recorded in the store (the disk could not take it) nor logged one by one (the disk watch said it once); counted.
    private func diskFull() -> Answer? {
        disk?.refusal.map { Answer(status: 503, word: $0.error, detail: $0.detail) }
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
            await wake(keys, record.account)
            if case .hintDispute(let hint) = record.action { disputeBells.ring(hint.account) }
            return Answer(status: 202, word: "accepted", detail: record.summary)
        case .repeated(let firstSeen):
            logger.info("repeat of a delivery first seen \(firstSeen.formatted(.iso8601)): \(record.summary)", metadata: ["source": .string(source)])
            return Answer(status: 202, word: "repeat", detail: "already received at \(firstSeen.formatted(.iso8601))")
        case .refused(let status, let error, let detail):
            return await recordRefusal(Rejection(status, error, detail), source: source, at: now)
        }
    }

    static func record(_ webhook: Webhook, warning: String?, source: String, accounts: AccountRouting, now: Date) throws(Rejection) -> IngestRecord {
        let action: IngestRecord.Action
        let summary: String
        switch webhook {
        case .hppStatus(let eventID, let hppSessionID, let kpSessionID, let status, let named):
            // The account its URL names (the default one without): configured, or refused.
            let account = try accounts.named(named)
            summary = "HPP status callback \(status ?? "?") (event \(eventID)) for HPP session \(hppSessionID) of account \(account.id)"
            // Only a verified callback may start tracking: it binds the HPP session to its KP session and account.
            let newSession = (warning == nil ? kpSessionID : nil).map { kpSessionID in
                var session = TrackedSession(
                    hppSessionID: hppSessionID, kpSessionID: kpSessionID, mode: nil, merchantReference: nil,
                    capturePolicy: account.capturePolicy, purpose: .buy, trackedAt: now)
                session.account = account.id
                return session
            }
            action = .hintSession(hppSessionID: hppSessionID, trackIfUnknown: newSession)
        case .kpAuthorization(let kpSessionID, let tail, _, let named):
            let account = try accounts.named(named)
            summary = "KP authorization callback for KP session \(kpSessionID) (token …\(tail)) of account \(account.id)"
            action = .hintSessionsOfPayment(kpSessionID: kpSessionID)
        case .omNotification(let orderID, let eventType):
            summary = "OM notification \(eventType) for order \(orderID)"
            action = .hintOrder(orderID: orderID)
        case .klarnaDispute(let eventID, let eventType, let disputeID, let orderID, let merchantID):
            // Routed like Klarna Network's: the account Klarna names, or the only one.
            let account = try accounts.route(merchantID: merchantID)
            summary =
                "Klarna dispute webhook \(eventType) (event \(eventID)) for dispute \(disputeID) of order \(orderID ?? "?") of account \(account.id)"
            // A hint: the account's dispute service reads the dispute before anything is recorded of it.
            action = .hintDispute(DisputeHint(disputeID: disputeID, account: account.id))
        case .klarnaNetwork(let eventID, let eventType, let paymentRequestID, let state, let merchantID):
            // Routed by the account Klarna names; with one account configured, that one.
            let account = try accounts.route(merchantID: merchantID)
            summary =
                "Klarna Network \(eventType) (event \(eventID)) for \(paymentRequestID ?? "an unnamed payment request") in state \(state ?? "?") of account \(account.id)"
            // Signed, so it may start following the payment request; the engine reads it before any outcome.
            action =
                paymentRequestID.map { id in
                    var request = TrackedPaymentRequest(paymentRequestID: id, trackedAt: now)
                    request.account = account.id
                    return .hintPaymentRequest(request)
                } ?? .recordOnly
        case .track(let request):
            let account = try accounts.named(request.account)
            let capture = request.capture ?? account.capturePolicy
            summary =
                "tracking requested over \(source) (account \(account.id), mode \(request.mode?.rawValue ?? "inferred"), capture \(capture.rawValue), intent \(request.purpose.rawValue))"
            var session = TrackedSession(
                hppSessionID: request.hppSessionID, kpSessionID: request.kpSessionID, mode: request.mode,
                merchantReference: request.merchantReference, capturePolicy: capture, purpose: request.purpose, trackedAt: now)
            session.account = account.id
            action = .track(session)
        case .capture(let orderID, let amount, _):
            summary = "capture of \(amount.map(String.init) ?? "the remaining amount") requested for order \(orderID)"
            action = .capture(orderID: orderID, amount: amount)
        case .refund(let ask):
            summary = "refund of \(ask.amount) requested for order \(ask.orderID), reference \(ask.reference)"
            action = .refund(ask, key: IdempotencyKey.make(.refund, ask.keyTarget))
        case .charge(var ask):
            let account = try accounts.named(ask.account)
            ask.account = account.id
            summary =
                "charge of \(ask.amount) \(ask.currency) requested for customer token \(Redact.tail(ask.token)), reference \(ask.reference), account \(account.id)"
            action = .charge(ask, key: IdempotencyKey.make(.charge, ask.keyTarget), capture: ask.capture ?? account.capturePolicy)
        }
        return IngestRecord(dedupeKey: webhook.dedupeKey, kind: webhook.kind, source: source, summary: summary, warning: warning, action: action)
    }
}
