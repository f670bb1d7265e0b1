import Synchronization

/// Gives up on the leases of pooled connections that wait longer than a store's patience
/// (``PostgresStore/connectionPatience``): one task per store looks at the waiting leases every tick and cancels
/// those past their deadline, so a caller gives up between its patience and a tick later.
///
/// Why not a timer per lease: a statement's lease waited in a task group beside a sleeping task, and that sleep armed
/// and disarmed a timer of the global executor at every statement, handled on its manager thread. Sleeps and that
/// thread took 9.5 % of a daemon's samples on PostgreSQL, 6.0 % with this (the rest are the pool's own timers), and
/// its CPU over a run fell by about 2 % on average, within the runs' spread (BENCHMARKS.md at 0490c17, the ninth look). Waiting
/// longer than the patience is rare (the server unreachable, every connection busy).
final class LeasePatience: Sendable {
    /// Whether a waiting lease got its connection or was given up first: exactly one of the two wins, so a body that
    /// ran is never reported as not run.
    final class Race: Sendable {
        private let state = Mutex<Bool?>(nil)  // true: leased, false: given up
        /// The lease got its connection; `false` when it was given up first.
        func lease() -> Bool { settle(true) }
        /// The lease is given up; `false` when it got its connection first.
        func giveUp() -> Bool { settle(false) }
        var gaveUp: Bool { state.withLock { $0 == false } }

        private func settle(_ leased: Bool) -> Bool {
            state.withLock { state in
                if state == nil { state = leased }
                return state == leased
            }
        }
    }

    private struct Waiting {
        let deadline: ContinuousClock.Instant
        let race: Race
        let cancel: @Sendable () -> Void
    }

    private struct State {
        var next: UInt64 = 0
        var waiting: [UInt64: Waiting] = [:]
    }

    let patience: Duration
    private let state = Mutex(State())
    /// The checking task; set once, at the end of `init` (a `let` could not be: the task's closure captures `self`).
    private let checking = Mutex<Task<Void, Never>?>(nil)

    init(patience: Duration, tick: Duration) {
        precondition(patience > .zero && tick > .zero, "a lease's patience and its checks take time")
        self.patience = patience
        // The task holds the list weakly: a store dropped without `stop()` takes its patience with it.
        let task = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: tick)
                guard let self else { return }
                self.giveUpOverdue(at: .now)
            }
        }
        checking.withLock { $0 = task }
    }

    /// Enters a lease that started waiting now; `cancel` ends its wait when it is given up. Returns the ticket that
    /// ``leave(_:)`` takes once the caller is done with the lease, granted or not. A lease granted and still in use
    /// stays listed till then; a check that finds it past its deadline drops it and leaves it alone (its race is won).
    func enter(_ race: Race, cancel: @escaping @Sendable () -> Void) -> UInt64 {
        let deadline = ContinuousClock.now + patience
        return state.withLock { state in
            let ticket = state.next
            state.next &+= 1
            state.waiting[ticket] = Waiting(deadline: deadline, race: race, cancel: cancel)
            return ticket
        }
    }

    func leave(_ ticket: UInt64) {
        _ = state.withLock { $0.waiting.removeValue(forKey: ticket) }
    }

    /// Gives up on every lease past its deadline at `now` that has not got its connection.
    func giveUpOverdue(at now: ContinuousClock.Instant) {
        let overdue: [Waiting] = state.withLock { state in
            let tickets = state.waiting.filter { $0.value.deadline <= now }.map(\.key)
            return tickets.compactMap { state.waiting.removeValue(forKey: $0) }
        }
        for waiting in overdue where waiting.race.giveUp() { waiting.cancel() }
    }

    /// Stops the checks; a lease still waiting then waits for the pool alone (closed with the store).
    func stop() {
        checking.withLock { $0?.cancel() }
    }

    deinit { checking.withLock { $0?.cancel() } }
}
