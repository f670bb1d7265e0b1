/// SQL that takes a store's schema back to a step before the current one, for tests of migrations.
public enum Schema {
    /// What the accounts steps made (SQLite's 12 and 13, PostgreSQL's 9 and 10) undone: the store of the release before
    /// accounts. `time`: the dialect's column type for a point in time.
    public static func beforeAccounts(time: String) -> String {
        """
        DROP INDEX payouts_account; ALTER TABLE payouts DROP COLUMN account;
        ALTER TABLE disputes DROP COLUMN account; ALTER TABLE dispute_hints DROP COLUMN account;
        CREATE TABLE dispute_lists (id integer PRIMARY KEY, listed_through \(time) NOT NULL);
        INSERT INTO dispute_lists (id, listed_through) SELECT 1, listed_through FROM dispute_account_lists WHERE account = 'default';
        DROP TABLE dispute_account_lists;
        ALTER TABLE sessions DROP COLUMN account; ALTER TABLE orders DROP COLUMN account; ALTER TABLE payment_requests DROP COLUMN account
        """
    }
}
