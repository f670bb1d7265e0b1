import Foundation
import KlarnaAPI
import Logging
import ReconcilerCore
import ReconcilerStore

/// Does the work for one session or order: reads Klarna, applies the domain rules, and performs side effects as
/// intents, committing every step before the next call. It holds no state of its own; the ``Scheduler`` makes sure
/// one key is worked on by one task at a time.
public struct Reconciler: Sendable {
    public struct WorkResult: Sendable, Equatable {
        /// When this key wants to run again; `nil` when it is finished.
        public var next: Date?
        /// Other keys that now have work (an order handed off by its session).
        public var wake: [WorkKey] = []
    }

    public let store: any ReconcilerStore
    public let client: KlarnaClient
    public let clock: any WallClock
    public let random: any RandomSource
    public let rateLimiter: RateLimiter?
    private let liveSettings: Live<EngineSettings>
    /// The tunables now; a reload replaces them between steps (``update(settings:)``).
    public var settings: EngineSettings { liveSettings.value }
    public let logger: Logger
    /// Rung after a commit that recorded outcomes, so the outbox writes them at once.
    public let outcomeBell: Doorbell?

    public init(
        store: any ReconcilerStore, client: KlarnaClient, clock: any WallClock, random: any RandomSource = SystemRandomSource(),
        rateLimiter: RateLimiter?, settings: EngineSettings, logger: Logger, outcomeBell: Doorbell? = nil
    ) {
        self.store = store
        self.client = client
        self.clock = clock
        self.random = random
        self.rateLimiter = rateLimiter
        liveSettings = Live(settings)
        self.logger = logger
        self.outcomeBell = outcomeBell
    }

    /// Takes new tunables (configuration reload); steps under way finish with the ones they started with.
    public func update(settings: EngineSettings) { liveSettings.replace(with: settings) }

    /// Works on `key` once. `hinted`: someone said something changed (a webhook, a capture request), so Klarna is
    /// read now even if the next read was planned for later.
    public func process(_ key: WorkKey, hinted: Bool = false) async throws -> WorkResult {
        switch key {
        case .session(let id): try await processSession(id, hinted: hinted)
        case .order(let id): try await processOrder(id, hinted: hinted)
        case .paymentRequest(let id): try await LogContext.about(paymentRequest: id) { try await processPaymentRequest(id, hinted: hinted) }
        }
    }

    // MARK: Sessions

    private func processSession(_ id: String, hinted: Bool) async throws -> WorkResult {
        guard let session = try await store.session(id), session.isOpen else { return WorkResult(next: nil) }
        return try await LogContext.about(session) { try await processSession(session, hinted: hinted) }
    }

    private func processSession(_ loaded: TrackedSession, hinted: Bool) async throws -> WorkResult {
        var session = loaded
        let id = session.hppSessionID
        if hinted, session.phase == .polling { session = session.hinted(now: clock.now) }
        // A session can take several steps in one turn: COMPLETED, then straight on to placing the order.
        for _ in 0..<4 {
            if let due = session.nextDueAt, !isDue(due) { return WorkResult(next: due) }
            switch session.phase {
            case .polling:
                let (next, handOff) = try await poll(session)
                if let handOff { return WorkResult(next: nil, wake: [.order(handOff)]) }
                guard let next, next.phase == .authorized else { return WorkResult(next: next?.isOpen == true ? next?.nextDueAt : nil) }
                session = next
            case .authorized:
                let result = try await advanceAuthorized(session)
                guard result.wake.isEmpty, let next = try await store.session(id), next.isOpen, next.nextDueAt.map(isDue) == true else {
                    return result
                }
                session = next
            case .ordered, .closed:
                return WorkResult(next: nil)
            }
        }
        return WorkResult(next: session.nextDueAt)
    }

