/// What SQL reads from a stored JSON column, declared once: each path names the keys the encoder writes (the Swift
/// property names, as `JSONEncoder` writes them by default). A test of `StatementTests` encodes each type and fails when a path
/// and the encoder part (a property renamed, a coding key added).
public enum StoredJSON {
    /// A path of keys into a JSON document.
    public struct Path: Sendable, Equatable {
        public let keys: [String]

        init(_ keys: String...) {
            precondition(keys.allSatisfy { !$0.isEmpty && $0.allSatisfy { $0.isLetter || $0.isNumber || $0 == "_" } }, "a key is a plain name")
            self.keys = keys
        }
    }

    /// A recorded settlement line's (`LineReconciliation`, `settlement_lines.data`) merchant reference.
    public static let lineMerchantReference = Path("line", "merchantReference")
}
