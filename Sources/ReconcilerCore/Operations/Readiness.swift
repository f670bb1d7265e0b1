import Synchronization

/// Whether the daemon should be sent work now (`GET /v1/ready`): not while it starts, not once it drains, and not
/// while its store does not answer. Fed by the lifecycle and by the store probe; read without touching the store, so
/// a probe every second costs nothing on the commit path.
public final class Readiness: Sendable {
    public enum Phase: String, Sendable, Codable {
        case starting, ready, draining
    }

    /// What `/v1/ready` answers.
    public struct Report: Sendable, Codable, Equatable {
        public var ready: Bool
        public var phase: Phase
        /// `ok`, or what the last store check failed with.
        public var store: String
        /// `ok`, or which directory is below the watermark and how much it has free.
        public var disk: String = "ok"
        /// Why not ready, as a word a program can match: `disk_full`, `store_unavailable`, `starting`, `draining`.
        public var error: String?
        /// How long ago the store last answered; `nil` before the first answer.
        public var storeAnsweredSecondsAgo: Double?
        /// Why not ready, for a person; `nil` when ready.
        public var reason: String?
    }

    private struct State {
        var phase: Phase = .starting
        var storeError: String?
        var storeAnsweredAt: ContinuousClock.Instant?
        var disk: DiskPressure?
        /// Why the open work is not loaded yet (a start that waits for its store), once it was tried.
        var waitingForStore: String?
    }

    private let state = Mutex(State())
    /// A store whose last answer is older than this is treated as unreachable (a check that hangs never reports).
    public let storeStaleAfter: Duration

    public init(storeStaleAfter: Duration) {
        self.storeStaleAfter = storeStaleAfter
    }

    /// Configuration, store and listeners are up: work may come.
    public func started() { state.withLock { if $0.phase == .starting { $0.phase = .ready } } }
    /// A stop has begun: balancers should send nothing new. Never ready again in this process.
    public func draining() { state.withLock { $0.phase = .draining } }

    public func storeAnswered() {
        state.withLock {
            $0.storeError = nil
            $0.storeAnsweredAt = .now
        }
    }

    public func storeFailed(_ error: String) { state.withLock { $0.storeError = error } }

    /// The disk watch's word: the directories below the watermark, `nil` once every one has room.
    public func disk(_ pressure: DiskPressure?) { state.withLock { $0.disk = pressure } }

    /// The start cannot load its open work from the store yet (`reason`: a full disk, a server refusing writes), or
    /// it has (`nil`): not ready meanwhile, whatever the phase.
    public func waitingForStore(_ reason: String?) { state.withLock { $0.waitingForStore = reason } }

    public func report(now: ContinuousClock.Instant = .now) -> Report {
        let current = state.withLock { $0 }
        let age = current.storeAnsweredAt.map { now - $0 }
        var reason: String?
        var error: String?
        switch current.phase {
        case .starting: (error, reason) = ("starting", "starting")
        case .draining: (error, reason) = ("draining", "draining: the daemon is stopping")
        case .ready:
            if let error = current.storeError {
                reason = "store unavailable: \(error)"
            } else if let age, age > storeStaleAfter {
                reason = "store has not answered for \(Int(age.components.seconds)) s"
            } else if age == nil {
                reason = "store not checked yet"
            }
            if reason != nil { error = "store_unavailable" }
        }
        if let waiting = current.waitingForStore, current.phase != .draining {
            (error, reason) = ("store_unavailable", "waiting for the store to load the open work: \(waiting)")
        }
        // A full disk is said first: it is what the operator must act on, whatever else waits behind it.
        if let pressure = current.disk, current.phase != .draining {
            (error, reason) = (DiskPressure.errorWord, pressure.summary)
        }
        var report = Report(
            ready: reason == nil, phase: current.phase, store: current.storeError ?? "ok",
            storeAnsweredSecondsAgo: age.map(\.roundedSeconds), reason: reason)
        report.disk = current.disk?.summary ?? "ok"
        report.error = error
        return report
    }
}

/// What `GET /v1/health` answers: the loops beat (liveness), with the few numbers that come from memory.
public struct HealthReport: Sendable, Codable, Equatable {
    public struct Loop: Sendable, Codable, Equatable {
        public var name: String
        public var secondsSinceBeat: Double
        public var stalled: Bool
    }

    /// `ok`, or `stalled` when a loop has not beaten within its limit.
    public var status: String
    public var phase: Readiness.Phase
    public var uptimeSeconds: Double
    public var loops: [Loop]
    /// Sessions, orders and payment requests the scheduler holds, the ones being worked on now, and those due
    /// that no worker has taken yet.
    public var open: Int
    public var running: Int
    public var backlog: Int

    /// Builds the report from the heartbeats: a loop is stalled once it has not beaten for `stallAfter` (the
    /// watchdog's limit).
    public init(heartbeats: [Heartbeat], stallAfter: Duration, phase: Readiness.Phase, uptime: Duration, open: Int, running: Int, backlog: Int) {
        loops = heartbeats.map { Loop(name: $0.name, secondsSinceBeat: $0.age.roundedSeconds, stalled: $0.age > stallAfter) }
        status = loops.contains(where: \.stalled) ? "stalled" : "ok"
        self.phase = phase
        uptimeSeconds = uptime.roundedSeconds
        self.open = open
        self.running = running
        self.backlog = backlog
    }
}

extension Duration {
    /// Seconds to the millisecond, for JSON and metrics.
    var roundedSeconds: Double { (timeInterval * 1_000).rounded() / 1_000 }
}
