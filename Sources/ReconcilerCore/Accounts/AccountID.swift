/// The Klarna account a unit of work belongs to: an id the operator chooses in `accounts:` (`eu`, `us-brand2`), or
/// `default` for the `klarna:` section alone. It names credentials (`klarna-password.<id>`), metric labels and callback
/// tokens, so it is short and plain: lowercase letters, digits, `-` and `_`, starting with a letter or digit, at most 32.
public struct AccountID: RawRepresentable, Codable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: String

    /// `nil` for anything but a valid id.
    public init?(rawValue: String) {
        guard Self.isValid(rawValue) else { return nil }
        self.rawValue = rawValue
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let id = AccountID(rawValue: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not an account id: \(text)"))
        }
        self = id
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    /// The account of a configuration with only the `klarna:` section, and of every unit written before accounts.
    public static let `default` = AccountID(rawValue: "default")!

    public static let rule = "lowercase letters, digits, - and _, starting with a letter or digit, at most 32 characters"

    public static func isValid(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard (1...32).contains(bytes.count) else { return false }
        func plain(_ byte: UInt8) -> Bool {
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
        }
        return plain(bytes[0]) && bytes.allSatisfy { plain($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") }
    }

    public static func < (lhs: AccountID, rhs: AccountID) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String { rawValue }
}
