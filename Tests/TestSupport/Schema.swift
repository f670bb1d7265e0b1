/// SQL that takes a store's schema back to a step before the current one, for tests of migrations.
public enum Schema {
    /// What the accounts step made (SQLite's 12, PostgreSQL's 9): the store of the release before accounts.
    public static let dropAccountColumns =
        "ALTER TABLE sessions DROP COLUMN account; ALTER TABLE orders DROP COLUMN account; ALTER TABLE payment_requests DROP COLUMN account"
}
