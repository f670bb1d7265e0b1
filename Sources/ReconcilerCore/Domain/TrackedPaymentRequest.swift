import Foundation

/// A Klarna Network payment request the daemon follows after a verified webhook: re-read until final, then an
/// outcome; `COMPLETED` carries the `klarna_network_session_token` the acquiring partner authorizes with (60 min).
public struct TrackedPaymentRequest: Codable, Sendable, Equatable {
    public var paymentRequestID: String
    public var state: PaymentRequestState?
    public var expiresAt: Date?
    public var outcome: OutcomeKind?
    public var trackedAt: Date
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

    public init(paymentRequestID: String, trackedAt: Date) {
        self.paymentRequestID = paymentRequestID
        self.trackedAt = trackedAt
        self.nextDueAt = trackedAt
        self.reads = 0
        self.consecutiveFailures = 0
    }

    public var isOpen: Bool { outcome == nil }

    /// The outcome a final state ends the request with (Klarna Network payment request states); `nil` for the others,
    /// unknown values included, which are read again later.
    public static func outcome(of state: PaymentRequestState) -> OutcomeKind? {
        switch state {
        case .completed: .paymentRequestCompleted
        case .canceled: .cancelled
        case .declined: .rejected
        case .expired: .expired
        default: nil
        }
    }

    public struct Step: Sendable, Equatable {
        public var request: TrackedPaymentRequest
        public var events: [DomainEvent] = []
        public var outcome: Outcome?
    }

    /// Applies one read. `recheck` is how long until the next read of a request that is not final.
    public func applying(state: PaymentRequestState, expiresAt: Date?, sessionToken: String?, now: Date, recheck: Duration) -> Step {
        var request = self
        request.reads += 1
        request.consecutiveFailures = 0
        request.lastError = nil
        request.expiresAt = expiresAt ?? request.expiresAt
        var step = Step(request: request)
        if state != self.state { step.events.append(DomainEvent(.status, "payment request \(self.state?.rawValue ?? "—") → \(state)")) }
        request.state = state
        guard isOpen else {
            request.nextDueAt = nil
            step.request = request
            return step
        }
        if var kind = Self.outcome(of: state) {
            var reason = "Klarna Network payment request \(state)"
            if kind == .paymentRequestCompleted, sessionToken == nil {
                kind = .needsAttention
                reason = "payment request COMPLETED without a klarna_network_session_token"
            }
            request.outcome = kind
            request.nextDueAt = nil
            step.request = request
            step.events.append(DomainEvent(EventKind(kind), reason))
            step.outcome = Outcome(
                kind: kind, reason: reason, paymentRequestID: paymentRequestID,
                klarnaNetworkSessionToken: kind == .paymentRequestCompleted ? sessionToken : nil)
            return step
        }
        var next = now.addingTimeInterval(recheck.timeInterval)
        if let expiresAt = request.expiresAt, !now.hasReached(expiresAt) { next = min(next, expiresAt) }
        request.nextDueAt = next
        step.request = request
        return step
    }

    /// A read failed; past `expires_at` the request is recorded as expired rather than followed forever.
    public func readFailed(_ error: String, now: Date, retryAfter: Duration, grace: Duration) -> Step {
        var request = self
        request.consecutiveFailures += 1
        request.lastError = error
        if let expiresAt, now.hasReached(expiresAt.addingTimeInterval(grace.timeInterval)) {
            request.outcome = .expired
            request.nextDueAt = nil
            let reason = "payment request passed expires_at while Klarna could not be read (\(error))"
            return Step(
                request: request, events: [DomainEvent(.expired, reason)],
                outcome: Outcome(kind: .expired, reason: reason, paymentRequestID: paymentRequestID))
        }
        request.nextDueAt = now.addingTimeInterval(retryAfter.timeInterval)
        return Step(request: request, events: [DomainEvent(.readFailed, "\(error); next read in \(TrackedSession.seconds(retryAfter))")])
    }

    /// A webhook says something changed: read now.
    public func hinted(now: Date) -> TrackedPaymentRequest {
        var request = self
        if isOpen { request.nextDueAt = now }
        return request
    }
}
