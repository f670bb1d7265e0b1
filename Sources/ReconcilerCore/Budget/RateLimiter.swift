import Foundation
import Synchronization

/// The process-wide outbound budget: a ``RateBudget`` shared by every caller, sleeping on the injected clock.
///
/// A caller asks with its ``Urgency`` and is resumed when a token is its own. While anyone waits, one pump task
/// sleeps until the next waiter can be served and serves it; it ends when the queue is empty. A caller that can be
/// served sooner than the pump wakes (a live call arriving while renewals wait for a token beyond the reserve)
/// starts a new pump, and the one asleep ends when it wakes.
public final class RateLimiter: Sendable {
    private struct State {
        var budget: RateBudget
        /// Waiting callers by ticket id.
        var parked: [UInt64: CheckedContinuation<Void, any Error>] = [:]
        /// Tickets served before their caller had parked.
        var served: Set<UInt64> = []
        /// When the pump wakes next; `nil` while no pump runs.
        var pumpWake: Date?
        /// The pump that serves; an older one ends when it wakes.
        var pumpGeneration: UInt64 = 0
    }

    /// A token the dispatcher took for a job before it started (a routine read admitted because the budget had
    /// room); the job's first call uses it instead of queueing.
    public final class Prepaid: Sendable {
        private let unused = Mutex(true)
        public init() {}
        /// Takes the token; `false` if it was used already.
        public func use() -> Bool {
            unused.withLock { value in
                defer { value = false }; return value
            }
        }
    }

    /// The token the current task's job was admitted with, if any.
    @TaskLocal public static var prepaid: Prepaid?

    private let state: Mutex<State>
    private let clock: any WallClock
    /// Told how long each call waited for its token, by urgency (benchmarks; metrics later).
    private let observer: (@Sendable (Urgency, Duration) -> Void)?

    /// `reserve`: the tokens kept for live payments (``RateBudget/reserve``).
    public init(
        ratePerSecond: Double, burst: Double, reserve: Double = RateBudget.liveReserve, clock: any WallClock,
        observer: (@Sendable (Urgency, Duration) -> Void)? = nil
    ) {
        self.clock = clock
        self.observer = observer
        self.state = Mutex(State(budget: RateBudget(ratePerSecond: ratePerSecond, burst: burst, reserve: reserve, now: clock.now)))
    }

    /// Callers waiting for a token now.
    public var waiting: Int { state.withLock { $0.budget.waiting } }
    /// Callers waiting at `urgency` or above (``RateBudget/waiting(atLeast:)``).
    public func waiting(atLeast urgency: Urgency) -> Int { state.withLock { $0.budget.waiting(atLeast: urgency) } }

    /// When the next waiting caller can be served; `nil` when nobody waits.
    public var nextGrant: Date? { let now = clock.now; return state.withLock { $0.budget.nextGrant(now: now) } }

    /// When a read that runs on spare tokens only could take one (``takeSpare(limit:)``).
    public var nextSpare: Date { let now = clock.now; return state.withLock { $0.budget.nextSpare(now: now) } }

