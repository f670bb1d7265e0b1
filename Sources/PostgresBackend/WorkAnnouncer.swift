import Synchronization

/// Tells the listening daemons (``PostgresStore/listenForWork(_:)``) that work arrived, once the commit that made it
/// is done: one `pg_notify` of its own, for all the commits that asked while one was on its way.
///
/// Why not inside the write (a trigger's `pg_notify`, as before schema step 5): PostgreSQL takes one lock for the
/// commit of every transaction that notifies and holds it through the commit's WAL flush, so such transactions never
/// share a flush (BENCHMARKS.md at 0490c17: 2,250 one-row transactions/s with a notification, 9,944 without). A notification
/// alone writes no WAL and waits for no flush. One lost to a crash costs the other daemons a claim poll, never the
/// work: the lease rows are made in the transaction that made the work.
///
/// A daemon whose last lease renewal counted no other live daemon announces nothing: it hears of its own work without
/// a notification (its ingest and steps hint its lease keeper), and a daemon that starts meanwhile claims the free
/// work when it starts and then at every poll until this daemon's next renewal counts it. An operator command, which
/// renews nothing, always announces.
final class WorkAnnouncer: Sendable {
    private struct State {
        var sending = false
        var askedAgain = false
        var alone = false
    }

    private let state = Mutex(State())

    /// How many daemons a lease renewal found live, this one among them.
    func counted(liveDaemons: Int) {
        state.withLock { $0.alone = liveDaemons <= 1 }
    }

    /// Whether the caller sends now; `false`: nobody else listens, or a send is on its way and sends once more after it.
    func ask() -> Bool {
        state.withLock { state in
            guard !state.alone else { return false }
            guard !state.sending else {
                state.askedAgain = true
                return false
            }
            state.sending = true
            return true
        }
    }

    /// After a send: whether another was asked for meanwhile (the sender then sends again).
    func sent() -> Bool {
        state.withLock { state in
            guard state.askedAgain else {
                state.sending = false
                return false
            }
            state.askedAgain = false
            return true
        }
    }
}
