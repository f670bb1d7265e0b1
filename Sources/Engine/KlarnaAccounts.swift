import KlarnaAPI
import ReconcilerCore

/// One Klarna account as the engine calls it: its client (hosts and credentials) and its rate budget, which Klarna
/// keeps per merchant id.
public struct KlarnaAccount: Sendable {
    public let id: AccountID
    public let client: KlarnaClient
    public let rateLimiter: RateLimiter?

    public init(id: AccountID, client: KlarnaClient, rateLimiter: RateLimiter?) {
        self.id = id
        self.client = client
        self.rateLimiter = rateLimiter
    }
}

/// The accounts a daemon works for, by id.
public struct KlarnaAccounts: Sendable {
    public let all: [KlarnaAccount]

    public init(_ accounts: [KlarnaAccount]) {
        precondition(!accounts.isEmpty && Set(accounts.map(\.id)).count == accounts.count, "accounts: one or more, ids unique")
        all = accounts
    }

    /// The default account alone: the `klarna:` section.
    public init(client: KlarnaClient, rateLimiter: RateLimiter?) {
        self.init([KlarnaAccount(id: .default, client: client, rateLimiter: rateLimiter)])
    }

    public subscript(_ id: AccountID) -> KlarnaAccount? { all.first { $0.id == id } }

    /// The budget `id`'s routine reads are admitted by in the scheduler: its own; with one account, that one's for
    /// every key (a key planned without its account included).
    public func budget(of id: AccountID) -> RateLimiter? { all.count == 1 ? all[0].rateLimiter : self[id]?.rateLimiter }
}

/// A unit of work of an account this daemon is not configured for: no Klarna call is made for it.
public struct UnconfiguredAccount: Error, CustomStringConvertible {
    public let account: AccountID

    public var description: String {
        "account \(account) is not configured (accounts:): no Klarna call is made for its payments until it is added back"
    }
}
