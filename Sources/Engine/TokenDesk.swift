import Foundation
import KlarnaAPI
import ReconcilerCore
import ReconcilerStore

/// What operators ask of customer tokens (`tokens`, `token show`, `token cancel`, and the operators' socket): the
/// tokens the daemon created or charged, one of them with its status read from Klarna, and its cancellation, recorded
/// once as an intent the engine sends. Tokens are shown by their tails.
public struct TokenDesk: Sendable {
    let store: any OperatorStore & IngestStore & WorkStore
    /// The accounts whose clients read a token's status (the daemon's); nil: not read (a command without the daemon).
    let accounts: KlarnaAccounts?
    /// Wakes the engine for a cancellation at once (the daemon's socket); nil leaves a wakeup row the daemon polls.
    let wake: (@Sendable ([WorkKey]) async -> Void)?

    public init(
        store: any OperatorStore & IngestStore & WorkStore, accounts: KlarnaAccounts? = nil, wake: (@Sendable ([WorkKey]) async -> Void)? = nil
    ) {
        self.store = store
        self.accounts = accounts
        self.wake = wake
    }

    /// `tokens`: newest first, redacted.
    public func tokens(limit: Int) async throws -> [CustomerTokenView] {
        try await store.customerTokens(limit: max(1, limit)).map(\.redacted)
    }

    /// `token show`: nil when the daemon neither created nor charged `token`. Its status is read from Klarna at the
    /// level of a read someone asked for, when this desk has the accounts.
    public func token(_ token: String) async throws -> CustomerTokenView? {
        guard var view = try await store.customerToken(token) else { return nil }
        guard let account = accounts?[view.account] else {
            view.statusNote = accounts == nil ? "not read: the daemon is not running" : "not read: account \(view.account) is not configured"
            return view.redacted
        }
        do {
            try await account.rateLimiter?.spend(.hinted)
            view.status = try await account.client.readCustomerToken(token).status
        } catch let error as KlarnaAPIError {
            view.statusNote = "Klarna did not answer: \(Reconciler.short(error))"
        }
        return view.redacted
    }

    public enum CancelAnswer: Sendable {
        /// Klarna's answer, or still under way when the wait ran out: the intent as it stands.
        case recorded(Intent)
        /// Asked before: the same cancellation, not another.
        case repeated(Intent)
    }

    /// `token cancel`: records the cancellation of `token` of `account` once (a second ask is the same one), wakes the
    /// engine, and waits up to `wait` for Klarna's answer.
    public func cancel(_ token: String, account: AccountID, by requester: String, wait: Duration) async throws -> CancelAnswer {
        let key = IdempotencyKey.make(.cancelToken, token)
        let record = IngestRecord(
            dedupeKey: nil, kind: "token_cancel_request", source: requester, summary: "cancellation of customer token \(Redact.tail(token))",
            action: .cancelToken(token: token, key: key, account: account), callerWakes: wake != nil)
        switch try await store.ingest(record, at: Date()) {
        case .repeated:
            guard let existing = try await store.intent(key) else { throw Failure(description: "the cancellation \(key) is not in the store") }
            return .repeated(existing.redacted)
        case .refused(_, _, let detail):
            throw Failure(description: detail)
        case .accepted(let keys):
            await wake?(keys)
        }
        let deadline = ContinuousClock.now + wait
        var intent = try await store.intent(key)
        while let current = intent, !current.isFinished, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
            intent = try await store.intent(key)
        }
        guard let intent else { throw Failure(description: "the cancellation \(key) is not in the store") }
        return .recorded(intent.redacted)
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }
}
