/// How a token that can move money (an authorization token, a customer token) shows outside the store and the
/// outbox: its last six characters, enough to match it in Klarna's portal, not enough to use it.
public enum Redact {
    public static func tail(_ token: String) -> String {
        token.count <= 8 ? "…" : "…" + token.suffix(6)
    }
}

extension TrackedSession {
    /// As people see it: the authorization and customer tokens by their tails.
    public var redacted: TrackedSession {
        var session = self
        session.authorizationToken = authorizationToken.map(Redact.tail)
        session.customerTokenID = customerTokenID.map(Redact.tail)
        return session
    }
}

extension Intent {
    /// A customer-token intent's result is the token itself; a charge's or a cancellation's subject is its token.
    public var redacted: Intent {
        var intent = self
        if kind == .customerToken { intent.result = result.map(Redact.tail) }
        if kind == .charge || kind == .cancelToken { intent.subject = Redact.tail(subject) }
        return intent
    }
}

extension Outcome {
    /// Outcomes carry the tokens for the outbox; people see them redacted.
    public var redacted: Outcome {
        var outcome = self
        outcome.customerTokenID = customerTokenID.map(Redact.tail)
        outcome.klarnaNetworkSessionToken = klarnaNetworkSessionToken.map(Redact.tail)
        return outcome
    }
}
