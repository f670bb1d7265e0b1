import Foundation

/// One HPP session the daemon follows until it is final, and what the daemon did about it.
public struct TrackedSession: Codable, Sendable, Equatable {
    public enum Phase: String, Codable, Sendable, CaseIterable {
        /// Reading the HPP session until its status is final.
        case polling
        /// `COMPLETED` with an authorization token: the order (and/or customer token) is ours to create.
        case authorized
        /// The order exists; its ``TrackedOrder`` carries on.
        case ordered
        /// Finished with an outcome.
        case closed
    }

    public var hppSessionID: String
    public var kpSessionID: String
    /// `nil` until known: inferred from what HPP returns on `COMPLETED`.
    public var mode: PlaceOrderMode?
    public var merchantReference: String?
    public var capturePolicy: CapturePolicy
    public var purpose: PaymentPurpose
    public var phase: Phase
    public var hppStatus: HPPSessionStatus?
    public var hppUpdatedAt: Date?
    public var expiresAt: Date?
    public var authorizationToken: String?
    public var tokenExpiresAt: Date?
    public var orderID: String?
    public var klarnaReference: String?
    public var customerTokenID: String?
    public var outcome: OutcomeKind?
    public var trackedAt: Date
    /// Start of the current dense polling window: tracking time or the last webhook hint.
    public var pollAnchor: Date
    /// The last read that reached Klarna (`nil` before the first): routine reads are valued from it.
    public var lastReadAt: Date?
    /// The last webhook or operator hint: a session whose callbacks arrive is polled only as a safety net.
    public var lastHintAt: Date?
    public var nextDueAt: Date?
    public var reads: Int
    public var consecutiveFailures: Int
    public var lastError: String?

    /// The Klarna account whose credentials and rate budget every call for this unit uses.
    public var account: AccountID {
        get { storedAccount ?? .default }
        set { storedAccount = newValue == .default ? nil : newValue }
    }
    /// Absent for the default account, so that units written before accounts existed (and by the previous release)
    /// read as the default account's, and the default account's rows stay as they were.
    private var storedAccount: AccountID?

    public init(
        hppSessionID: String, kpSessionID: String, mode: PlaceOrderMode?, merchantReference: String?,
        capturePolicy: CapturePolicy, purpose: PaymentPurpose, trackedAt: Date
    ) {
        self.hppSessionID = hppSessionID
        self.kpSessionID = kpSessionID
        self.mode = mode
        self.merchantReference = merchantReference
        self.capturePolicy = capturePolicy
        self.purpose = purpose
        self.phase = .polling
        self.trackedAt = trackedAt
        self.pollAnchor = trackedAt
        self.nextDueAt = trackedAt
        self.reads = 0
        self.consecutiveFailures = 0
    }

    public var isOpen: Bool { phase == .polling || phase == .authorized }

    /// The deadline the session's phase runs against, for scheduling and `status`: the authorization token's expiry
    /// once authorized, the HPP session's `expires_at` while polling, none once it is done.
    public var deadline: Date? {
        switch phase {
        case .authorized: tokenExpiresAt
        case .polling: expiresAt
        case .ordered, .closed: nil
        }
    }

    /// A base outcome carrying this session's identifiers.
    public func outcome(_ kind: OutcomeKind, _ reason: String) -> Outcome {
        Outcome(
            kind: kind, reason: reason, hppSessionID: hppSessionID, kpSessionID: kpSessionID, orderID: orderID,
            merchantReference: merchantReference, customerTokenID: customerTokenID, klarnaReference: klarnaReference)
    }
}

/// What an HPP read returned, in the domain's terms.
public enum HPPObservation: Sendable, Equatable {
    case session(
        status: HPPSessionStatus, updatedAt: Date?, expiresAt: Date?, authorizationToken: String?, orderID: String?, klarnaReference: String?)
    /// `404`: "HPP session has expired or could not be found".
    case notFound
}

