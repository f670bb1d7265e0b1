import Foundation
import ReconcilerCore

/// A unit of work the scheduler runs: one session or one order, never two workers at once for the same key.
public enum WorkKey: Hashable, Sendable, CustomStringConvertible {
    case session(String)
    case order(String)
    case paymentRequest(String)
    /// A charge of a customer token until Klarna placed its order, by the charge's idempotency key (never the token,
    /// which moves money: keys go to the journal).
    case charge(String)

    public var description: String {
        switch self {
        case .session(let id): "session:\(id)"
        case .order(let id): "order:\(id)"
        case .paymentRequest(let id): "payment_request:\(id)"
        case .charge(let key): "charge:\(key)"
        }
    }

    public init?(_ text: String) {
        if text.hasPrefix("session:") {
            self = .session(String(text.dropFirst(8)))
        } else if text.hasPrefix("order:") {
            self = .order(String(text.dropFirst(6)))
        } else if text.hasPrefix("payment_request:") {
            self = .paymentRequest(String(text.dropFirst(16)))
        } else if text.hasPrefix("charge:") {
            self = .charge(String(text.dropFirst(7)))
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
        case .paymentRequest, .charge: nil
        }
    }
}
