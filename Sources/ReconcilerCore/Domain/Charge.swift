import Foundation

/// One line of a charge's order, as Klarna's order line takes it (minor units; `tax_rate` in hundredths of a percent).
public struct ChargeLine: Codable, Sendable, Equatable {
    public var name: String
    public var quantity: Int
    public var unitPrice: Int
    public var totalAmount: Int
    public var taxRate: Int?
    public var totalTaxAmount: Int?
    public var reference: String?

    public init(
        name: String, quantity: Int, unitPrice: Int, totalAmount: Int, taxRate: Int? = nil, totalTaxAmount: Int? = nil, reference: String? = nil
    ) {
        self.name = name
        self.quantity = quantity
        self.unitPrice = unitPrice
        self.totalAmount = totalAmount
        self.taxRate = taxRate
        self.totalTaxAmount = totalTaxAmount
        self.reference = reference
    }

    enum CodingKeys: String, CodingKey {
        case name, quantity, reference
        case unitPrice = "unit_price"
        case totalAmount = "total_amount"
        case taxRate = "tax_rate"
        case totalTaxAmount = "total_tax_amount"
    }
}

/// A renewal the shop asks for (`klarna-reconciler charge`, `POST /v1/customer-tokens/{token}/charges`): an order
/// placed with a customer token. The shop's reference makes it idempotent: the same reference on the same token is
/// one charge.
public struct ChargeAsk: Sendable, Equatable {
    public var token: String
    /// 1–255 characters; goes to Klarna as `merchant_reference1` unless ``merchantReference1`` names another.
    public var reference: String
    /// Minor units, positive.
    public var amount: Int
    /// ISO 4217, three upper-case letters.
    public var currency: String
    public var taxAmount: Int
    /// Nil: one line for the whole amount, named after the reference.
    public var lines: [ChargeLine]?
    public var merchantReference1: String?
    public var merchantReference2: String?
    /// Nil: the account's capture policy.
    public var capture: CapturePolicy?
    /// Nil: the default account.
    public var account: AccountID?

    public init(
        token: String, reference: String, amount: Int, currency: String, taxAmount: Int = 0, lines: [ChargeLine]? = nil,
        merchantReference1: String? = nil, merchantReference2: String? = nil, capture: CapturePolicy? = nil, account: AccountID? = nil
    ) {
        self.token = token
        self.reference = reference
        self.amount = amount
        self.currency = currency
        self.taxAmount = taxAmount
        self.lines = lines
        self.merchantReference1 = merchantReference1
        self.merchantReference2 = merchantReference2
        self.capture = capture
        self.account = account
    }

    /// The target its idempotency key is derived from: one key per token and reference (the token's length first, so
    /// that no token and reference together spell another pair).
    public var keyTarget: String { "\(token.utf8.count):\(token):\(reference)" }

    /// The lines Klarna is sent: the shop's, or one line for the whole amount.
    public var orderLines: [ChargeLine] {
        lines ?? [
            ChargeLine(
                name: "Renewal \(reference)", quantity: 1, unitPrice: amount, totalAmount: amount,
                taxRate: nil, totalTaxAmount: taxAmount == 0 ? nil : taxAmount, reference: nil)
        ]
    }

    /// Why the ask cannot go to Klarna as it stands (the field and what is wrong with it), or nil.
    public var problem: (field: String, reason: String)? {
        guard amount > 0 else { return ("amount", "must be a positive whole number of minor units") }
        guard currency.count == 3, currency.allSatisfy({ $0.isASCII && $0.isUppercase }) else {
            return ("currency", "must be three upper-case letters (ISO 4217), like EUR")
        }
        guard taxAmount >= 0, taxAmount <= amount else { return ("tax_amount", "must be 0 or more, and at most the amount") }
        if let problem = RefundAsk.textProblem(reference) { return ("reference", problem) }
        for (field, text) in [("merchant_reference1", merchantReference1), ("merchant_reference2", merchantReference2)] {
            if let text, let problem = RefundAsk.textProblem(text) { return (field, problem) }
        }
        if let lines {
            guard (1...1000).contains(lines.count) else { return ("order_lines", "must hold 1–1000 lines") }
            for (index, line) in lines.enumerated() {
                if let problem = RefundAsk.textProblem(line.name) { return ("order_lines[\(index)].name", problem) }
                guard line.quantity > 0 else { return ("order_lines[\(index)].quantity", "must be positive") }
            }
            let total = lines.reduce(0) { $0 + $1.totalAmount }
            guard total == amount else { return ("order_lines", "total_amount adds up to \(total), not the amount \(amount)") }
        }
        return nil
    }