/// The result of applying something to a session: its new state, what to record, and what to do next.
public struct SessionStep: Sendable, Equatable {
    public var session: TrackedSession
    public var events: [DomainEvent] = []
    public var outcome: Outcome?
    /// Set when the session hands over to an order: HPP placed it (PLACE_ORDER / CAPTURE_ORDER) or the daemon did.
    public var handOff: OrderHandOff?

    public init(session: TrackedSession, events: [DomainEvent] = [], outcome: Outcome? = nil, handOff: OrderHandOff? = nil) {
        self.session = session
        self.events = events
        self.outcome = outcome
        self.handOff = handOff
    }
}

/// A new order for the order machine: found on the HPP session or placed by the daemon.
public struct OrderHandOff: Sendable, Equatable {
    public var orderID: String
    public var placedBy: PlaceOrderMode
}

extension TrackedSession {
    /// Applies one read of the HPP session at `now`.
    public func applying(_ observation: HPPObservation, now: Date, schedule: PollingSchedule) -> SessionStep {
        var session = self
        session.reads += 1
        session.lastReadAt = now
        session.consecutiveFailures = 0
        session.lastError = nil
        guard phase == .polling else {
            // Final already: later reads (or stale hints) change nothing.
            session.nextDueAt = nil
            return SessionStep(session: session)
        }
        switch observation {
        case .notFound:
            session.phase = .closed
            session.nextDueAt = nil
            if hppStatus != nil || expiresAt.map({ now >= $0 }) == true {
                session.outcome = .expired
                let reason = "HPP session expired before the consumer completed it (last status \(hppStatus?.rawValue ?? "unknown"))"
                return SessionStep(session: session, events: [DomainEvent(.expired, reason)], outcome: session.outcome(.expired, reason))
            }
            session.outcome = .needsAttention
            let reason = "Klarna does not know HPP session \(hppSessionID) (404 on the first read); check the id"
            return SessionStep(session: session, events: [DomainEvent(.notFound, reason)], outcome: session.outcome(.needsAttention, reason))

        case .session(let status, let updatedAt, let expiresAt, let token, let orderID, let klarnaReference):
            if let updatedAt, let previous = hppUpdatedAt, updatedAt < previous {
                // Out of order (a delayed webhook or a lagging replica): never move backwards.
                session.nextDueAt = schedule.nextPoll(now: now, anchor: pollAnchor, expiresAt: session.expiresAt)
                return SessionStep(
                    session: session,
                    events: [
                        DomainEvent(
                            .staleStatus,
                            "ignored \(status) from \(Self.format(updatedAt)): already saw \(hppStatus?.rawValue ?? "?") from \(Self.format(previous))"
                        )
                    ])
            }
            var events: [DomainEvent] = []
            if status != hppStatus {
                let note = status.isKnown ? "" : " (unknown to this version: treated as not final)"
                events.append(DomainEvent(.status, "HPP status \(hppStatus?.rawValue ?? "—") → \(status)\(note)"))
            }
            session.hppStatus = status
            session.hppUpdatedAt = updatedAt ?? session.hppUpdatedAt
            session.expiresAt = expiresAt ?? session.expiresAt
            session.klarnaReference = klarnaReference ?? session.klarnaReference

            switch status {
            case .completed:
                return session.completed(token: token, orderID: orderID, now: now, events: events)
            case .cancelled, .disabled:
                session.phase = .closed
                session.outcome = .cancelled
                session.nextDueAt = nil
                let reason = status == .cancelled ? "the consumer cancelled the payment" : "the HPP session was disabled by the merchant"
                return SessionStep(session: session, events: events, outcome: session.outcome(.cancelled, reason))
            default:
                // Not final (FAILED and ERROR included: the consumer may try again), or a status this version does not
                // know: keep polling.
                session.nextDueAt = schedule.nextPoll(now: now, anchor: pollAnchor, expiresAt: session.expiresAt)
                return SessionStep(session: session, events: events)
            }
        }
    }

