import Foundation

/// A settlement transaction's `type` (Klarna's Settlements API reference), as an open vocabulary: the known types have names, and a
/// type Klarna adds later is kept as itself (never refused, never renamed) so the line still counts and is shown.
public struct SettlementKind: RawRepresentable, Codable, Sendable, Hashable, CustomStringConvertible {
    public var rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }

    // Stored as the bare string (`"SALE"`), like Klarna sends it.
    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    public var description: String { rawValue }

    /// Captured, shipped order.
    public static let sale = SettlementKind("SALE")
    /// Klarna's fee; several per capture possible.
    public static let fee = SettlementKind("FEE")
    /// A refund (`PURCHASE_RETURN`), or `PAYMENT_DEFAULT`: registered by Klarna, the customer failed to pay.
    public static let `return` = SettlementKind("RETURN")
    /// Klarna refunded the customer on a dispute the merchant lost ("merchant loss").
    public static let reversal = SettlementKind("REVERSAL")
    /// A merchant-protection credit, counted against the reversals.
    public static let reversalMerchantProtection = SettlementKind("REVERSAL_MERCHANT_PROTECTION")
    public static let commission = SettlementKind("COMMISSION")
    /// An agreed order correction; outside Klarna's payout formula.
    public static let correction = SettlementKind("CORRECTION")
    /// Money held back in a reserve, and its release.
    public static let holdback = SettlementKind("HOLDBACK")
    public static let release = SettlementKind("RELEASE")
    /// Miscellaneous charges and credits (payment reminders, liability transfers, cash advances, …).
    public static let charge = SettlementKind("CHARGE")
    public static let credit = SettlementKind("CREDIT")
    /// A fee charged wrongly, given back.
    public static let feeRefund = SettlementKind("FEE_REFUND")
    /// In Klarna's enum, not documented.
    public static let tax = SettlementKind("TAX")

    /// The types Klarna's Settlements API reference lists.
    public static let known: [SettlementKind] = [
        .sale, .fee, .return, .reversal, .reversalMerchantProtection, .commission, .correction, .holdback, .release,
        .charge, .credit, .feeRefund, .tax,
    ]

    public var isKnown: Bool { Self.known.contains(self) }

    /// Lines of these types are about the payout, not about an order: without an order id, or with one the ledger
    /// does not know, they are payout-level lines, never orphans (their `order_id` is not documented).
    public var isPayoutLevel: Bool {
        self == .holdback || self == .release || self == .charge || self == .credit
    }
}

/// Which way a settlement type moves the payout.
public enum SettlementSign: String, Codable, Sendable, CaseIterable {
    /// Adds to the payout whatever sign Klarna's JSON carries.
    case positive
    /// Takes from the payout whatever sign Klarna's JSON carries.
    case negative
    /// Either way: the amount is taken as Klarna sent it (CORRECTION, and every type not known).
    case asSent = "as_sent"
}

extension SettlementKind {
    /// The sign by type. Klarna does not document the sign of a transaction's `amount` in its JSON (its Settlements
    /// API reference), so for the types whose direction is known the magnitude is taken and this sign given to it.
    public var sign: SettlementSign {
        switch rawValue {
        case "SALE", "REVERSAL_MERCHANT_PROTECTION", "COMMISSION", "RELEASE", "CREDIT", "FEE_REFUND":
            return .positive
        case "FEE", "RETURN", "REVERSAL", "HOLDBACK", "CHARGE", "TAX":
            return .negative
        default:
            return .asSent
        }
    }

    /// `amount` as it moves the payout: its magnitude with the type's sign, or as sent when the type has none.
    public func signed(_ amount: Int) -> Int {
        switch sign {
        case .positive: return Minor.magnitude(amount)
        case .negative: return -Minor.magnitude(amount)
        case .asSent: return amount
        }
    }
}

/// Arithmetic on minor units that never traps: an absurd amount from outside is reported, it must not stop the
/// daemon (nor a command that reports it).
public enum Minor {
    /// |amount|, with `Int.min` taken as `Int.max`.
    public static func magnitude(_ amount: Int) -> Int {
        amount == .min ? .max : Swift.abs(amount)
    }

    public static func add(_ a: Int, _ b: Int) -> Int {
        let (sum, overflow) = a.addingReportingOverflow(b)
        if !overflow { return sum }
        return b > 0 ? .max : .min
    }

    public static func subtract(_ a: Int, _ b: Int) -> Int {
        let (difference, overflow) = a.subtractingReportingOverflow(b)
        if !overflow { return difference }
        return b < 0 ? .max : .min
    }

    public static func sum<S: Sequence>(_ values: S) -> Int where S.Element == Int {
        values.reduce(0) { add($0, $1) }
    }

    /// `+5`, `-3`, `0`: a difference as a reason shows it.
    public static func signedText(_ value: Int) -> String {
        value > 0 ? "+\(value)" : "\(value)"
    }
}