    /// The body of `POST /customer-token/v1/tokens/{token}/order`, built once when the charge is recorded so that every
    /// attempt sends the same bytes.
    public func orderBody() throws -> String {
        struct Body: Encodable {
            let purchaseCurrency: String
            let orderAmount: Int
            let orderTaxAmount: Int
            let orderLines: [ChargeLine]
            let merchantReference1: String
            let merchantReference2: String?
            let autoCapture: Bool

            enum CodingKeys: String, CodingKey {
                case purchaseCurrency = "purchase_currency"
                case orderAmount = "order_amount"
                case orderTaxAmount = "order_tax_amount"
                case orderLines = "order_lines"
                case merchantReference1 = "merchant_reference1"
                case merchantReference2 = "merchant_reference2"
                case autoCapture = "auto_capture"
            }
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let body = Body(
            purchaseCurrency: currency, orderAmount: amount, orderTaxAmount: taxAmount, orderLines: orderLines,
            merchantReference1: merchantReference1 ?? reference, merchantReference2: merchantReference2, autoCapture: false)
        return String(decoding: try encoder.encode(body), as: UTF8.self)
    }
}

/// What a charge intent carries besides the amount and the reference: what its order is followed by once Klarna
/// placed it, and the request, built once.
public struct ChargeTerms: Codable, Sendable, Equatable {
    public var currency: String
    public var capture: CapturePolicy
    /// The order's `merchant_reference1`.
    public var merchantReference: String
    /// The body sent on every attempt.
    public var body: String
    /// When the first attempt was marked sent: Klarna answers the same key the same way for 24 hours from then.
    public var firstSentAt: Date?

    public init(currency: String, capture: CapturePolicy, merchantReference: String, body: String) {
        self.currency = currency
        self.capture = capture
        self.merchantReference = merchantReference
        self.body = body
    }
}

/// The rules for charges: which requests are recorded, what a read of the token allows, what Klarna's answers mean.
public enum ChargeRules {
    /// How long Klarna answers a `Klarna-Idempotency-Key` the same way (Klarna's customer-token API, 24 hours).
    public static let idempotencyWindow: Duration = .seconds(24 * 3_600)

    public enum Request: Sendable, Equatable {
        /// A new intent to record (and wake the charge's key for).
        case record(Intent)
        /// The same reference with the same amount and currency: the charge already asked for.
        case repeated(Intent)
        /// Refused before anything is recorded: the HTTP status, a stable word and the reason.
        case refused(status: Int, error: String, reason: String)
    }

    /// Decides a request from the intent already recorded under its idempotency key `key` (`existing`).
    /// `capture`: the policy its order is followed by (the ask's, else its account's).
    public static func request(_ ask: ChargeAsk, key: String, capture: CapturePolicy, existing: Intent?, now: Date) -> Request {
        if let existing {
            guard existing.kind == .charge, existing.amount == ask.amount, existing.charge?.currency == ask.currency else {
                let was = existing.charge.map { "\(existing.amount ?? 0) \($0.currency)" } ?? "another request"
                return .refused(
                    status: 409, error: "reference_conflict",
                    reason:
                        "reference \(ask.reference) on this customer token already names a charge of \(was) (\(existing.state.rawValue)); a charge of \(ask.amount) \(ask.currency) needs a reference of its own"
                )
            }
            return .repeated(existing)
        }
        let body: String
        do {
            body = try ask.orderBody()
        } catch {
            return .refused(status: 400, error: "bad_field", reason: "the order could not be encoded: \(error)")
        }
        var intent = Intent(key: key, kind: .charge, subject: ask.token, amount: ask.amount, now: now)
        intent.reference = ask.reference
        intent.charge = ChargeTerms(currency: ask.currency, capture: capture, merchantReference: ask.merchantReference1 ?? ask.reference, body: body)
        intent.account = ask.account == .default ? nil : ask.account
        intent.nextAttemptAt = now
        return .record(intent)
    }

