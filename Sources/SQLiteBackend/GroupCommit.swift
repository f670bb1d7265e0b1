import Foundation
import ReconcilerCore
import ReconcilerStore
import Synchronization
import Telemetry

/// Group commit: the write transactions that arrive while another is committing (its fsync is the slow part) are
/// committed together in the next one, with one fsync. Each caller resumes only after the commit that holds its write
/// is durable, and each write runs in its own savepoint, so one that throws is undone alone and the others commit.
/// Under a burst, or while the disk stalls, the queue drains in a few fsyncs instead of one per write.
final class GroupCommit: Sendable {
    private struct Pending: Sendable {
        /// Runs the write inside the open transaction and keeps its result; returns its error, if any.
        let apply: @Sendable (SQLiteConnection) -> (any Error)?
        /// Resumes the caller: with the kept result, or with the error that undid the whole transaction.
        let finish: @Sendable ((any Error)?) -> Void
    }

    /// What the writer has done so far.
    struct Statistics: Sendable, Equatable {
        /// Writes handed to ``write(_:)``, including those still waiting.
        var submitted = 0
        /// Transactions committed, and the writes they held.
        var transactions = 0
        var committedWrites = 0
    }

    private struct Queue {
        var pending: [Pending] = []
        var drainScheduled = false
        var statistics = Statistics()
    }

    private let connection: SQLiteConnection
    private let queue: DispatchQueue
    private let state = Mutex(Queue())
    /// Given back when a transaction finds the disk full.
    private let reserve: ReserveFile?

    /// `queue` is the serial queue that owns `connection`; drains run on it, between reads.
    init(connection: SQLiteConnection, queue: DispatchQueue, reserve: ReserveFile? = nil) {
        self.connection = connection
        self.queue = queue
        self.reserve = reserve
    }

    /// Runs `body` in a write transaction, possibly shared with other writes, and returns once it is durable.
    func write<T: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let outcome = Mutex<Result<T, any Error>?>(nil)
            let pending = Pending(
                apply: { db in
                    let result = Result { try db.savepoint { try body(db) } }
                    outcome.withLock { $0 = result }
                    if case .failure(let error) = result { return error }
                    return nil
                },
                finish: { transactionError in
                    if let transactionError { return continuation.resume(throwing: transactionError) }
                    continuation.resume(with: outcome.withLock { $0 } ?? .failure(SQLiteError(code: 1, message: "write was not run", sql: nil)))
                })
            let schedule = state.withLock { state in
                state.pending.append(pending)
                state.statistics.submitted += 1
                defer { state.drainScheduled = true }
                return !state.drainScheduled
            }
            if schedule { queue.async { self.drain() } }
        }
    }

    var statistics: Statistics { state.withLock { $0.statistics } }

    /// Commits every write queued so far in one transaction. Runs on `queue`. A transaction that fails for want of
    /// space runs once more after the reserve gave its space back: the answers in flight are recorded first.
    private func drain() {
        let batch = state.withLock { state in
            defer { state.pending = []; state.drainScheduled = false }
            return state.pending
        }
        var failure = commit(batch)
        if let error = failure as? SQLiteError, error.isDiskFull, reserve?.release() == true { failure = commit(batch) }
        for write in batch { write.finish(failure) }
    }

    /// One transaction of `batch`; the error that undid it, or `nil` once it is durable.
    private func commit(_ batch: [Pending]) -> (any Error)? {
        let db = connection
        let started = ContinuousClock.now
        defer { Telemetry.time(.storeCommitDuration, .now - started) }
        do {
            try db.execute("BEGIN IMMEDIATE")
            for write in batch {
                // A full disk or an I/O error can end the whole transaction inside one write: what the writes before
                // it did is gone too, so every write in the batch fails with that error. So does a failed write whose
                // own rows could not be undone (committing the rest would commit those too), and one that found the
                // disk full (the batch is tried again once the reserve is given back).
                if let error = write.apply(db), !db.inTransaction || error is SavepointUndoFailed || (error as? SQLiteError)?.isDiskFull == true {
                    throw error
                }
            }
            try db.execute("COMMIT")
            state.withLock {
                $0.statistics.transactions += 1; $0.statistics.committedWrites += batch.count
            }
            return nil
        } catch {
            if db.inTransaction { try? db.execute("ROLLBACK") }
            return error
        }
    }
}