    /// Reads the HPP session once and commits what it says. Returns the new session, or the order it handed off to.
    private func poll(_ session: TrackedSession) async throws -> (TrackedSession?, String?) {
        let now = clock.now
        var change = Change()
        let step: SessionStep
        var detail: [String: String] = [:]
        switch try await klarna(&change, { try await client.readHPPSession(id: session.hppSessionID) }) {
        case .success(let hpp):
            step = session.applying(
                .session(status: hpp.status.rawValue, updatedAt: hpp.updatedAt, expiresAt: hpp.expiresAt,
                         authorizationToken: hpp.authorizationToken, orderID: hpp.orderID, klarnaReference: hpp.klarnaReference),
                now: now, schedule: settings.polling)
        case .failure(let error) where error.status == 404:
            step = session.applying(.notFound, now: now, schedule: settings.polling)
            detail = Self.detail(error)
        case .failure(let error):
            step = session.readFailed(Self.short(error), now: now, retryAfter: readDelay(failures: session.consecutiveFailures + 1, error), schedule: settings.polling)
            detail = Self.detail(error)
        }
        record(step, into: &change, detail: detail)
        if let handOff = step.handOff {
            change.newOrders.append(TrackedOrder(
                orderID: handOff.orderID, hppSessionID: session.hppSessionID, kpSessionID: session.kpSessionID,
                merchantReference: session.merchantReference, capturePolicy: session.capturePolicy, placedBy: handOff.placedBy,
                createdAt: now))
        }
        try await commit(change, now: now)
        return (step.session, step.handOff?.orderID)
    }

    private func advanceAuthorized(_ session: TrackedSession) async throws -> WorkResult {
        if session.purpose.createsCustomerToken, session.customerTokenID == nil {
            return try await driveSessionIntent(.customerToken, session)
        }
        if session.purpose.placesOrder, session.orderID == nil {
            return try await driveSessionIntent(.placeOrder, session)
        }
        // Tokenize only, and the token exists.
        var closed = session
        closed.phase = .closed
        closed.outcome = .customerTokenCreated
        closed.nextDueAt = nil
        var change = Change()
        change.sessions = [closed]
        try await commit(change, now: clock.now)
        return WorkResult(next: nil)
    }

