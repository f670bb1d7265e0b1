import ReconcilerCore

/// Which configured account a delivery belongs to: the one a track request names, the one whose merchant id a Klarna
/// webhook carries, or the only one configured. Anything else is refused with the reason.
public struct AccountRouting: Sendable {
    public struct Account: Sendable {
        public var id: AccountID
        /// What Klarna names the account by in its webhooks' metadata.
        public var merchantID: String?
        public var capturePolicy: CapturePolicy

        public init(id: AccountID, merchantID: String?, capturePolicy: CapturePolicy) {
            self.id = id
            self.merchantID = merchantID
            self.capturePolicy = capturePolicy
        }
    }

    public let accounts: [Account]

    public init(_ accounts: [Account]) {
        precondition(!accounts.isEmpty)
        self.accounts = accounts
    }

    /// The only account, when there is one.
    public var sole: Account? { accounts.count == 1 ? accounts[0] : nil }

    private var names: String { accounts.map(\.id.rawValue).joined(separator: ", ") }

    /// The account a request names; when it names none, the only one, else the `default` one (as a callback URL
    /// without an account is its), else refused.
    public func named(_ id: AccountID?) throws(Rejection) -> Account {
        guard let id else {
            guard let account = sole ?? accounts.first(where: { $0.id == .default }) else {
                throw Rejection(422, "no_account", "account is required: this daemon serves accounts \(names), none of them default")
            }
            return account
        }
        guard let account = accounts.first(where: { $0.id == id }) else {
            throw Rejection(422, "unknown_account", "account \(id) is not configured here (accounts: \(names))")
        }
        return account
    }

    /// The account whose merchant id a Klarna webhook carries; without one, the only account.
    public func route(merchantID: String?) throws(Rejection) -> Account {
        if let merchantID, let account = accounts.first(where: { $0.merchantID == merchantID }) { return account }
        if let sole { return sole }
        throw Rejection(
            422, "unknown_account",
            merchantID.map { "the webhook's merchant \($0.prefix(64)) is no configured account's merchant_id (accounts: \(names))" }
                ?? "the webhook names no merchant (metadata.merchant_id, subject_account_id or account_id), and this daemon serves accounts \(names)")
    }
}
