/// How a token that can move money (an authorization token, a customer token) shows outside the store and the
/// outbox: its last six characters, enough to match it in Klarna's portal, not enough to use it.
public enum Redact {
    public static func tail(_ token: String) -> String {
        token.count <= 8 ? "…" : "…" + token.suffix(6)
    }
}