    private func completed(token: String?, orderID: String?, now: Date, events: [DomainEvent]) -> SessionStep {
        var session = self
        var events = events
        session.nextDueAt = now
        if let orderID {
            // HPP placed the order (PLACE_ORDER / CAPTURE_ORDER).
            let placedBy = mode == .captureOrder ? PlaceOrderMode.captureOrder : .placeOrder
            if mode == PlaceOrderMode.none {
                events.append(DomainEvent(.modeMismatch, "tracked as NONE but HPP returned order \(orderID): following the order"))
            }
            session.mode = session.mode ?? placedBy
            session.orderID = orderID
            session.phase = .ordered
            session.nextDueAt = nil
            return SessionStep(session: session, events: events, handOff: OrderHandOff(orderID: orderID, placedBy: placedBy))
        }
        guard let token, !token.isEmpty else {
            session.phase = .closed
            session.outcome = .needsAttention
            session.nextDueAt = nil
            let reason = "HPP session is COMPLETED but carries neither an authorization_token nor an order_id"
            return SessionStep(
                session: session, events: events + [DomainEvent(.needsAttention, reason)], outcome: session.outcome(.needsAttention, reason))
        }
        if mode != nil && mode != PlaceOrderMode.none {
            events.append(DomainEvent(.modeMismatch, "tracked as \(mode!.rawValue) but HPP returned an authorization token: placing the order"))
        }
        session.mode = PlaceOrderMode.none
        session.authorizationToken = token
        // The token lives 60 minutes from the authorization, which HPP dates with updated_at.
        let authorizedAt = min(hppUpdatedAt ?? now, now)
        session.tokenExpiresAt = authorizedAt.addingTimeInterval(Deadlines.authorizationTokenLifetime.timeInterval)
        session.phase = .authorized
        events.append(DomainEvent(.authorized, "authorization token \(Redact.tail(token)) valid until \(Self.format(session.tokenExpiresAt!))"))
        return SessionStep(session: session, events: events)
    }

    /// A read failed: count it and come back after `retryAfter`. Past `expires_at` plus the grace period, a session
    /// Klarna cannot confirm is recorded as expired rather than followed forever.
    public func readFailed(_ error: String, now: Date, retryAfter: Duration, schedule: PollingSchedule) -> SessionStep {
        var session = self
        session.consecutiveFailures += 1
        session.lastError = error
        if phase == .polling, let expiresAt, now.hasReached(expiresAt.addingTimeInterval(schedule.expiryGrace.timeInterval)) {
            session.phase = .closed
            session.outcome = .expired
            session.nextDueAt = nil
            let reason = "HPP session passed expires_at \(Self.format(expiresAt)) while Klarna could not be read (\(error))"
            return SessionStep(session: session, events: [DomainEvent(.expired, reason)], outcome: session.outcome(.expired, reason))
        }
        var next = now.addingTimeInterval(retryAfter.timeInterval)
        // Never sleep through the token's deadline: its expiry is an outcome, recorded on time.
        if phase == .authorized, let tokenExpiresAt, !now.hasReached(tokenExpiresAt) { next = min(next, tokenExpiresAt) }
        session.nextDueAt = next
        return SessionStep(session: session, events: [DomainEvent(.readFailed, "\(error); next read in \(Self.seconds(retryAfter))")])
    }

    /// A webhook or an operator says something changed: read now and poll densely again. A hint before the first
    /// read is how a new session reaches the engine (track requests wake it too), so only later ones count as
    /// callbacks arriving.
    public func hinted(now: Date) -> TrackedSession {
        var session = self
        guard isOpen else { return session }
        session.pollAnchor = now
        if lastReadAt != nil { session.lastHintAt = now }
        session.nextDueAt = now
        return session
    }