    /// Places the order or creates the customer token for an authorized session, exactly once.
    private func driveSessionIntent(_ kind: Intent.Kind, _ session: TrackedSession) async throws -> WorkResult {
        var now = clock.now
        let key = IdempotencyKey.make(kind, session.kpSessionID)
        var intent = try await store.intent(key) ?? Intent(key: key, kind: kind, subject: session.hppSessionID, now: now)
        var change = Change()
        var paymentSession: PaymentSession?

        if intent.isFinished {
            // A finished intent always moves its session on in the same commit; reaching here means the store was
            // edited by hand. Stop rather than guess.
            return try await closeSession(session, .needsAttention, "intent \(key) is \(intent.state.rawValue) but the session is still authorized", change: change)
        }
        if intent.needsResolution {
            guard kind == .placeOrder else {
                // Klarna has no read that shows whether a customer token was created.
                intent = intent.ambiguous(intent.lastError ?? "the daemon stopped after sending", now: now)
                change.intents = [intent]
                return try await closeSession(session, .needsAttention,
                    "a customer token may have been created for KP session \(session.kpSessionID) but the answer was lost (intent \(key)); check the Merchant Portal",
                    change: change)
            }
            switch try await klarna(&change, { try await client.readPaymentSession(id: session.kpSessionID) }) {
            case .failure(let error):
                return try await sessionReadFailed(session, error, change: change)
            case .success(let kp) where kp.status == .complete:
                intent = intent.ambiguous(intent.lastError ?? "the daemon stopped after sending", now: now)
                change.intents = [intent]
                return try await closeSession(session, .needsAttention,
                    "create-order for KP session \(session.kpSessionID) ended without an answer and the KP session is now complete: Klarna placed the order but its order_id is unknown (intent \(key), \(intent.attempts) attempt(s)); find it in the Merchant Portal by merchant reference \(session.merchantReference ?? "—")",
                    change: change)
            case .success(let kp):
                change.events.append(NewEvent(hppSessionID: session.hppSessionID, orderID: nil, DomainEvent(
                    "resolved", "KP session still incomplete after an unclear create-order: no order exists, safe to try again"), detail: ["intent": key]))
                intent = intent.retrying(nil, at: now, now: now)
                paymentSession = kp
            }
        }
        if let next = intent.nextAttemptAt, !now.hasReached(next) {
            var waiting = session
            waiting.nextDueAt = next
            change.sessions = [waiting]
            change.intents = [intent]
            try await commit(change, now: now)
            return WorkResult(next: next)
        }
        if let expiry = session.tokenExpiresAt, now.hasReached(expiry) {
            change.intents = [intent.failed("authorization token expired", now: now)]
            let lastError = intent.lastError ?? session.lastError
            let step = session.tokenExpired(now: now, detail: lastError.map { "last error: \($0)" } ?? "no attempt succeeded")
            record(step, into: &change)
            try await commit(change, now: now)
            return WorkResult(next: nil)
        }
        if paymentSession == nil {
            switch try await klarna(&change, { try await client.readPaymentSession(id: session.kpSessionID) }) {
            case .failure(let error): return try await sessionReadFailed(session, error, change: change)
            case .success(let kp): paymentSession = kp
            }
        }
        guard let kp = paymentSession, let token = session.authorizationToken else {
            return try await closeSession(session, .needsAttention, "authorized session has no authorization token", change: change)
        }
        if kind == .placeOrder, kp.status == .complete {
            change.intents = [intent.failed("KP session already complete before the first attempt", now: now)]
            return try await closeSession(session, .needsAttention,
                "KP session \(session.kpSessionID) was already complete before this daemon placed an order: an order was placed for it elsewhere",
                change: change)
        }

        // Persist "sent" before the request leaves: a crash from here on is resolved by reading Klarna first.
        intent = intent.sending(now: now)
        change.intents = [intent]
        change.events.append(NewEvent(hppSessionID: session.hppSessionID, orderID: nil, DomainEvent(
            "attempt", "\(kind == .placeOrder ? "placing the order" : "creating the customer token"), attempt \(intent.attempts)"),
            detail: ["intent": key, "attempt": "\(intent.attempts)"]))
        try await commit(change, now: now)
        change = Change()

        switch kind {
        case .placeOrder:
            let order = CreateOrderRequest(session: kp, merchantReference: session.merchantReference)
            let result = try await klarna(&change, { try await client.createOrder(authorizationToken: token, order: order, idempotencyKey: key) })
            now = clock.now
            switch result {
            case .success(let created):
                change.intents = [intent.confirmed(result: created.orderID, now: now)]
                var placed = session
                placed.orderID = created.orderID
                placed.phase = .ordered
                placed.nextDueAt = nil
                change.sessions = [placed]
                change.events.append(NewEvent(hppSessionID: session.hppSessionID, orderID: created.orderID, DomainEvent(
                    "order_placed", "order \(created.orderID) placed, fraud_status \(created.fraudStatus)"), detail: ["intent": key, "attempt": "\(intent.attempts)"]))
                change.newOrders = [TrackedOrder(
                    orderID: created.orderID, hppSessionID: session.hppSessionID, kpSessionID: session.kpSessionID,
                    merchantReference: session.merchantReference, capturePolicy: session.capturePolicy, placedBy: .none, createdAt: now)]
                try await commit(change, now: now)
                return WorkResult(next: nil, wake: [.order(created.orderID)])
            case .failure(let error):
                return try await sessionIntentFailed(session, intent, error, change: change)
            }
        case .customerToken:
            let request = CustomerTokenRequest(
                purchaseCountry: kp.purchaseCountry, purchaseCurrency: kp.purchaseCurrency, locale: kp.locale ?? "en-US",
                description: settings.customerTokenDescription)
            let result = try await klarna(&change, { try await client.createCustomerToken(authorizationToken: token, request: request, idempotencyKey: key) })
            now = clock.now
            switch result {
            case .success(let created):
                change.intents = [intent.confirmed(result: created.tokenID, now: now)]
                var next = session
                next.customerTokenID = created.tokenID
                next.nextDueAt = now
                if session.purpose == .tokenize {
                    next.phase = .closed
                    next.outcome = .customerTokenCreated
                    next.nextDueAt = nil
                }
                change.sessions = [next]
                let reason = "customer token \(Redact.tail(created.tokenID)) created"
                change.events.append(NewEvent(hppSessionID: session.hppSessionID, orderID: nil, DomainEvent("customer_token_created", reason), detail: ["intent": key]))
                change.outcomes = [next.outcome(.customerTokenCreated, reason)]
                try await commit(change, now: now)
                return WorkResult(next: next.nextDueAt)
            case .failure(let error):
                return try await sessionIntentFailed(session, intent, error, change: change)
            }
        default:
            preconditionFailure("\(kind) is not a session intent")
        }
    }