    /// Waits until the caller may send one request at `urgency`. Returns how long it waited.
    @discardableResult
    public func acquire(_ urgency: Urgency) async throws -> Duration {
        if let prepaid = Self.prepaid, prepaid.use() { return .zero }
        let started = clock.now
        let (ticket, mine, others, startPump) = state.withLock { state in
            let ticket = state.budget.request(urgency)
            let (mine, others) = Self.deliver(state.budget.grant(now: started), except: ticket, in: &state)
            return (ticket, mine, others, mine ? nil : Self.newPump(now: started, in: &state))
        }
        for continuation in others { continuation.resume() }
        if mine {
            observer?(urgency, .zero)
            return .zero
        }
        if let startPump { Task { await self.pump(generation: startPump) } }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let result: Result<Void, any Error>? = state.withLock { state in
                    if state.served.remove(ticket.id) != nil { return .success(()) }
                    // Cancelled before parking: the handler below may have withdrawn the ticket already (and found
                    // nothing to resume), so never park a cancelled caller.
                    if Task.isCancelled {
                        _ = state.budget.withdraw(ticket)
                        return .failure(CancellationError())
                    }
                    state.parked[ticket.id] = continuation
                    return nil
                }
                if let result { continuation.resume(with: result) }
            }
        } onCancel: {
            let parked = state.withLock { state in
                state.budget.withdraw(ticket) ? state.parked.removeValue(forKey: ticket.id) : nil
            }
            parked?.resume(throwing: CancellationError())
        }
        let waited = Duration(timeInterval: clock.now.timeIntervalSince(started))
        observer?(urgency, waited)
        return waited
    }

    /// Takes up to `limit` tokens nobody waits for (see ``Prepaid``).
    public func takeSpare(limit: Int) -> Int {
        let now = clock.now
        return state.withLock { $0.budget.takeSpare(limit: limit, now: now) }
    }

    /// Gives back spare tokens a job did not use; someone waiting gets them at once.
    public func refund(_ count: Int) {
        guard count > 0 else { return }
        let now = clock.now
        serveNow { $0.refund(count, now: now) }
    }

    /// Klarna said "too many requests": nobody calls for `duration`.
    public func pause(for duration: Duration) {
        let now = clock.now
        state.withLock { $0.budget.pause(until: now.addingTimeInterval(duration.timeInterval), now: now) }
    }

    public func reconfigure(ratePerSecond: Double, burst: Double) {
        let now = clock.now
        serveNow { $0.reconfigure(ratePerSecond: ratePerSecond, burst: burst, now: now) }
    }

    /// Changes the budget and serves whoever the change lets through now, instead of when the pump wakes next (it
    /// sleeps until the token it computed before the change).
    private func serveNow(_ change: (inout RateBudget) -> Void) {
        let now = clock.now
        let (resumed, startPump) = state.withLock { state in
            change(&state.budget)
            let resumed = Self.deliver(state.budget.grant(now: now), except: nil, in: &state).resume
            return (resumed, Self.newPump(now: now, in: &state))
        }
        for continuation in resumed { continuation.resume() }
        if let startPump { Task { await self.pump(generation: startPump) } }
    }

    /// The generation of a pump to start when a waiter can be served before the pump asleep wakes (or none runs);
    /// `nil` when the pump there is wakes in time or nobody waits.
    private static func newPump(now: Date, in state: inout State) -> UInt64? {
        guard let next = state.budget.nextGrant(now: now), state.pumpWake.map({ next < $0 }) ?? true else { return nil }
        state.pumpGeneration += 1
        state.pumpWake = next
        return state.pumpGeneration
    }

    /// Serves waiting callers as tokens come, until nobody waits or a newer pump took over.
    private func pump(generation: UInt64) async {
        while true {
            let now = clock.now
            let (resumed, next) = state.withLock { state -> ([CheckedContinuation<Void, any Error>], Date?) in
                guard state.pumpGeneration == generation else { return ([], nil) }
                let (_, resumed) = Self.deliver(state.budget.grant(now: now), except: nil, in: &state)
                let next = state.budget.nextGrant(now: now)
                state.pumpWake = next
                return (resumed, next)
            }
            for continuation in resumed { continuation.resume() }
            guard let next else { return }
            // Until the token's time, not for a duration from `now`: the clock may have moved since `now` was read,
            // and a sleep measured from it would wake that much late (on a manual clock, never: whoever moves it
            // waits for the token this pump owes). Never spin: a token "due now" that rounding kept back comes a
            // microsecond later.
            try? await clock.sleep(until: max(next, now.addingTimeInterval(0.000_001)))
        }
    }

    /// Splits served tickets into the caller's own and the parked callers to resume; a served caller that has not
    /// parked yet finds its ticket in `served`.
    private static func deliver(
        _ tickets: [RateBudget.Ticket], except own: RateBudget.Ticket?, in state: inout State
    )
        -> (mine: Bool, resume: [CheckedContinuation<Void, any Error>])
    {
        var mine = false
        var resume: [CheckedContinuation<Void, any Error>] = []
        for ticket in tickets {
            if ticket == own {
                mine = true
            } else if let continuation = state.parked.removeValue(forKey: ticket.id) {
                resume.append(continuation)
            } else {
                state.served.insert(ticket.id)
            }
        }
        return (mine, resume)
    }
}
