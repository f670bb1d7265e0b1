import Foundation
import Synchronization

/// Wall-clock time as the domain sees it. Deadlines from Klarna (`expires_at`, token lifetimes) are wall times,
/// so the whole core runs on one injected clock: production uses ``SystemClock``, tests ``ManualClock``.
public protocol WallClock: Sendable {
    var now: Date { get }
    /// Suspends until `now` has moved `duration` forward. Throws `CancellationError` when the task is cancelled.
    func sleep(for duration: Duration) async throws
    /// Suspends until `now` reaches `deadline`. Prefer it to `sleep(for: deadline - now)` when the deadline was
    /// computed earlier: time may have moved since, and a duration from a stale `now` oversleeps by that much.
    func sleep(until deadline: Date) async throws
}

extension WallClock {
    public func sleep(until deadline: Date) async throws {
        try await sleep(for: Duration(timeInterval: max(0, deadline.timeIntervalSince(now))))
    }
}

public struct SystemClock: WallClock {
    public init() {}
    public var now: Date { Date() }
    public func sleep(for duration: Duration) async throws {
        try await Task.sleep(for: duration)
    }
}

/// A clock that only moves when told to. Sleepers wake when ``advance(by:)`` carries time past their deadline,
/// so tests of schedules and retries never wait on real time.
public final class ManualClock: WallClock {
    private struct Sleeper {
        let id: UInt64
        let deadline: Date
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now: Date
        var nextID: UInt64 = 0
        var sleepers: [Sleeper] = []
    }

    private let state: Mutex<State>

    public init(now: Date = Date(timeIntervalSince1970: 1_800_000_000)) {
        state = Mutex(State(now: now))
    }

    public var now: Date { state.withLock { $0.now } }

    /// How many tasks are currently suspended in ``sleep(for:)``; tests wait on this instead of sleeping.
    public var sleeperCount: Int { state.withLock { $0.sleepers.count } }

    /// When the earliest sleeper wakes; nil when none sleeps. A simulation moves the clock there when nothing else
    /// can happen first.
    public var nextWake: Date? { state.withLock { $0.sleepers.map(\.deadline).min() } }

    public func advance(by duration: Duration) {
        let woken: [Sleeper] = state.withLock { state in
            state.now = state.now.addingTimeInterval(duration.timeInterval)
            let now = state.now
            let due = state.sleepers.filter { $0.deadline <= now }
            state.sleepers.removeAll { $0.deadline <= now }
            return due
        }
        for sleeper in woken { sleeper.continuation.resume() }
    }

    public func sleep(for duration: Duration) async throws {
        if duration <= .zero { try Task.checkCancellation(); return }
        try await suspend { now in now.addingTimeInterval(duration.timeInterval) }
    }

    /// An absolute deadline: a sleeper that computed it before the clock moved still wakes exactly then.
    public func sleep(until deadline: Date) async throws {
        try await suspend { _ in deadline }
    }

    /// Parks the caller until ``advance(by:)`` reaches the deadline computed from the clock's time at parking.
    private func suspend(until deadline: @escaping @Sendable (Date) -> Date) async throws {
        let id = state.withLock { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let resume: Result<Void, any Error>? = state.withLock { state in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    let wake = deadline(state.now)
                    if wake <= state.now { return .success(()) }
                    state.sleepers.append(Sleeper(id: id, deadline: wake, continuation: continuation))
                    return nil
                }
                if let resume { continuation.resume(with: resume) }
            }
        } onCancel: {
            let cancelled = state.withLock { state -> Sleeper? in
                guard let index = state.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return state.sleepers.remove(at: index)
            }
            cancelled?.continuation.resume(throwing: CancellationError())
        }
    }
}

extension Duration {
    /// Seconds as a `TimeInterval`, for arithmetic with `Date`.
    public var timeInterval: TimeInterval {
        let (seconds, attoseconds) = components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }

    public init(timeInterval: TimeInterval) {
        self = .nanoseconds(Int64((timeInterval * 1e9).rounded()))
    }
}

extension Date {
    /// `true` once `deadline` has come, allowing a millisecond for the rounding of stored times: work scheduled for a
    /// deadline must see it as reached when it runs.
    public func hasReached(_ deadline: Date) -> Bool { timeIntervalSince(deadline) > -0.001 }
}
