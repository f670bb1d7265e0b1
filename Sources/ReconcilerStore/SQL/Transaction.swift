/// A transaction written once for both stores: statements to run, and what their rows decide next, until an answer.
/// Each driver runs it inside one transaction of its own (``StatementRunner/execute(_:)``), so that the reads, the
/// decision and the writes are written once and the drivers only run statements: SQLite on its writer, synchronously,
/// PostgreSQL on a pooled connection.
///
///     .read("SELECT data FROM orders WHERE order_id = \(id) \(Statement.forUpdate)") { rows in
///         rows.isEmpty ? .answer(.unknownOrder) : .write(["INSERT …"]) { _ in .answer(.accepted) }
///     }
public struct Transaction<Answer: Sendable>: Sendable {
    /// The rows of each statement of a step, in order.
    public typealias Rows = [[any StatementRow]]

    enum Step: Sendable {
        case run([Statement], next: @Sendable (Rows) throws -> Transaction<Answer>)
        case answer(Answer)
        /// Ends the transaction without committing anything it wrote, with this answer.
        case rollBack(Answer)
    }

    let step: Step

    /// Done: commits what was written, and answers `value`.
    public static func answer(_ value: Answer) -> Transaction { Transaction(step: .answer(value)) }

    /// Done: undoes everything the transaction wrote, and answers `value` (a refused delivery leaves no trace).
    public static func rollBack(_ value: Answer) -> Transaction { Transaction(step: .rollBack(value)) }

    /// Runs `statements` in order; `next` decides from their rows.
    public static func run(_ statements: [Statement], then next: @escaping @Sendable (Rows) throws -> Transaction) -> Transaction {
        Transaction(step: .run(statements, next: next))
    }

    /// Runs `statements`, then answers `value`.
    public static func write(_ statements: [Statement], answering value: Answer) -> Transaction {
        run(statements) { _ in .answer(value) }
    }

    /// Runs one statement; `next` decides from its rows.
    public static func read(_ statement: Statement, then next: @escaping @Sendable ([any StatementRow]) throws -> Transaction) -> Transaction {
        run([statement]) { try next($0[0]) }
    }

    /// This transaction, then the one its answer decides. A roll-back inside `self` ends the whole transaction with an
    /// error (its ``RolledBack``, of `self`'s answer, which ``StatementRunner/transact(_:)`` does not answer with): a
    /// roll-back answers only as a transaction's last step, as the ingest's refusal does.
    public func then<Next: Sendable>(_ next: @escaping @Sendable (Answer) throws -> Transaction<Next>) -> Transaction<Next> {
        switch step {
        case .answer(let value): .run([]) { _ in try next(value) }
        case .rollBack(let value): .run([]) { _ in throw RolledBack(answer: value) }
        case .run(let statements, let decide): .run(statements) { try decide($0).then(next) }
        }
    }

    /// Thrown out of a driver's transaction (which rolls it back) by a ``rollBack(_:)``; ``StatementRunner/transact(_:)``
    /// answers with it.
    public struct RolledBack: Error, CustomStringConvertible {
        public let answer: Answer
        public var description: String { "a store transaction rolled back with the answer \(answer)" }
    }

    /// Runs the transaction with a synchronous `execute` (SQLite's writer, inside its transaction). Throws
    /// ``RolledBack`` for a roll-back.
    public func perform(_ execute: (Statement) throws -> [any StatementRow]) throws -> Answer {
        var current = self
        while true {
            switch current.step {
            case .answer(let value): return value
            case .rollBack(let value): throw RolledBack(answer: value)
            case .run(let statements, let next): current = try next(statements.map(execute))
            }
        }
    }

    /// Runs the transaction with an asynchronous `execute` (PostgreSQL's connection, inside its transaction). Throws
    /// ``RolledBack`` for a roll-back.
    public func perform(awaiting execute: (Statement) async throws -> [any StatementRow]) async throws -> Answer {
        var current = self
        while true {
            switch current.step {
            case .answer(let value): return value
            case .rollBack(let value): throw RolledBack(answer: value)
            case .run(let statements, let next):
                var rows: Rows = []
                for statement in statements { rows.append(try await execute(statement)) }
                current = try next(rows)
            }
        }
    }
}

extension Transaction {
    /// Runs `transactions` one after the other, collecting their answers (a part that rolls back ends the whole one with
    /// an error, as in ``then(_:)``).
    public init<Part: Sendable>(each transactions: [Transaction<Part>]) where Answer == [Part] {
        // One after the other as the interpreter goes, not nested: a payout's thousands of settlements stay shallow.
        @Sendable func from(_ index: Int, _ answers: [Part]) -> Transaction<[Part]> {
            guard index < transactions.count else { return .answer(answers) }
            return transactions[index].then { from(index + 1, answers + [$0]) }
        }
        self = from(0, [])
    }
}

extension StatementRunner {
    /// Runs `transaction` in one transaction of the store's; durable when this returns. A roll-back's answer is
    /// returned once the transaction is undone.
    public func transact<Answer: Sendable>(_ transaction: Transaction<Answer>) async throws -> Answer {
        do {
            return try await execute(transaction)
        } catch let rolledBack as Transaction<Answer>.RolledBack {
            return rolledBack.answer
        }
    }
}
