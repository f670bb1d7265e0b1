import Foundation

extension TrackedSession.Phase {
    /// How urgent the next run of a session in this phase is. `deadline`: the authorization token's expiry for an
    /// authorized session, the HPP session's `expires_at` for one still polled.
    public func urgency(now: Date, deadline: Date?) -> Urgency {
        switch self {
        case .polling: deadline.map(now.hasReached) == true ? .hinted : .routine
        case .authorized: .inMotion(now: now, deadline: deadline, margin: Urgency.tokenDeadlineMargin)
        case .ordered, .closed: .routine
        }
    }
}

extension TrackedOrder.Phase {
    /// How urgent the next run of an order in this phase is: reading a new order and capturing move a payment; the
    /// rechecks of an order that waits are routine, until its authorization is about to expire.
    public func urgency(now: Date, expiresAt: Date?, deadlines: Deadlines) -> Urgency {
        switch self {
        case .checking, .capturing:
            .inMotion(now: now, deadline: expiresAt, margin: deadlines.authorizationWarnBefore)
        case .pendingFraud, .awaitingCapture:
            Urgency.inMotion(now: now, deadline: expiresAt, margin: deadlines.authorizationWarnBefore) == .deadline ? .deadline : .routine
        case .closed: .routine
        }
    }
}

extension TrackedSession {
    /// What the routine reads of this session are valued by.
    public var pollProfile: PollProfile {
        PollProfile(trackedAt: trackedAt, lastReadAt: lastReadAt, lastHintAt: lastHintAt, expiresAt: expiresAt)
    }

    /// When this session runs next and how urgent that is; `nil` when it is finished.
    public func plan(now: Date) -> WorkPlan? {
        guard isOpen, let due = nextDueAt else { return nil }
        let deadline = phase == .authorized ? tokenExpiresAt : expiresAt
        return WorkPlan(due: due, urgency: phase.urgency(now: max(now, due), deadline: deadline), poll: pollProfile, account: account)
    }
}

extension TrackedOrder {
    public func plan(now: Date, deadlines: Deadlines) -> WorkPlan? {
        guard isOpen, let due = nextDueAt else { return nil }
        return WorkPlan(due: due, urgency: urgency(now: max(now, due), deadlines: deadlines), account: account)
    }

    /// How urgent its next run is: by its phase, a charge's order no more than a renewal (a live payment goes
    /// first) until its authorization is about to expire.
    public func urgency(now: Date, deadlines: Deadlines) -> Urgency {
        renewalAtMost(phase.urgency(now: now, expiresAt: expiresAt, deadlines: deadlines))
    }

    /// How urgent its side effects (capture, cancellation, extension) are: in motion, at the deadline once its
    /// authorization is about to expire; a charge's order's at the renewal level until then.
    public func sideEffectUrgency(now: Date, deadlines: Deadlines) -> Urgency {
        renewalAtMost(.inMotion(now: now, deadline: expiresAt, margin: deadlines.authorizationWarnBefore))
    }

    private func renewalAtMost(_ urgency: Urgency) -> Urgency {
        isRenewal && urgency < .deadline ? min(urgency, .renewal) : urgency
    }
}

extension TrackedPaymentRequest {
    /// Payment requests are re-read on a schedule (routine); a webhook about one wakes it as a hint.
    public func plan() -> WorkPlan? {
        guard isOpen, let due = nextDueAt else { return nil }
        return WorkPlan(due: due, urgency: .routine, account: account)
    }
}
