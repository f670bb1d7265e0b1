import Logging
import PostgresNIO
import Synchronization

extension PostgresConnection {
    /// The connection closed before the query was answered: nothing says whether it ran.
    struct ClosedUnderQuery: Error, CustomStringConvertible {
        var description: String { "the connection to PostgreSQL closed before the query was answered" }
    }

    /// Runs `query` and collects its rows; fails when the connection closes first.
    ///
    /// Why not `query(_:logger:)` alone: postgres-nio writes a query to its channel without watching the write, so a
    /// query written just after the server closed the connection (a restart under load) is dropped with the failed
    /// write and its caller waits for good, holding a pooled connection and the step it runs for.
    @discardableResult
    func rows(_ query: PostgresQuery, logger: Logger) async throws -> [PostgresRow] {
        try await answer(query, logger: logger).get()
    }

    /// Runs a hot statement (prepared on this connection at its first use, afterwards only executed) and collects
    /// its rows; fails when the connection closes first, as ``rows(_:logger:)`` does.
    ///
    /// A statement whose first use on this connection fails with the server's error closes the connection before the
    /// error is rethrown (the pool opens another). Why: postgres-nio keeps a failed preparation for the life of the
    /// connection (its `PreparedStatementStateMachine` goes to `.error` and never leaves it), and fails every later
    /// execution of that name on it at once, without asking the server: a statement that failed to prepare once (its
    /// table dropped by a restore, a lock or statement timeout while planning) would fail on that pooled connection
    /// for good. postgres-nio's error does not say whether the preparation or the execution failed; a statement
    /// answered on this connection before is prepared (that state never goes back to `.error`), so only a statement
    /// never answered here may be poisoned: for one whose preparation succeeded and execution failed, the closing
    /// costs one reconnection.
    @discardableResult
    func rows<Text: StatementText>(_ text: Text.Type, _ bindings: PostgresBindings, logger: Logger) async throws -> [PostgresRow] {
        let statement = Prepared<Text>(bindings: bindings)
        let watch = ConnectionWatch.of(self)
        let answer = eventLoop.makePromise(of: [PostgresRow].self)
        if watch.watch(answer) {
            answer.completeWithTask { [self] in
                // Checked once more where the statement is written: `execute` is async (hence the task), and a
                // statement written after the channel dropped its handlers is never answered, leaving the task
                // waiting on a future nothing completes (cancelling it would not end the wait, `get()` ignores
                // cancellation). What remains is the microseconds between this check and the write, at most the
                // one statement in flight on the connection when it closes.
                guard !watch.isClosed, !isClosed else { throw ClosedUnderQuery() }
                var rows: [PostgresRow] = []
                for try await row in try await execute(statement, logger: logger) { rows.append(row) }
                return rows
            }
        }
        do {
            let rows = try await answer.futureResult.get()
            watch.answered(Text.self)
            return rows
        } catch let error as PSQLError where error.serverInfo != nil && !watch.wasAnswered(Text.self) {
            // Awaited: a ROLLBACK after this (the store's `transaction`) then finds the connection closed and fails
            // at once, without being written to it.
            try? await close()
            throw error
        }
    }

    /// Synchronous, so that the future-returning `query` is the one chosen, and the answer races the closing.
    private func answer(_ query: PostgresQuery, logger: Logger) -> EventLoopFuture<[PostgresRow]> {
        let answer = eventLoop.makePromise(of: [PostgresRow].self)
        if ConnectionWatch.of(self).watch(answer) {
            // Not written to a connection known closed (a ROLLBACK after a failure that closed it): nothing would
            // answer it.
            if isClosed {
                answer.fail(ClosedUnderQuery())
            } else {
                self.query(query, logger: logger).map(\.rows).cascade(to: answer)
            }
        }
        return answer.futureResult
    }
}

