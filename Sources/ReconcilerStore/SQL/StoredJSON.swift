import Foundation

/// What SQL reads from a stored JSON column, declared once: each path names the keys the encoder writes (the Swift
/// property names, as `JSONEncoder` writes them by default). A test of `StatementTests` encodes each type and fails when a path
/// and the encoder disagree (a property renamed, a coding key added).
public enum StoredJSON {
    /// A stored JSON column's text: keys sorted, so that equal values are equal text.
    public static func encode<T: Encodable>(_ value: T) throws -> String {
        String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    public static func decode<T: Decodable>(_ type: T.Type, _ text: String?) throws -> T {
        try decoder.decode(type, from: Data((text ?? "").utf8))
    }

    /// One of each, made once: every row of every commit and read goes through them.
    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()
    private static let decoder = JSONDecoder()

    /// A path of keys into a JSON document.
    public struct Path: Sendable, Equatable {
        public let keys: [String]

        init(_ keys: String...) {
            precondition(keys.allSatisfy { !$0.isEmpty && $0.allSatisfy { $0.isLetter || $0.isNumber || $0 == "_" } }, "a key is a plain name")
            self.keys = keys
        }
    }

    /// A tracked session's (`TrackedSession`, `sessions.data`) last read, last hint and expiry: numbers, seconds since
    /// 2001 (`JSONEncoder`'s default for dates).
    public static let sessionLastReadAt = Path("lastReadAt")
    public static let sessionLastHintAt = Path("lastHintAt")
    public static let sessionExpiresAt = Path("expiresAt")

    /// A tracked order's (`TrackedOrder`, `orders.data`) currency.
    public static let orderCurrency = Path("currency")

    /// The account of an intent that is its own unit (`Intent`, `intents.data`: a charge, a token's cancellation);
    /// absent for the default account.
    public static let intentAccount = Path("account")
    /// What Klarna created for an intent (`Intent`, `intents.data`): a charge's order id, a customer token.
    public static let intentResult = Path("result")

    /// A recorded settlement line's (`LineReconciliation`, `settlement_lines.data`) merchant reference.
    public static let lineMerchantReference = Path("line", "merchantReference")
}