    /// What a read of the token before the first attempt allows: nil to send, else why nothing is sent. Klarna's
    /// status is free text (`ACTIVE` in its example, lower case in its description): compared without regard to case.
    public static func refusal(tokenStatus: String?) -> String? {
        guard let status = tokenStatus, status.uppercased() == "ACTIVE" else {
            return "the customer token is \(tokenStatus.map { "\($0)" } ?? "without a status"), not ACTIVE: nothing was charged"
        }
        return nil
    }

    /// What Klarna's refusal of a charge means. `fraudStatus` and `reason`: what its error body carried.
    public enum Refusal: Sendable, Equatable {
        /// Klarna declined to charge the customer (`charge_declined`, final for the reference).
        case declined
        /// The token or the request is wrong (`charge_failed`, final for the reference).
        case failed
        /// Not an answer about the charge: retried with the same key.
        case retry
    }

    /// A `403`, or a `400` whose body carries `fraud_status` or `reason`, is a decline: Klarna's spec leaves the two
    /// alike (its 403 has no body schema; its 400 schema carries the decline's fields). A `404` is an unknown token;
    /// another 4xx a request Klarna will not take (a currency other than the token's: `409`). 408, 425, 429 and 5xx
    /// are not answers about the charge.
    public static func refusal(status: Int, fraudStatus: String?, reason: String?) -> Refusal {
        switch status {
        case 403: return .declined
        case 400 where fraudStatus != nil || reason != nil: return .declined
        case 408, 425, 429, 500...: return .retry
        default: return .failed
        }
    }

    /// Whether another attempt may still go out with the same key: only while Klarna answers the key the same way,
    /// counted from the first attempt's sent mark, with room for the longest call.
    /// (Reached as the clock counts reaching: a store keeps times to the microsecond, and a step due at the window's
    /// end must end the charge there, not send once more.)
    public static func maySendAgain(_ intent: Intent, longestCall: Duration, now: Date) -> Bool {
        guard let first = intent.charge?.firstSentAt else { return true }
        return !now.addingTimeInterval(longestCall.timeInterval).hasReached(first.addingTimeInterval(idempotencyWindow.timeInterval))
    }

    /// The order a placed charge makes: followed like any order, by the charge's capture policy, in its account.
    public static func order(_ intent: Intent, orderID: String, now: Date) -> TrackedOrder {
        var order = TrackedOrder(
            orderID: orderID, hppSessionID: nil, kpSessionID: nil, merchantReference: intent.charge?.merchantReference,
            capturePolicy: intent.charge?.capture ?? .immediate, placedBy: .none, createdAt: now)
        order.currency = intent.charge?.currency
        // `charge_placed` says it: no `order_placed` besides.
        order.placedOutcomeRecorded = true
        order.account = intent.ownAccount
        order.isRenewal = true
        return order
    }

    /// Its next run: a renewal's level of urgency, in the charge's account; nil once finished.
    public static func plan(_ intent: Intent, due: Date) -> WorkPlan? {
        guard !intent.isFinished else { return nil }
        return WorkPlan(due: due, urgency: .renewal, account: intent.ownAccount)
    }

    /// An outcome of the charge `intent`.
    public static func outcome(_ kind: OutcomeKind, _ reason: String, _ intent: Intent, orderID: String? = nil, fraudStatus: String? = nil) -> Outcome
    {
        var outcome = Outcome(
            kind: kind, reason: reason, orderID: orderID, merchantReference: intent.charge?.merchantReference, amount: intent.amount,
            currency: intent.charge?.currency, fraudStatus: fraudStatus, customerTokenID: intent.subject)
        outcome.chargeReference = intent.reference
        return outcome
    }
}

/// Cancelling a customer token (`klarna-reconciler token cancel`): an intent of its own, asked for once.
public enum TokenCancelRules {
    /// The intent that cancels `token` of `account`, under `key`.
    public static func intent(token: String, key: String, account: AccountID, now: Date) -> Intent {
        var intent = Intent(key: key, kind: .cancelToken, subject: token, now: now)
        intent.account = account == .default ? nil : account
        intent.nextAttemptAt = now
        return intent
    }

    /// The outcome of a cancellation: done, or (`kind` needs attention) not done and why.
    public static func outcome(_ kind: OutcomeKind, _ reason: String, _ intent: Intent) -> Outcome {
        Outcome(kind: kind, reason: reason, customerTokenID: intent.subject)
    }
}
