import Logging
import PostgresNIO

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
    /// its rows; fails when the connection closes first, as ``rows(_:logger:)`` does. A prepared statement written
    /// after the close is never answered: its task is left behind, waiting for nothing.
    @discardableResult
    func rows<Text: StatementText>(_ text: Text.Type, _ bindings: PostgresBindings, logger: Logger) async throws -> [PostgresRow] {
        let statement = Prepared<Text>(bindings: bindings)
        let answer = eventLoop.makePromise(of: [PostgresRow].self)
        answer.completeWithTask { [self] in
            var rows: [PostgresRow] = []
            for try await row in try await execute(statement, logger: logger) { rows.append(row) }
            return rows
        }
        return try await failingOnClose(answer).get()
    }

    /// Synchronous, so that the future-returning `query` is the one chosen, and the answer races the closing.
    private func answer(_ query: PostgresQuery, logger: Logger) -> EventLoopFuture<[PostgresRow]> {
        let answer = eventLoop.makePromise(of: [PostgresRow].self)
        self.query(query, logger: logger).map(\.rows).cascade(to: answer)
        return failingOnClose(answer)
    }

    /// The first completion wins: a closing after the answer is ignored, an answer after the closing too.
    private func failingOnClose(_ answer: EventLoopPromise<[PostgresRow]>) -> EventLoopFuture<[PostgresRow]> {
        closeFuture.whenComplete { _ in answer.fail(ClosedUnderQuery()) }
        return answer.futureResult
    }
}
