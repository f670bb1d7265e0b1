/// A Klarna endpoint the sandbox serves, named like the client's operations (`om.create_capture`).
struct KlarnaRoute {
    let name: String
    /// Path parameters in order (session id, token, order id …).
    let parameters: [String]

    private static let table: [(method: String, pattern: [String], name: String)] = [
        ("GET", ["hpp", "v1", "sessions", "*"], "hpp.read_session"),
        ("DELETE", ["hpp", "v1", "sessions", "*"], "hpp.disable_session"),
        ("GET", ["payments", "v1", "sessions", "*"], "kp.read_session"),
        ("POST", ["payments", "v1", "authorizations", "*", "order"], "kp.create_order"),
        ("DELETE", ["payments", "v1", "authorizations", "*"], "kp.cancel_authorization"),
        ("POST", ["payments", "v1", "authorizations", "*", "customer-token"], "kp.create_customer_token"),
        ("GET", ["customer-token", "v1", "tokens", "*"], "ct.read_token"),
        ("POST", ["customer-token", "v1", "tokens", "*", "order"], "ct.create_order"),
        ("PATCH", ["customer-token", "v1", "tokens", "*", "status"], "ct.update_status"),
        ("GET", ["ordermanagement", "v1", "orders", "*"], "om.read_order"),
        ("POST", ["ordermanagement", "v1", "orders", "*", "captures"], "om.create_capture"),
        ("POST", ["ordermanagement", "v1", "orders", "*", "refunds"], "om.create_refund"),
        ("POST", ["ordermanagement", "v1", "orders", "*", "extend-authorization-time"], "om.extend_authorization_time"),
        ("POST", ["ordermanagement", "v1", "orders", "*", "cancel"], "om.cancel_order"),
        ("POST", ["ordermanagement", "v1", "orders", "*", "release-remaining-authorization"], "om.release_remaining_authorization"),
        ("GET", ["v2", "payment", "requests", "*"], "kn.read_payment_request"),
        ("GET", ["v4", "payment", "disputes"], "disputes.list"),
        ("GET", ["v4", "payment", "disputes", "*"], "disputes.read"),
        ("POST", ["v4", "payment", "disputes", "*", "accept-loss"], "disputes.accept_loss"),
        ("POST", ["v4", "payment", "disputes", "*", "attachments"], "disputes.add_attachment"),
        ("POST", ["v4", "payment", "disputes", "*", "represent"], "disputes.represent"),
        ("POST", ["v4", "payment", "disputes", "*", "appeal"], "disputes.appeal"),
        // Before `read_payout`: the first match wins, and "summary" is no payment reference.
        ("GET", ["settlements", "v1", "payouts", "summary"], "settlements.payout_summary"),
        ("GET", ["settlements", "v1", "payouts", "*"], "settlements.read_payout"),
        ("GET", ["settlements", "v1", "payouts"], "settlements.list_payouts"),
        ("GET", ["settlements", "v1", "transactions"], "settlements.list_transactions"),
    ]

    init?(method: String, path: String) {
        let segments = Self.segments(path)
        for entry in Self.table where entry.method == method {
            if let parameters = Self.match(entry.pattern, segments) {
                name = entry.name
                self.parameters = parameters
                return
            }
        }
        return nil
    }

    static func pathExists(_ path: String) -> Bool {
        let segments = segments(path)
        return table.contains { match($0.pattern, segments) != nil }
    }

    private static func segments(_ path: String) -> [String] {
        path.split(separator: "/").map { String($0).removingPercentEncoding ?? String($0) }
    }

    private static func match(_ pattern: [String], _ segments: [String]) -> [String]? {
        guard pattern.count == segments.count else { return nil }
        var parameters: [String] = []
        for (expected, actual) in zip(pattern, segments) {
            if expected == "*" { parameters.append(actual) } else if expected != actual { return nil }
        }
        return parameters
    }
}