    private func sessionIntentFailed(_ session: TrackedSession, _ intent: Intent, _ error: KlarnaAPIError, change: Change) async throws -> WorkResult {
        var change = change
        let now = clock.now
        let detail = Self.detail(error).merging(["intent": intent.key, "attempt": "\(intent.attempts)"]) { $1 }
        switch verdict(intent, error, now: now, deadline: session.tokenExpiresAt) {
        case .tryAgain(let next, let at, let event):
            change.intents = [next]
            var waiting = session
            waiting.nextDueAt = at
            waiting.lastError = Self.short(error)
            change.sessions = [waiting]
            change.events.append(NewEvent(hppSessionID: session.hppSessionID, orderID: nil, event, detail: detail))
            try await commit(change, now: now)
            return WorkResult(next: at)
        case .giveUp(let failed, let reason):
            change.intents = [failed]
            let kind: OutcomeKind
            let why: String
            switch (error.status, error.errorCode) {
            case (404, _):
                kind = .expired
                why = "Klarna refused the authorization token (\(Self.short(error))): it expired or was released"
            case (403, "REJECTED"):
                kind = .rejected
                why = "Klarna rejected the \(intent.kind == .placeOrder ? "order" : "customer token") (\(Self.short(error)))"
            default:
                kind = .needsAttention
                why = "\(intent.kind.rawValue) failed: \(Self.short(error)); \(reason)"
            }
            change.events.append(NewEvent(hppSessionID: session.hppSessionID, orderID: nil, DomainEvent("failed", why), detail: detail))
            return try await closeSession(session, kind, why, change: change)
        }
    }

    enum Verdict {
        /// Ambiguous (read Klarna first) or plainly failed but retryable: the intent as it now stands and when to
        /// come back.
        case tryAgain(Intent, at: Date, event: DomainEvent)
        /// Not retryable, or out of attempts: the intent as it ends (failed, or still ambiguous when nobody knows
        /// whether it happened) and why.
        case giveUp(Intent, reason: String)
    }

    /// What a failed side-effect call means for its intent. An unclear answer makes it ambiguous (the next step reads
    /// Klarna before anything else); a clear, retryable failure schedules the same key again with backoff, never
    /// past `deadline`; anything else gives up.
    func verdict(_ intent: Intent, _ error: KlarnaAPIError, now: Date, deadline: Date?) -> Verdict {
        let what = "\(intent.kind.rawValue) attempt \(intent.attempts)"
        func capped(_ delay: Duration) -> Date {
            let at = now.addingTimeInterval(delay.timeInterval)
            return deadline.map { min(at, $0) } ?? at
        }
        if error.outcomeUnknown {
            // Each unclear attempt is resolved by a read before the next; still, an answer that never comes must
            // end as an outcome, not as retries forever.
            guard intent.attempts < settings.writeRetry.maxAttempts else {
                return .giveUp(intent.ambiguous(Self.short(error), now: now), reason: "no clear answer after \(intent.attempts) attempts")
            }
            let at = capped(Duration(timeInterval: settings.writeRetry.backoffCeiling(afterAttempt: intent.attempts).timeInterval * random.nextUnit()))
            return .tryAgain(intent.ambiguous(Self.short(error), now: now), at: at, event: DomainEvent(
                "ambiguous", "\(what) ended without a clear answer (\(Self.short(error))); reading Klarna before anything else"))
        }
        let decision = settings.writeRetry.decide(
            afterAttempt: intent.attempts, elapsed: Duration(timeInterval: now.timeIntervalSince(intent.createdAt)),
            disposition: error.retryDisposition, random: random)
        switch decision {
        case .retry(let delay):
            let at = capped(delay)
            return .tryAgain(intent.retrying(Self.short(error), at: at, now: now), at: at, event: DomainEvent(
                "retry", "\(what) failed (\(Self.short(error))); retrying in \(TrackedSession.seconds(Duration(timeInterval: at.timeIntervalSince(now))))\(intent.kind.klarnaDeduplicates ? " with the same idempotency key" : "")"))
        case .giveUp(let reason):
            return .giveUp(intent.failed(Self.short(error), now: now), reason: reason.description)
        }
    }