/// What ``PostgresConnection/rows(_:logger:)`` keeps for one open connection: the answers awaited on it, failed
/// when it closes, and the hot statements it has answered (prepared on it for sure).
///
/// Why one per connection, not a `closeFuture` callback per statement: SwiftNIO keeps a future's callbacks until it
/// completes, and a pooled connection's `closeFuture` completes only when the connection closes, days later for a
/// busy one: a callback per statement, each holding its answer and rows, grew without bound. Here the connection's
/// `closeFuture` has one callback, an answer leaves the watch as soon as it completes, and the watch leaves the
/// registry when the connection closes. postgres-nio has no hook of its own for this: `closeFuture` is the only word
/// of a closing, and a connection has no room for a caller's state.
final class ConnectionWatch: Sendable {
    private struct State {
        var closed = false
        var nextTicket: UInt64 = 0
        var inFlight: [UInt64: EventLoopPromise<[PostgresRow]>] = [:]
        /// Hot statements (by their text's type) answered on this connection at least once.
        var answered: Set<ObjectIdentifier> = []
        /// Since when the connection's cached plans were made (``PostgresStore/replanningInterval``).
        var planned = ContinuousClock.now
    }

    private let key: ObjectIdentifier
    private let state = Mutex(State())

    /// The watches of the open connections, by the connection's identity. No entry outlives its connection: the
    /// close callback that removes it holds the connection, so that no other connection is made at its address (and
    /// finds its watch) while the entry is there.
    private static let registry = Mutex<[ObjectIdentifier: ConnectionWatch]>([:])

    private init(key: ObjectIdentifier) {
        self.key = key
    }

    /// The connection's watch; the first call for a connection registers its one close callback.
    static func of(_ connection: PostgresConnection) -> ConnectionWatch {
        let key = ObjectIdentifier(connection)
        let found: (watch: ConnectionWatch, isNew: Bool) = registry.withLock { registry in
            if let watch = registry[key] { return (watch, false) }
            let watch = ConnectionWatch(key: key)
            registry[key] = watch
            return (watch, true)
        }
        let watch = found.watch
        if found.isNew {
            // Runs at once when the connection closed already: the watch then closes, and a later call makes a new
            // one that closes as fast; nothing piles up on a completed future.
            connection.closeFuture.whenComplete { _ in
                watch.connectionClosed()
                withExtendedLifetime(connection) {}
            }
        }
        return watch
    }

    /// Fails `answer` with ``PostgresConnection/ClosedUnderQuery`` if the connection closes before it completes; the
    /// first completion wins. Returns `false` (`answer` failed) when the connection closed already.
    func watch(_ answer: EventLoopPromise<[PostgresRow]>) -> Bool {
        let ticket: UInt64? = state.withLock { state in
            guard !state.closed else { return nil }
            let ticket = state.nextTicket
            state.nextTicket &+= 1
            state.inFlight[ticket] = answer
            return ticket
        }
        guard let ticket else {
            answer.fail(PostgresConnection.ClosedUnderQuery())
            return false
        }
        answer.futureResult.whenComplete { [self] _ in
            _ = state.withLock { $0.inFlight.removeValue(forKey: ticket) }
        }
        return true
    }

    var isClosed: Bool { state.withLock { $0.closed } }

    /// Whether `every` has passed since the connection's plans were made; if so, they count as made now (the caller
    /// discards them).
    func plansDue(every: Duration) -> Bool {
        let now = ContinuousClock.now
        return state.withLock { state in
            guard now - state.planned >= every else { return false }
            state.planned = now
            return true
        }
    }

    func answered(_ text: any StatementText.Type) {
        let text = ObjectIdentifier(text)
        state.withLock { _ = $0.answered.insert(text) }
    }

    func wasAnswered(_ text: any StatementText.Type) -> Bool {
        let text = ObjectIdentifier(text)
        return state.withLock { $0.answered.contains(text) }
    }

    private func connectionClosed() {
        let inFlight: [EventLoopPromise<[PostgresRow]>] = state.withLock { state in
            state.closed = true
            let inFlight = Array(state.inFlight.values)
            state.inFlight = [:]
            return inFlight
        }
        Self.registry.withLock { registry in
            if registry[key] === self { registry[key] = nil }
        }
        for answer in inFlight { answer.fail(PostgresConnection.ClosedUnderQuery()) }
    }
}
