import Foundation

/// After a create-order whose fate is unclear, no second one for the same authorization token until any request
/// still in transit has arrived.
///
/// KP create-order (`POST /payments/v1/authorizations/{token}/order`) has no documented idempotency, and a read of the
/// KP session says only whether Klarna has *processed* a create-order yet, not whether one is still on its way (held
/// up in a proxy, a load balancer or a retransmitting TCP stack past the client's timeout). Reading the session right
/// after an unclear attempt and placing again on `incomplete` lets the second request meet the first. So an unclear
/// attempt (a timeout or reset after the request went out, a lost or unreadable answer, a 5xx, or an attempt found
/// `sent` after a restart or a takeover) is followed by the *settle period* (`engine.create_order_settle_seconds`)
/// during which nothing is read and nothing is sent for it. Then the KP session is read: `incomplete` → the same
/// intent makes a new attempt; `complete` → Klarna placed the order.
///
/// The period counts from when the unclear attempt ended (``IntentVerdict``), or, for an attempt found `sent`, from
/// the latest it could have ended: when it was marked sent (``Intent/updatedAt``: ``Intent/sending(now:)`` is the last
/// write of a sent intent, made after the rate budget's wait, right before the request leaves) plus the longest a
/// call lasts (`klarna.request_timeout_seconds` + 1 s). A sender that stopped answering (killed, frozen, cut off) may
/// have been pushing the request out until then, so counting from the mark alone would let a slow request meet the
/// next one. It is never shortened to fit the authorization token's 60 minutes: when it ends after the token's expiry, the read at its
/// end still tells whether Klarna placed the order, and an `incomplete` session then expires like any other.
///
/// A request provably never sent (connect failure, a timeout before the connection was up, refused before the first
/// byte) or refused unprocessed (429) is a clear failure: ``IntentVerdict`` retries it with the ordinary backoff.
public enum CreateOrderSettle {
    /// The default period: two minutes, four times the default `klarna.request_timeout_seconds`.
    public static let standard: Duration = .seconds(120)
    /// What an operator may configure, in seconds: at least 30 (a request delayed on a real network), at most 900, so
    /// that an attempt that ends unclear after the request timeout is followed by the next one well inside the token's
    /// 60 minutes (the first create-order goes out within seconds of the authorization).
    public static let configurableSeconds: ClosedRange<Int> = 30...900

    /// What to do with an intent before its next attempt.
    public enum Step: Sendable, Equatable {
        /// Nothing of it can be on its way: go on (the attempt's own wait, ``Intent/nextAttemptAt``, still applies).
        case proceed
        /// A create-order may still be in transit: commit `intent`, read nothing and send nothing before `until`.
        /// `event` tells the timeline why; `nil` when the wait was announced already.
        case settle(Intent, until: Date, event: DomainEvent?)
        /// Read Klarna before anything else (for a create-order: the settle period is over).
        case readKlarna
    }

    /// The step for `intent` at `now`, with the configured `period` and the longest a call lasts (`longestCall`).
    /// `tokenExpiresAt`: the authorization token's expiry, named in the event when the wait outlasts it.
    public static func step(for intent: Intent, period: Duration, longestCall: Duration, tokenExpiresAt: Date?, now: Date) -> Step {
        switch intent.state {
        case .intended, .confirmed, .failed:
            return .proceed
        case .ambiguous:
            guard intent.kind.settlesAfterUnclearAttempt, let until = intent.settleUntil, !now.hasReached(until) else { return .readKlarna }
            return .settle(intent, until: until, event: nil)
        case .sent:
            guard intent.kind.settlesAfterUnclearAttempt else { return .readKlarna }
            let latestEnd = intent.updatedAt.addingTimeInterval(longestCall.timeInterval)
            let until = latestEnd.addingTimeInterval(period.timeInterval)
            guard !now.hasReached(until) else { return .readKlarna }
            let settling = intent.ambiguous(intent.lastError ?? "the answer to attempt \(intent.attempts) was never recorded", now: now).settling(
                until: until)
            return .settle(
                settling, until: until,
                event: DomainEvent(
                    .settling,
                    "\(intent.kind.rawValue) attempt \(intent.attempts) was sent at \(TrackedSession.format(intent.updatedAt)) and its answer never recorded (this daemon stopped, or another one held the payment); "
                        + waiting(
                            until: until, period: period,
                            from:
                                "after the attempt could last have ended, \(TrackedSession.format(latestEnd)): sent plus the longest call, \(TrackedSession.seconds(longestCall))",
                            tokenExpiresAt: tokenExpiresAt)))
        }
    }

    /// The wait in words, for the events: until when, why, and what comes after.
    static func waiting(until: Date, period: Duration, from: String, tokenExpiresAt: Date?) -> String {
        var text =
            "it may still be on its way to Klarna: settling until \(TrackedSession.format(until)) "
            + "(engine.create_order_settle_seconds, \(TrackedSession.seconds(period)) \(from)), then the KP session is read; "
            + "no create-order before"
        if let tokenExpiresAt, until > tokenExpiresAt {
            text +=
                ". The authorization token expires first (\(TrackedSession.format(tokenExpiresAt))): if Klarna has not placed the order by then, the payment expires"
        }
        return text
    }
}

extension Intent.Kind {
    /// Whether an unclear attempt is followed by the settle period (``CreateOrderSettle``) before anything else:
    /// create-order only. Klarna deduplicates the OM writes by their idempotency key, so one meeting an earlier one is
    /// harmless; a customer token has no read that could tell, so an unclear one is never attempted again at all.
    public var settlesAfterUnclearAttempt: Bool {
        switch self {
        case .placeOrder: true
        case .capture, .extendAuthorization, .customerToken, .cancelOrder, .releaseRemaining, .refund, .charge, .cancelToken: false
        }
    }
}