    private func sessionReadFailed(_ session: TrackedSession, _ error: KlarnaAPIError, change: Change) async throws -> WorkResult {
        var change = change
        let now = clock.now
        let step = session.readFailed(Self.short(error), now: now, retryAfter: readDelay(failures: session.consecutiveFailures + 1, error), schedule: settings.polling)
        record(step, into: &change, detail: Self.detail(error))
        try await commit(change, now: now)
        return WorkResult(next: step.session.nextDueAt)
    }

    private func closeSession(_ session: TrackedSession, _ kind: OutcomeKind, _ reason: String, change: Change) async throws -> WorkResult {
        var change = change
        record(session.closed(kind, reason), into: &change)
        try await commit(change, now: clock.now)
        return WorkResult(next: nil)
    }

    // MARK: Orders

    private func processOrder(_ id: String, hinted: Bool) async throws -> WorkResult {
        guard let order = try await store.order(id), order.isOpen else { return WorkResult(next: nil) }
        return try await LogContext.about(order) { try await processOrder(order, hinted: hinted) }
    }

    private func processOrder(_ loaded: TrackedOrder, hinted: Bool) async throws -> WorkResult {
        var order = loaded
        let id = order.orderID
        if hinted, order.activeIntent == nil { order = order.hinted(now: clock.now) }
        if let key = order.activeIntent, let intent = try await store.intent(key), !intent.isFinished {
            return try await driveOrderIntent(order, intent)
        }
        if let due = order.nextDueAt, !isDue(due) { return WorkResult(next: due) }
        var change = Change()
        let result = try await klarna(&change, { try await client.readOrder(id: id) })
        let now = clock.now
        let read: KlarnaAPI.Order
        switch result {
        case .failure(let error) where error.status == 404:
            record(order.closed(.needsAttention, "Klarna does not know order \(id) (\(Self.short(error)))"), into: &change, detail: Self.detail(error))
            try await commit(change, now: now)
            return WorkResult(next: nil)
        case .failure(let error):
            let step = order.readFailed(Self.short(error), now: now, retryAfter: readDelay(failures: order.consecutiveFailures + 1, error))
            record(step, into: &change, detail: Self.detail(error))
            try await commit(change, now: now)
            return WorkResult(next: step.order.nextDueAt)
        case .success(let value):
            read = value
        }
        let request = order.capturePolicy == .onRequest ? try await store.oldestCaptureRequest(orderID: id) : nil
        var step = order.applying(Self.observation(read), request: request, now: now, deadlines: settings.deadlines)

        var intent: Intent?
        switch step.action {
        case nil:
            break
        case .refuseRequest(let requestID, let reason):
            change.finishedCaptureRequests.append((requestID, "refused", reason))
            step.events.append(DomainEvent("capture_refused", reason))
        case .capture(let amount, let requestID):
            let target = requestID.map { id in "\(order.orderID):request-\(id)-\(request.map { Int($0.requestedAt.timeIntervalSince1970 * 1_000) } ?? 0)" } ?? "\(order.orderID):full"
            let key = IdempotencyKey.make(.capture, target)
            if let existing = try await store.intent(key), existing.isFinished {
                if let requestID { change.finishedCaptureRequests.append((requestID, "refused", "an earlier capture with this key ended \(existing.state.rawValue)")) }
                let reason = "Klarna still shows \(read.remainingAuthorizedAmount) to capture but capture \(key) already ended \(existing.state.rawValue): \(existing.lastError ?? "")"
                step = step.order.closed(.needsAttention, reason).merging(before: step)
            } else {
                intent = try await store.intent(key) ?? Intent(
                    key: key, kind: .capture, subject: order.orderID, amount: amount,
                    expectedCapturedTotal: read.capturedAmount + amount, captureRequestID: requestID, now: now)
                step.order.activeIntent = key
            }
        case .extendAuthorization:
            let day = read.expiresAt.map { KlarnaJSON.formatDate($0).prefix(10) } ?? "unknown"
            let key = IdempotencyKey.make(.extendAuthorization, "\(order.orderID):\(day)")
            if try await store.intent(key) == nil {
                intent = Intent(key: key, kind: .extendAuthorization, subject: order.orderID, now: now)
                step.order.activeIntent = key
                step.order.nextDueAt = now
            }
        }
        record(step, into: &change)
        if let intent { change.intents.append(intent) }
        try await commit(change, now: now)
        if let intent { return try await driveOrderIntent(step.order, intent) }
        return WorkResult(next: step.order.isOpen ? step.order.nextDueAt : nil)
    }

