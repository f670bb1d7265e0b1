import Crypto
import ReconcilerCore
import Foundation

/// Callback URLs carry a token: an HMAC-SHA256 of the callback kind and the KP session id under the `callback-key`
/// credential, so any callback can be checked without per-session state (`klarna-reconciler callback-url`).
public struct CallbackTokens: Sendable {
    public enum Kind: String, Sendable, CaseIterable {
        case hppStatus = "hpp-status"
        case kpAuthorization = "kp-authorization"
    }

    // Raw bytes: SymmetricKey is not Sendable; a key is built per use (cheap next to the HMAC).
    private let keyBytes: [UInt8]
    private var key: SymmetricKey { SymmetricKey(data: keyBytes) }

    public init(key: [UInt8]) {
        keyBytes = key
    }

    /// The token for `kind`, `kpSessionID` and `account`: 43 characters of base64url. The account is signed with
    /// the session, so a callback cannot be moved to another account; the default account's token is the one made
    /// before accounts existed, so callback URLs given to Klarna earlier stay valid.
    public func token(_ kind: Kind, kpSessionID: String, account: AccountID = .default) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Self.message(kind, kpSessionID, account), using: key)
        return Data(mac).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// Compares in constant time (the MAC check itself), whatever the token looks like.
    public func isValid(_ token: String, _ kind: Kind, kpSessionID: String, account: AccountID = .default) -> Bool {
        guard let mac = Self.base64url(token), mac.count == SHA256.byteCount else { return false }
        return HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: Self.message(kind, kpSessionID, account), using: key)
    }

    private static func message(_ kind: Kind, _ kpSessionID: String, _ account: AccountID) -> [UInt8] {
        // A NUL before the account: no KP session id holds one, so no other session's default token signs the same.
        Array((account == .default ? "\(kind.rawValue):\(kpSessionID)" : "\(kind.rawValue):\(kpSessionID)\u{0}\(account)").utf8)
    }

    /// The callback URL to give Klarna: `base?kp_session_id=…&token=…`, plus `&account=ID` for an account other than
    /// the default one and `&hpp_session_id={{session_id}}` for HPP status callbacks (Klarna fills the placeholder in).
    public func url(_ kind: Kind, kpSessionID: String, base: String, account: AccountID = .default) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        let kp = kpSessionID.addingPercentEncoding(withAllowedCharacters: allowed) ?? kpSessionID
        let separator = base.contains("?") ? "&" : "?"
        var url = "\(base)\(separator)kp_session_id=\(kp)&token=\(token(kind, kpSessionID: kpSessionID, account: account))"
        if account != .default { url += "&account=\(account)" }
        if kind == .hppStatus { url += "&hpp_session_id={{session_id}}" }
        return url
    }

    static func base64url(_ text: String) -> [UInt8]? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64).map(Array.init)
    }
}

/// Klarna Network webhook signatures: HMAC-SHA256 of the raw body under the signing key named by
/// `Klarna-Signing-Key-Id`, lowercase hex in `Klarna-Signature` (Klarna Network webhooks, docs.klarna.com). Several keys at once, for rotation.
public struct SigningKeys: Sendable {
    private let keys: [String: [UInt8]]

    public init(_ keys: [String: [UInt8]]) {
        self.keys = keys
    }

    public var isEmpty: Bool { keys.isEmpty }

    public enum Failure: Equatable, Sendable, CustomStringConvertible {
        case missingHeaders
        case unknownKey(String)
        case mismatch

        public var description: String {
            switch self {
            case .missingHeaders: "Klarna-Signature and Klarna-Signing-Key-Id are required"
            case .unknownKey(let id): "unknown signing key id \(id.prefix(120))"
            case .mismatch: "the signature does not match the body (altered, or signed with another key)"
            }
        }
    }

    /// `nil` when the body is authentic.
    public func check(body: [UInt8], signature: String?, keyID: String?) -> Failure? {
        guard let signature, let keyID, !signature.isEmpty, !keyID.isEmpty else { return .missingHeaders }
        guard let key = keys[keyID] else { return .unknownKey(keyID) }
        guard let mac = Self.hex(signature.trimmingCharacters(in: .whitespaces)), mac.count == SHA256.byteCount,
            HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: body, using: SymmetricKey(data: key))
        else { return .mismatch }
        return nil
    }

    /// How a sender signs: for tests, the sandbox and forwarder tooling.
    public static func sign(body: [UInt8], key: [UInt8]) -> String {
        HMAC<SHA256>.authenticationCode(for: body, using: SymmetricKey(data: key)).map { String(format: "%02x", $0) }.joined()
    }

    static func hex(_ text: String) -> [UInt8]? {
        guard text.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        var index = text.startIndex
        while index < text.endIndex {
            let next = text.index(index, offsetBy: 2)
            guard let byte = UInt8(text[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        return bytes
    }
}
