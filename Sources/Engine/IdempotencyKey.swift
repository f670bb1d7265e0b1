import Crypto
import Foundation
import ReconcilerCore

/// Deterministic `Klarna-Idempotency-Key`s: UUIDv5 (RFC 9562 §5.5) of the operation and its target, so every retry,
/// in this process or after a crash, sends the same key.
public enum IdempotencyKey {
    /// The namespace of every key this product derives (a fixed random UUID).
    public static let namespace = UUID(uuidString: "6f1c2a4e-8d3b-4f0a-9c5e-2b7d9e4a1c30")!

    public static func uuidV5(namespace: UUID, name: String) -> UUID {
        var bytes = withUnsafeBytes(of: namespace.uuid) { Array($0) }
        bytes.append(contentsOf: Array(name.utf8))
        var hash = Array(Insecure.SHA1.hash(data: bytes).prefix(16))
        hash[6] = (hash[6] & 0x0F) | 0x50  // version 5
        hash[8] = (hash[8] & 0x3F) | 0x80  // RFC 4122 variant
        return hash.withUnsafeBytes { UUID(uuid: $0.load(as: uuid_t.self)) }
    }

    /// The key for `kind` on `target` (a KP session, an order and capture request, an order and expiry date).
    public static func make(_ kind: Intent.Kind, _ target: String) -> String {
        uuidV5(namespace: namespace, name: "\(kind.rawValue):\(target)").uuidString.lowercased()
    }
}