    /// Captures or extends the authorization, exactly once per key.
    private func driveOrderIntent(_ order: TrackedOrder, _ intent: Intent) async throws -> WorkResult {
        var intent = intent
        var change = Change()
        var now = clock.now
        if intent.needsResolution {
            switch try await klarna(&change, { try await client.readOrder(id: order.orderID) }) {
            case .failure(let error):
                let step = order.readFailed(Self.short(error), now: now, retryAfter: readDelay(failures: order.consecutiveFailures + 1, error))
                record(step, into: &change, detail: Self.detail(error))
                try await commit(change, now: now)
                return WorkResult(next: step.order.nextDueAt)
            case .success(let read):
                let done: Bool = switch intent.kind {
                case .capture: read.capturedAmount >= (intent.expectedCapturedTotal ?? .max)
                default: read.expiresAt.map { new in order.expiresAt.map { new > $0 } ?? true } ?? false
                }
                if done {
                    let captureID = intent.kind == .capture ? read.captures.last?.captureID : nil
                    change.events.append(NewEvent(hppSessionID: order.hppSessionID, orderID: order.orderID, DomainEvent(
                        "resolved", "Klarna's order shows the \(intent.kind.rawValue) was done"), detail: ["intent": intent.key]))
                    return try await orderIntentSucceeded(order, intent, captureID: captureID, change: change)
                }
                change.events.append(NewEvent(hppSessionID: order.hppSessionID, orderID: order.orderID, DomainEvent(
                    "resolved", "Klarna's order shows no \(intent.kind.rawValue) yet: sending again with the same idempotency key"), detail: ["intent": intent.key]))
                intent = intent.retrying(nil, at: now, now: now)
            }
        }
        if let next = intent.nextAttemptAt, !now.hasReached(next) {
            var waiting = order
            waiting.nextDueAt = next
            change.orders = [waiting]
            change.intents = [intent]
            try await commit(change, now: now)
            return WorkResult(next: next)
        }
        intent = intent.sending(now: now)
        change.intents = [intent]
        let what = intent.kind == .capture ? "capturing \(intent.amount ?? 0)" : "extending the authorization"
        change.events.append(NewEvent(hppSessionID: order.hppSessionID, orderID: order.orderID, DomainEvent("attempt", "\(what), attempt \(intent.attempts)"),
                                      detail: ["intent": intent.key, "attempt": "\(intent.attempts)"]))
        try await commit(change, now: now)
        change = Change()

        let key = intent.key
        let result: Result<String?, KlarnaAPIError>
        if intent.kind == .capture {
            let request = CaptureRequest(capturedAmount: intent.amount ?? 0, reference: order.merchantReference)
            result = try await klarna(&change, { try await client.createCapture(orderID: order.orderID, request: request, idempotencyKey: key).captureID }).map { Optional($0) }
        } else {
            result = try await klarna(&change, { try await client.extendAuthorizationTime(orderID: order.orderID, idempotencyKey: key) }).map { nil }
        }
        now = clock.now
        switch result {
        case .success(let captureID):
            return try await orderIntentSucceeded(order, intent, captureID: captureID, change: change)
        case .failure(let error):
            let detail = Self.detail(error).merging(["intent": key, "attempt": "\(intent.attempts)"]) { $1 }
            var waiting = order
            switch verdict(intent, error, now: now, deadline: nil) {
            case .tryAgain(let next, let at, let event):
                change.intents = [next]
                waiting.nextDueAt = at
                change.orders = [waiting]
                change.events.append(NewEvent(hppSessionID: order.hppSessionID, orderID: order.orderID, event, detail: detail))
                try await commit(change, now: now)
                return WorkResult(next: at)
            case .giveUp(let failed, let reason):
                change.intents = [failed]
                if let requestID = intent.captureRequestID {
                    change.finishedCaptureRequests.append((requestID, "refused", Self.short(error)))
                }
                waiting.activeIntent = nil
                if intent.kind == .extendAuthorization || error.status == 403 {
                    // Klarna said no for a reason the order shows (cancelled, expired, over-capture, not extendable):
                    // read it and let the order rules decide.
                    waiting.phase = .checking
                    waiting.nextDueAt = now
                    change.orders = [waiting]
                    change.events.append(NewEvent(hppSessionID: order.hppSessionID, orderID: order.orderID, DomainEvent(
                        "refused", "Klarna refused the \(intent.kind.rawValue) (\(Self.short(error))); reading the order"), detail: detail))
                    try await commit(change, now: now)
                    return WorkResult(next: now)
                }
                record(waiting.closed(.needsAttention, "\(intent.kind.rawValue) failed: \(Self.short(error)); \(reason)"), into: &change, detail: detail)
                try await commit(change, now: now)
                return WorkResult(next: nil)
            }
        }
    }

