import Foundation
import ReconcilerCore

/// A customer token as the store knows it: the session whose authorization created it (when the daemon made it), its
/// charges and its cancellation. `status` is Klarna's, read by the daemon when it was asked for one token
/// (`token show`); nil in a listing, or when Klarna could not be read.
public struct CustomerTokenView: Sendable, Codable, Equatable {
    public var token: String
    public var account: AccountID
    /// The HPP session whose authorization created it, and when; nil for a token the daemon only charged.
    public var createdBy: String?
    public var createdAt: Date?
    /// Its charges, oldest first: each charge's state, and its order id (`result`) once placed.
    public var charges: [Intent]
    public var cancellation: Intent?
    public var status: String?
    /// Why `status` is missing when it was asked for (the daemon is not running, Klarna did not answer).
    public var statusNote: String?

    public init(token: String, account: AccountID) {
        self.token = token
        self.account = account
        charges = []
    }

    /// As people see it: the token and the charges' subjects by their tails.
    public var redacted: CustomerTokenView {
        var view = self
        view.token = Redact.tail(token)
        view.charges = charges.map(\.redacted)
        view.cancellation = cancellation?.redacted
        return view
    }

    /// The views of the intents of customer tokens in `rows` (an intent's JSON, and the account of the session that
    /// created a token), in the order each token first appears.
    static func views(_ rows: [any StatementRow]) throws -> [CustomerTokenView] {
        var order: [String] = []
        var views: [String: CustomerTokenView] = [:]
        for row in rows {
            let intent = try row.decoded(Intent.self)
            let token: String
            let account: AccountID
            switch intent.kind {
            case .customerToken:
                guard intent.state == .confirmed, let made = intent.result else { continue }
                token = made
                account = row.string(1).flatMap(AccountID.init(rawValue:)) ?? .default
            case .charge, .cancelToken:
                token = intent.subject
                account = intent.ownAccount
            default:
                continue
            }
            if views[token] == nil {
                order.append(token)
                views[token] = CustomerTokenView(token: token, account: account)
            }
            switch intent.kind {
            case .customerToken:
                views[token]?.createdBy = intent.subject
                views[token]?.createdAt = intent.updatedAt
                views[token]?.account = account
            case .charge: views[token]?.charges.append(intent)
            default: views[token]?.cancellation = intent
            }
        }
        return order.compactMap { views[$0] }
    }
}

extension OperatorStore where Self: StatementRunner {
    /// The customer tokens the daemon created or charged, the one with the newest intent first, at most `limit`.
    public func customerTokens(limit: Int) async throws -> [CustomerTokenView] {
        let tokens = try await rows(
            of: """
                SELECT token, max(created_at) AS newest FROM (
                  SELECT CASE WHEN kind = 'customer_token' THEN \(json: "data", StoredJSON.intentResult) ELSE subject END AS token, created_at
                  FROM intents WHERE kind IN ('charge', 'cancel_customer_token') OR (kind = 'customer_token' AND state = 'confirmed')) t
                WHERE token IS NOT NULL GROUP BY token ORDER BY newest DESC LIMIT \(limit)
                """
        ).compactMap { $0.string(0) }
        let views = try CustomerTokenView.views(try await rows(of: Self.tokenIntents(tokens)))
        return tokens.compactMap { token in views.first { $0.token == token } }
    }

    /// The token `token` as the store knows it; nil when the daemon neither created nor charged it.
    public func customerToken(_ token: String) async throws -> CustomerTokenView? {
        try CustomerTokenView.views(try await rows(of: Self.tokenIntents([token]))).first
    }

    /// The intents of `tokens` (their creation, charges and cancellations), oldest first, beside the account of the
    /// session that created a token.
    private static func tokenIntents(_ tokens: [String]) -> Statement {
        """
        SELECT i.data, s.account FROM intents i LEFT JOIN sessions s ON i.kind = 'customer_token' AND s.hpp_session_id = i.subject
        WHERE (i.kind IN ('charge', 'cancel_customer_token') AND i.subject \(anyOf: tokens))
          OR (i.kind = 'customer_token' AND \(json: "i.data", StoredJSON.intentResult) \(anyOf: tokens))
        ORDER BY i.created_at
        """
    }
}
