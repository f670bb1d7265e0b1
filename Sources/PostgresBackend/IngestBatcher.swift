import PostgresNIO
import ReconcilerStore
import Synchronization

/// Group commit for the deliveries of the socket on PostgreSQL: those that arrive while ``concurrent`` statements
/// are on their way wait and go out together, as one ``IngestBatch`` statement (one exchange, one WAL flush), when
/// one of them is answered. A lone delivery goes out at once.
///
/// A statement holds no two deliveries of one dedupe key or one session (the second must see the first's writes);
/// such a delivery waits for the next one, and so does every later delivery of its key or session, so that
/// deliveries of one payment are recorded in the order they arrived. A statement the server refused (a constraint,
/// a deadlock) is sent again one delivery at a time, so that one delivery's failure is not its neighbours'; one that
/// failed for want of the server (no connection, the server shutting down or out of resources) fails all of its
/// deliveries at once, each with the same error, and so do the rest of a statement sent again one at a time once
/// one of them fails that way: a delivery waiting its turn must hear "unavailable" now, not after every other
/// delivery's wait for a connection.
final class IngestBatcher: Sendable {
    typealias Send = @Sendable ([SessionDelivery]) async throws -> [IngestResult]

    private struct Waiting {
        let delivery: SessionDelivery
        let send: Send
        let answer: CheckedContinuation<IngestResult, any Error>
    }

    private struct State {
        var waiting: [Waiting] = []
        var sending = 0
    }

    /// Most deliveries in one statement. Also what keeps a statement's answer small: postgres-nio ends a statement's
    /// rows at `CommandComplete`, which the server sends before the implicit transaction commits at `Sync`; the
    /// server holds its output until `ReadyForQuery`, after the commit, unless the output outgrows its 8 KiB send
    /// buffer. 64 answer rows of about 40 bytes stay well inside it, so an answer, and the acknowledgement made of
    /// it, never arrives before the commit.
    let most: Int
    /// Most statements on their way at once.
    let concurrent: Int
    /// Whether a statement's failure was the server refusing it (sent again one delivery at a time), not the server
    /// out of reach.
    private let refused: @Sendable (any Error) -> Bool
    private let state = Mutex(State())

    init(most: Int = 64, concurrent: Int = 2, refused: @escaping @Sendable (any Error) -> Bool = IngestBatcher.refusedByServer) {
        self.most = most
        self.concurrent = concurrent
        self.refused = refused
    }

    /// The server answered the statement with an error about the statement itself. Not: connection exceptions (08),
    /// insufficient resources (53), operator intervention (57: a shutdown, a restart), system errors (58, XX), nor
    /// an error without the server's word (the connection closed, no connection within the patience).
    static func refusedByServer(_ error: any Error) -> Bool {
        guard let state = (error as? PSQLError)?.serverInfo?[.sqlState] else { return false }
        return !["08", "53", "57", "58", "XX"].contains(String(state.prefix(2)))
    }

    /// Deliveries waiting for a statement.
    var waiting: Int { state.withLock { $0.waiting.count } }

    /// Records `delivery` (with the others waiting then) by `send` and answers its result once its statement
    /// committed.
    func submit(_ delivery: SessionDelivery, via send: @escaping Send) async throws -> IngestResult {
        try await withCheckedThrowingContinuation { answer in
            let batch = state.withLock { state in
                state.waiting.append(Waiting(delivery: delivery, send: send, answer: answer))
                return Self.take(&state, most: most, concurrent: concurrent)
            }
            if let batch { Task { await sendAll(batch) } }
        }
    }

    /// The next statement's deliveries, in arrival order, when another statement may go now.
    private static func take(_ state: inout State, most: Int, concurrent: Int) -> [Waiting]? {
        guard state.sending < concurrent, !state.waiting.isEmpty else { return nil }
        var taken: [Waiting] = []
        var kept: [Waiting] = []
        var keys = Set<String>()
        var sessions = Set<String>()
        for waiting in state.waiting {
            let key = waiting.delivery.dedupeKey
            let session = waiting.delivery.sessionID
            let clear = taken.count < most && !(key.map(keys.contains) ?? false) && !(session.map(sessions.contains) ?? false)
            // Kept ones block their key and session too: a later delivery of them does not overtake.
            if clear { taken.append(waiting) } else { kept.append(waiting) }
            if let key { keys.insert(key) }
            if let session { sessions.insert(session) }
        }
        state.waiting = kept
        state.sending += 1
        return taken
    }

    private func sendAll(_ first: [Waiting]) async {
        var batch = first
        while true {
            await deliver(batch)
            let next = state.withLock { state in
                state.sending -= 1
                return Self.take(&state, most: most, concurrent: concurrent)
            }
            guard let next else { return }
            batch = next
        }
    }

    private func deliver(_ batch: [Waiting]) async {
        let send = batch[0].send
        do {
            let results = try await send(batch.enumerated().map { $1.delivery.numbered($0) })
            for (waiting, result) in zip(batch, results) { waiting.answer.resume(returning: result) }
        } catch  where refused(error) && batch.count > 1 {
            var unavailable: (any Error)?
            for waiting in batch {
                if let unavailable {
                    waiting.answer.resume(throwing: unavailable)
                    continue
                }
                do {
                    waiting.answer.resume(returning: try await send([waiting.delivery.numbered(0)])[0])
                } catch {
                    if !refused(error) { unavailable = error }
                    waiting.answer.resume(throwing: error)
                }
            }
        } catch {
            for waiting in batch { waiting.answer.resume(throwing: error) }
        }
    }
}
