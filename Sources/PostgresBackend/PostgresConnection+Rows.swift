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

    /// Synchronous, so that the future-returning `query` is the one chosen, and the answer races the closing.
    private func answer(_ query: PostgresQuery, logger: Logger) -> EventLoopFuture<[PostgresRow]> {
        let answer = eventLoop.makePromise(of: [PostgresRow].self)
        self.query(query, logger: logger).map(\.rows).cascade(to: answer)
        // The first completion wins: after the answer, the closing is ignored.
        closeFuture.whenComplete { _ in answer.fail(ClosedUnderQuery()) }
        return answer.futureResult
    }
}
