import KlarnaAPI
import ReconcilerCore
import Telemetry

/// How the engine spends the shared rate budget on Klarna calls: one token per call, waited for at the call's
/// urgency, and a 429 that pauses every caller until Klarna's reset.
extension RateLimiter {
    /// Waits until one Klarna call at `urgency` may go out; the wait is counted by urgency.
    func spend(_ urgency: Urgency) async throws {
        let started = ContinuousClock.now
        try await acquire(urgency)
        Telemetry.time(.budgetWait, .now - started, ("urgency", urgency.label))
    }

    /// A call Klarna refused as too many (429) pauses everyone until the reset it named.
    func heed(_ error: KlarnaAPIError) {
        if error.answer.pausesTheAccount, let hint = error.rateLimit.hint { pause(for: hint) }
    }
}

extension RateLimiter? {
    /// `call` (a Klarna call whose token was spent already, or a walk through pages, each spending its own); a 429 it
    /// throws pauses every caller until the reset.
    func heeding<T>(_ call: () async throws -> T) async throws -> T {
        do {
            return try await call()
        } catch let error as KlarnaAPIError {
            self?.heed(error)
            throw error
        }
    }
}
