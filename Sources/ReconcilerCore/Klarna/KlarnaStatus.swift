/// Klarna's status vocabularies, as the domain decides on them: open enums, since Klarna adds values without notice.
/// They live in the core (not in the API client) so that the state machines compare statuses by type, never by string.

/// A string-valued Klarna enum that stays open: values this build does not know decode as themselves instead of
/// failing the whole response (Klarna adds statuses without notice; the daemon keeps polling on an unknown one).
public protocol OpenEnum: RawRepresentable, Codable, Hashable, Sendable, CustomStringConvertible
where RawValue == String {
    init(rawValue: String)
    static var knownValues: [Self] { get }
}

extension OpenEnum {
    public init(from decoder: any Decoder) throws {
        self.init(rawValue: try decoder.singleValueContainer().decode(String.self))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    public var description: String { rawValue }

    /// `false` for a value Klarna sent that this build has no name for.
    public var isKnown: Bool { Self.knownValues.contains(self) }
}

/// HPP session status (Klarna's HPP API reference).
public struct HPPSessionStatus: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let waiting = Self(rawValue: "WAITING")
    public static let back = Self(rawValue: "BACK")
    public static let inProgress = Self(rawValue: "IN_PROGRESS")
    public static let manualIDCheck = Self(rawValue: "MANUAL_ID_CHECK")
    public static let completed = Self(rawValue: "COMPLETED")
    public static let cancelled = Self(rawValue: "CANCELLED")
    public static let failed = Self(rawValue: "FAILED")
    public static let disabled = Self(rawValue: "DISABLED")
    public static let error = Self(rawValue: "ERROR")
    public static let knownValues: [Self] = [
        .waiting, .back, .inProgress, .manualIDCheck, .completed, .cancelled, .failed, .disabled, .error,
    ]
}

/// KP session status: `complete` once an order has been placed with its authorization.
public struct PaymentSessionStatus: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let complete = Self(rawValue: "complete")
    public static let incomplete = Self(rawValue: "incomplete")
    public static let knownValues: [Self] = [.complete, .incomplete]
}

/// KP session `intent`.
public struct PaymentIntent: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let buy = Self(rawValue: "buy")
    public static let tokenize = Self(rawValue: "tokenize")
    public static let buyAndTokenize = Self(rawValue: "buy_and_tokenize")
    public static let knownValues: [Self] = [.buy, .tokenize, .buyAndTokenize]
}

/// Order fraud status; a `PENDING` order must never be captured.
public struct FraudStatus: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let accepted = Self(rawValue: "ACCEPTED")
    public static let pending = Self(rawValue: "PENDING")
    public static let rejected = Self(rawValue: "REJECTED")
    public static let knownValues: [Self] = [.accepted, .pending, .rejected]
}

/// Order Management order status.
public struct OrderStatus: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let authorized = Self(rawValue: "AUTHORIZED")
    public static let partCaptured = Self(rawValue: "PART_CAPTURED")
    public static let captured = Self(rawValue: "CAPTURED")
    public static let cancelled = Self(rawValue: "CANCELLED")
    public static let expired = Self(rawValue: "EXPIRED")
    public static let closed = Self(rawValue: "CLOSED")
    public static let knownValues: [Self] = [.authorized, .partCaptured, .captured, .cancelled, .expired, .closed]
}

/// Klarna Network payment request state (Klarna Network; names vary across API versions).
public struct PaymentRequestState: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let submitted = Self(rawValue: "SUBMITTED")
    public static let inProgress = Self(rawValue: "IN_PROGRESS")
    public static let completed = Self(rawValue: "COMPLETED")
    public static let canceled = Self(rawValue: "CANCELED")
    public static let declined = Self(rawValue: "DECLINED")
    public static let expired = Self(rawValue: "EXPIRED")
    public static let knownValues: [Self] = [.submitted, .inProgress, .completed, .canceled, .declined, .expired]
}