    /// The authorization token is gone before the order could be placed.
    public func tokenExpired(now: Date, detail: String) -> SessionStep {
        var session = self
        session.phase = .closed
        session.outcome = .expired
        session.nextDueAt = nil
        let reason = "authorization token expired at \(Self.format(tokenExpiresAt ?? now)) before the order could be placed: \(detail)"
        return SessionStep(session: session, events: [DomainEvent(.tokenExpired, reason)], outcome: session.outcome(.expired, reason))
    }

    /// The daemon placed the order with the authorization token: the session is done and its order carries on.
    public func orderPlaced(orderID: String, fraudStatus: FraudStatus?) -> SessionStep {
        var session = self
        session.orderID = orderID
        session.phase = .ordered
        session.nextDueAt = nil
        // The order's own first read records the order_placed outcome; here only the event.
        return SessionStep(
            session: session, events: [DomainEvent(.orderPlaced, "order \(orderID) placed, fraud_status \(fraudStatus?.rawValue ?? "—")")],
            handOff: OrderHandOff(orderID: orderID, placedBy: PlaceOrderMode.none))
    }

    /// Klarna placed the order after an unclear create-order, and ``PlacedOrderSearch`` found its id (`how`: where):
    /// the session is done and its order carries on, as after ``orderPlaced(orderID:fraudStatus:)``.
    public func placedOrderFound(orderID: String, how: String) -> SessionStep {
        var step = orderPlaced(orderID: orderID, fraudStatus: nil)
        step.events = [DomainEvent(.orderLinked, "order \(orderID) linked to this payment: Klarna placed it after an unclear create-order, \(how)")]
        return step
    }

    /// Klarna created the customer token. A tokenize-only session is done; one that also buys goes on at once to
    /// place the order.
    public func customerTokenCreated(tokenID: String, now: Date) -> SessionStep {
        var session = self
        session.customerTokenID = tokenID
        session.nextDueAt = now
        if purpose == .tokenize { session = session.tokenizeFinished().session }
        let reason = "customer token \(Redact.tail(tokenID)) created"
        return SessionStep(
            session: session, events: [DomainEvent(.customerTokenCreated, reason)], outcome: session.outcome(.customerTokenCreated, reason))
    }

    /// A tokenize-only session whose customer token exists is done; the token's outcome was recorded when it was
    /// created.
    public func tokenizeFinished() -> SessionStep {
        var session = self
        session.phase = .closed
        session.outcome = .customerTokenCreated
        session.nextDueAt = nil
        return SessionStep(session: session)
    }

    /// The session's intent (place order, customer token) waits for its next attempt at `until`. `lastError`, when
    /// given, is the failure that made it wait; `nil` keeps the error recorded before.
    public func waitingForIntent(until: Date, lastError: String? = nil) -> TrackedSession {
        var session = self
        session.nextDueAt = until
        if let lastError { session.lastError = lastError }
        return session
    }

    /// The order the session hands over to, as the order machine starts following it.
    /// Of the session's account: an order is Klarna's in the account that placed it.
    public func order(for handOff: OrderHandOff, createdAt: Date) -> TrackedOrder {
        var order = TrackedOrder(
            orderID: handOff.orderID, hppSessionID: hppSessionID, kpSessionID: kpSessionID, merchantReference: merchantReference,
            capturePolicy: capturePolicy, placedBy: handOff.placedBy, createdAt: createdAt)
        order.account = account
        return order
    }

    /// Ends the session with `kind` (for outcomes decided by the engine around an intent).
    public func closed(_ kind: OutcomeKind, _ reason: String) -> SessionStep {
        var session = self
        session.phase = .closed
        session.outcome = kind
        session.nextDueAt = nil
        return SessionStep(session: session, events: [DomainEvent(EventKind(kind), reason)], outcome: session.outcome(kind, reason))
    }

    public static func format(_ date: Date) -> String { date.formatted(.iso8601) }
    public static func seconds(_ duration: Duration) -> String { String(format: "%.1f s", duration.timeInterval) }
}