    private func orderIntentSucceeded(_ order: TrackedOrder, _ intent: Intent, captureID: String?, change: Change) async throws -> WorkResult {
        var change = change
        let now = clock.now
        change.intents = [intent.confirmed(result: captureID, now: now)]
        var step: OrderStep
        if intent.kind == .capture {
            step = order.captureConfirmed(amount: intent.amount ?? 0, captureID: captureID, now: now)
            if let requestID = intent.captureRequestID { change.finishedCaptureRequests.append((requestID, "done", "captured \(intent.amount ?? 0)")) }
        } else {
            var next = order
            next.phase = .checking
            next.nextDueAt = now
            step = OrderStep(order: next, events: [DomainEvent("authorization_extended", "Klarna extended the authorization")])
        }
        step.order.activeIntent = nil
        record(step, into: &change, detail: ["intent": intent.key, "attempt": "\(intent.attempts)"])
        try await commit(change, now: now)
        return WorkResult(next: step.order.isOpen ? step.order.nextDueAt : nil)
    }

    // MARK: Klarna Network payment requests

    private func processPaymentRequest(_ id: String, hinted: Bool) async throws -> WorkResult {
        guard var request = try await store.paymentRequest(id), request.isOpen else { return WorkResult(next: nil) }
        if hinted { request = request.hinted(now: clock.now) }
        if let due = request.nextDueAt, !isDue(due) { return WorkResult(next: due) }
        var change = Change()
        let result = try await klarna(&change, { try await client.readPaymentRequest(id: id) })
        let now = clock.now
        let step: TrackedPaymentRequest.Step
        switch result {
        case .success(let read):
            step = request.applying(
                state: read.state.rawValue, expiresAt: read.expiresAt, sessionToken: read.klarnaNetworkSessionToken, now: now,
                recheck: settings.polling.maxInterval)
        case .failure(let error) where error.status == 404:
            // Klarna deletes payment requests when they expire.
            step = request.applying(state: "EXPIRED", expiresAt: nil, sessionToken: nil, now: now, recheck: settings.polling.maxInterval)
        case .failure(let error):
            step = request.readFailed(Self.short(error), now: now, retryAfter: readDelay(failures: request.consecutiveFailures + 1, error), grace: settings.polling.expiryGrace)
        }
        change.paymentRequests = [step.request]
        if let outcome = step.outcome { change.outcomes = [outcome] }
        for event in step.events {
            EventLog.log(event, metadata: ["payment_request_id": .string(id)], logger: logger)
        }
        try await commit(change, now: now)
        return WorkResult(next: step.request.isOpen ? step.request.nextDueAt : nil)
    }

    // MARK: Plumbing

    private func isDue(_ date: Date) -> Bool { clock.now.hasReached(date) }

    /// One Klarna call under the shared rate budget; a 429's hint pauses everyone. Records health for `status`.
    private func klarna<T: Sendable>(_ change: inout Change, _ call: () async throws -> T) async throws -> Result<T, KlarnaAPIError> {
        if let rateLimiter { _ = try await rateLimiter.acquire() }
        do {
            let value = try await call()
            change.health.append(("klarna_ok", ""))
            return .success(value)
        } catch let error as KlarnaAPIError {
            if error.status == 429, let hint = error.rateLimit.hint, let rateLimiter { rateLimiter.pause(for: hint) }
            if error.status != 404 { change.health.append(("klarna_error", Self.short(error))) }
            return .failure(error)
        }
    }

