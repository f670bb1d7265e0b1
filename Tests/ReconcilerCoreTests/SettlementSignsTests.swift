import Foundation
import Testing
@testable import ReconcilerCore

/// The sign of a settlement amount comes from its type (Klarna's JSON sign is not documented).
@Suite("Settlement signs")
struct SettlementSignsTests {
    @Test("Each known type gives its sign to the amount's magnitude, whatever sign Klarna sent; CORRECTION is taken as sent")
    func signsByType() {
        let expected: [(SettlementKind, SettlementSign)] = [
            (.sale, .positive), (.fee, .negative), (.return, .negative), (.reversal, .negative),
            (.reversalMerchantProtection, .positive), (.commission, .positive), (.correction, .asSent),
            (.holdback, .negative), (.release, .positive), (.charge, .negative), (.credit, .positive),
            (.feeRefund, .positive), (.tax, .negative),
        ]
        #expect(expected.map { $0.0 } == SettlementKind.known)
        for (kind, sign) in expected {
            #expect(kind.sign == sign, "\(kind)")
            switch sign {
            case .positive:
                #expect(kind.signed(1_250) == 1_250, "\(kind)")
                #expect(kind.signed(-1_250) == 1_250, "\(kind)")
            case .negative:
                #expect(kind.signed(1_250) == -1_250, "\(kind)")
                #expect(kind.signed(-1_250) == -1_250, "\(kind)")
            case .asSent:
                #expect(kind.signed(1_250) == 1_250, "\(kind)")
                #expect(kind.signed(-1_250) == -1_250, "\(kind)")
            }
            #expect(kind.signed(0) == 0)
        }
    }

    @Test("A type not known is kept as itself and signed as sent")
    func unknownKept() throws {
        let kind = SettlementKind("LOYALTY_BONUS")
        #expect(!kind.isKnown)
        #expect(kind.sign == .asSent)
        #expect(kind.signed(-40) == -40)
        #expect(kind.signed(40) == 40)
        #expect(kind.description == "LOYALTY_BONUS")
        let decoded = try JSONDecoder().decode(SettlementKind.self, from: Data("\"LOYALTY_BONUS\"".utf8))
        #expect(decoded == kind)
        // Case matters: Klarna's types are upper case, and a differently spelled one is not taken for a known one.
        #expect(SettlementKind("sale") != .sale)
        #expect(SettlementKind("sale").sign == .asSent)
    }

    @Test("Known types decode to the named values")
    func knownDecode() throws {
        let decoded = try JSONDecoder().decode([SettlementKind].self, from: Data("[\"SALE\",\"REVERSAL_MERCHANT_PROTECTION\"]".utf8))
        #expect(decoded == [.sale, .reversalMerchantProtection])
        #expect(decoded.allSatisfy { $0.isKnown })
    }

    @Test("A line's signed amount is its type's sign on its amount")
    func lineSignedAmount() {
        let fee = SettledLine(paymentReference: "P", ordinal: 0, kind: .fee, amount: 12_000, currency: "EUR")
        #expect(fee.signedAmount == -12_000)
        let correction = SettledLine(paymentReference: "P", ordinal: 1, kind: .correction, amount: -300, currency: "EUR")
        #expect(correction.signedAmount == -300)
    }

    @Test("An absurd amount does not trap: Int.min is taken as Int.max in magnitude")
    func extremes() {
        #expect(SettlementKind.sale.signed(Int.min) == Int.max)
        #expect(SettlementKind.fee.signed(Int.min) == -Int.max)
        #expect(SettlementKind.correction.signed(Int.min) == Int.min)
        #expect(Minor.add(Int.max, 1) == Int.max)
        #expect(Minor.subtract(Int.min, 1) == Int.min)
        #expect(Minor.subtract(0, Int.min) == Int.max)
    }

    @Test("HOLDBACK, RELEASE, CHARGE and CREDIT are the payout-level types")
    func payoutLevelTypes() {
        #expect(SettlementKind.known.filter(\.isPayoutLevel) == [.holdback, .release, .charge, .credit])
    }
}
