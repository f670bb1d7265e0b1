import Foundation
import ReconcilerCore

/// A unit of work the scheduler runs: one session or one order, never two workers at once for the same key.
public enum WorkKey: Hashable, Sendable, CustomStringConvertible {
    case session(String)
    case order(String)
    case paymentRequest(String)
    /// An intent on a customer token (a charge until Klarna placed its order, a cancellation), by the intent's key
    /// (never the token, which moves money: work keys go to the journal).
    case customerToken(String)

    public var description: String {
        switch self {
        case .session(let id): "session:\(id)"
        case .order(let id): "order:\(id)"
        case .paymentRequest(let id): "payment_request:\(id)"
        case .customerToken(let key): "customer_token:\(key)"
        }
    }

    public init?(_ text: String) {
        if text.hasPrefix("session:") {
            self = .session(String(text.dropFirst(8)))
        } else if text.hasPrefix("order:") {
            self = .order(String(text.dropFirst(6)))
        } else if text.hasPrefix("payment_request:") {
            self = .paymentRequest(String(text.dropFirst(16)))
        } else if text.hasPrefix("customer_token:") {
            self = .customerToken(String(text.dropFirst(15)))
        } else {
            return nil
        }
    }
}

extension WorkKey {
    public init(_ target: RemediationTarget) {
        switch target {
        case .session(let id): self = .session(id)
        case .order(let id): self = .order(id)
        }
    }

    public var remediationTarget: RemediationTarget? {
        switch self {
        case .session(let id): .session(id)
        case .order(let id): .order(id)
        case .paymentRequest, .customerToken: nil
        }
    }
}