    private func readDelay(failures: Int, _ error: KlarnaAPIError) -> Duration {
        var hint: Duration?
        if case .retry(let notBefore) = error.retryDisposition { hint = notBefore }
        let attempt = min(failures, settings.readRetry.maxAttempts - 1)
        switch settings.readRetry.decide(afterAttempt: max(1, attempt), elapsed: .zero, disposition: .retry(notBefore: hint), random: random) {
        case .retry(let delay): return max(delay, .milliseconds(100))
        case .giveUp: return settings.readRetry.maxDelay
        }
    }

    private func record(_ step: SessionStep, into change: inout Change, detail: [String: String] = [:]) {
        change.sessions.append(step.session)
        for event in step.events {
            change.events.append(NewEvent(hppSessionID: step.session.hppSessionID, orderID: step.session.orderID, event, detail: detail))
        }
        if let outcome = step.outcome { change.outcomes.append(outcome) }
    }

    private func record(_ step: OrderStep, into change: inout Change, detail: [String: String] = [:]) {
        change.orders.append(step.order)
        for event in step.events {
            change.events.append(NewEvent(hppSessionID: step.order.hppSessionID, orderID: step.order.orderID, event, detail: detail))
        }
        change.outcomes += step.outcomes
    }

    /// How long a step keeps trying to commit before it gives up (and the worker retries the key later).
    static let commitPatience: Duration = .seconds(60)

    /// Commits `change`; a failed commit (full disk, I/O error, a store locked too long) is retried with backoff in
    /// real time, because after a Klarna call its result exists only in memory until it is recorded.
    private func commit(_ change: Change, now: Date) async throws {
        let started = ContinuousClock.now
        var delay = Duration.milliseconds(100)
        while true {
            do {
                try await store.commit(change, at: now)
                break
            } catch {
                guard ContinuousClock.now - started < Self.commitPatience else { throw error }
                logger.error("cannot record a step in the store (\(error)); trying again in \(delay)")
                try await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(5))
            }
        }
        EventLog.log(change, logger: logger)
        if !change.outcomes.isEmpty { outcomeBell?.ring() }
    }

    static func observation(_ order: KlarnaAPI.Order) -> OrderObservation {
        OrderObservation(
            status: order.status.rawValue, fraudStatus: order.fraudStatus.rawValue, orderAmount: order.orderAmount,
            capturedAmount: order.capturedAmount, remainingAuthorizedAmount: order.remainingAuthorizedAmount,
            currency: order.purchaseCurrency, expiresAt: order.expiresAt, klarnaReference: order.klarnaReference)
    }

    /// The error in one line without the local request id (that is in `detail`).
    static func short(_ error: KlarnaAPIError) -> String {
        var parts: [String] = []
        switch error.failure {
        case .http(let status): parts.append("HTTP \(status)")
        case .transport(let transport): parts.append(transport.description)
        case .undecodableResponse(let status, let detail): parts.append("unreadable HTTP \(status) answer: \(detail)")
        }
        if let code = error.errorCode { parts.append(code) }
        if let message = error.errorMessages.first { parts.append(message) }
        return parts.joined(separator: " ")
    }

    static func detail(_ error: KlarnaAPIError) -> [String: String] {
        var detail = ["request_id": error.requestID, "klarna_operation": error.operation.name]
        if let status = error.status { detail["http_status"] = "\(status)" }
        if let code = error.errorCode { detail["error_code"] = code }
        if let correlation = error.klarnaCorrelationID { detail["klarna_correlation_id"] = correlation }
        return detail
    }
}

extension OrderStep {
    /// This step's outcome-closing result, keeping the events and outcomes of `earlier` (the read that led to it).
    func merging(before earlier: OrderStep) -> OrderStep {
        var merged = self
        merged.events = earlier.events + events
        merged.outcomes = earlier.outcomes + outcomes
        return merged
    }
}
