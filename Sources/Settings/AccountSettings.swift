import Engine
import Foundation
import KlarnaAPI
import ReconcilerCore
import Yams

/// One Klarna account the daemon works for: where its API is, who the daemon is to it, and what it overrides of the
/// daemon-wide rate budget, capture policy and settlement and dispute switches.
public struct AccountSettings: Sendable {
    public var id: AccountID
    public var klarna: KlarnaConfiguration
    /// Where its password came from, for `check-config`.
    public var passwordSource: String
    /// The id Klarna names this account by in Klarna Network and dispute webhooks (`metadata.merchant_id`,
    /// `subject_account_id` or `account_id`); by default the username's part before its first `_` (`K123456` of
    /// `K123456_abcdef`).
    public var merchantID: String
    public var ratePerSecond: Double
    public var rateBurst: Double
    public var capturePolicy: CapturePolicy
    public var settlementsEnabled: Bool
    public var disputesEnabled: Bool

    /// The merchant id a username implies: Klarna's API usernames are the merchant id, `_` and a suffix.
    public static func merchantID(ofUsername username: String) -> String {
        username.split(separator: "_", maxSplits: 1).first.map(String.init) ?? username
    }
}

extension Settings {
    /// The account a payment belongs to when its delivery names none: the only one configured, else the one named
    /// `default`, else none.
    public var unnamedAccount: AccountID? {
        accounts.count == 1 ? accounts[0].id : accounts.contains { $0.id == .default } ? .default : nil
    }

    public func account(_ id: AccountID) -> AccountSettings? { accounts.first { $0.id == id } }
}

/// The keys an entry of `accounts:` takes.
public enum AccountKeys {
    public static let all: [String] = [
        "id", "base_url", "network_base_url", "region", "environment", "username", "password_file", "merchant_id",
        "rate_limit.requests_per_second", "rate_limit.burst", "capture.default_policy", "settlements.enabled", "disputes.enabled",
    ]
}

extension Settings {
    /// The entries of `accounts:` as text by key (`rate_limit.burst`), in their order; `nil` without the section.
    /// Refuses what is not a list of mappings of known keys with single values.
    static func accountEntries(_ text: String, path: String) throws(SettingsError) -> [[String: String]]? {
        // Read as written (the text of each value), like the rest of the file; checkKeys parsed it already.
        guard let root = try? Yams.compose(yaml: text), let section = root.mapping?["accounts"], section.null == nil else { return nil }
        guard let list = section.sequence, !list.isEmpty else {
            throw SettingsError("accounts", "must be a list of accounts (- id: eu …), each with id, username and base_url or region")
        }
        var entries: [[String: String]] = []
        for (index, item) in list.enumerated() {
            let name = "accounts[\(index + 1)]"
            guard let mapping = item.mapping else { throw SettingsError(name, "must be a mapping (id:, username:, …)") }
            var entry: [String: String] = [:]
            func flatten(_ value: Node, _ key: String) throws(SettingsError) {
                if let nested = value.mapping {
                    for (child, inner) in nested { try flatten(inner, "\(key).\(child.string ?? "")") }
                    return
                }
                guard AccountKeys.all.contains(key) else {
                    let secret =
                        Settings.namesASecret(key) ? "; secrets are never read from config.yaml: use the credential klarna-password.<id>" : ""
                    throw SettingsError("\(name).\(key)", "unknown key\(secret); an account takes: \(AccountKeys.all.joined(separator: ", "))")
                }
                guard let scalar = value.scalar, value.null == nil else { throw SettingsError("\(name).\(key)", "must be a single value") }
                entry[key] = scalar.string
            }
            for (key, value) in mapping { try flatten(value, key.string ?? "") }
            entries.append(entry)
        }
        return entries
    }

    /// The accounts: each entry of `accounts:`, or, without that section, the `klarna:` section as the default account.
    /// `defaults` holds the daemon-wide values an account does not override.
    static func buildAccounts(
        _ values: Values, entries: [[String: String]]?, credentials: Secrets, needsPassword: Bool, defaults: AccountSettings.Defaults
    ) throws(SettingsError) -> [AccountSettings] {
        guard let entries else {
            let username = try values.string("klarna.username")
            guard let username, !username.isEmpty else {
                throw SettingsError("klarna.username", "missing (the Klarna API username, e.g. K123456_abcdef)")
            }
            let (password, source) =
                needsPassword ? try klarnaPassword(values, credentials: credentials, account: nil) : ("", "not loaded")
            let klarna = try klarnaAPI(values, "klarna.", BasicCredentials(username: username, password: password))
            return [
                AccountSettings(
                    id: .default, klarna: klarna, passwordSource: source, merchantID: AccountSettings.merchantID(ofUsername: username),
                    ratePerSecond: defaults.ratePerSecond, rateBurst: defaults.rateBurst, capturePolicy: defaults.capturePolicy,
                    settlementsEnabled: defaults.settlementsEnabled, disputesEnabled: defaults.disputesEnabled)
            ]
        }
        // The `klarna:` section keeps only what every account shares (timeouts).
        for key in ["base_url", "network_base_url", "region", "environment", "username", "password_file"] {
            if try values.string("klarna.\(key)") != nil {
                throw SettingsError("klarna.\(key)", "with accounts:, each account names its own \(key); move it into an account")
            }
        }
        var accounts: [AccountSettings] = []
        for (index, entry) in entries.enumerated() {
            guard let text = entry["id"], !text.isEmpty else {
                throw SettingsError("accounts[\(index + 1)].id", "missing (an id you choose: eu, us, brand-2; \(AccountID.rule))")
            }
            guard let id = AccountID(rawValue: text) else {
                throw SettingsError("accounts[\(index + 1)].id", "\"\(text)\" is not an account id: \(AccountID.rule)")
            }
            guard !accounts.contains(where: { $0.id == id }) else { throw SettingsError("accounts[\(index + 1)].id", "\(id) is named twice") }
            let account = Values(entries: entry, configPath: values.configPath, prefix: "accounts[\(id)].")
            guard let username = try account.string("username"), !username.isEmpty else {
                throw SettingsError(account.name("username"), "missing (the account's Klarna API username, e.g. K123456_abcdef)")
            }
            let (password, source) =
                needsPassword ? try klarnaPassword(account, credentials: credentials, account: id) : ("", "not loaded")
            let klarna = try klarnaAPI(account, "", BasicCredentials(username: username, password: password))
            let merchantID = try account.string("merchant_id") ?? AccountSettings.merchantID(ofUsername: username)
            if let other = accounts.first(where: { $0.merchantID == merchantID }) {
                throw SettingsError(
                    account.name("merchant_id"),
                    "\(merchantID) is account \(other.id)'s too: webhooks are routed by it (set merchant_id on each account)")
            }
            accounts.append(
                AccountSettings(
                    id: id, klarna: klarna, passwordSource: source, merchantID: merchantID,
                    ratePerSecond: try account.double("rate_limit.requests_per_second", default: defaults.ratePerSecond, range: 0.1...10_000),
                    rateBurst: try account.double("rate_limit.burst", default: defaults.rateBurst, range: 1...10_000),
                    capturePolicy: try account.choice("capture.default_policy", CapturePolicy.self) ?? defaults.capturePolicy,
                    settlementsEnabled: try account.bool("settlements.enabled", default: defaults.settlementsEnabled),
                    disputesEnabled: try account.bool("disputes.enabled", default: defaults.disputesEnabled)))
        }
        return accounts
    }

    /// Klarna's hosts and credentials from `klarna.*` (`prefix` "klarna.") or an account's keys (`prefix` "").
    private static func klarnaAPI(_ values: Values, _ prefix: String, _ credentials: BasicCredentials) throws(SettingsError) -> KlarnaConfiguration {
        let network = try values.string(prefix + "network_base_url")
        if let network { try validateURL(network, key: values.name(prefix + "network_base_url")) }
        if let baseURL = try values.string(prefix + "base_url") {
            try validateURL(baseURL, key: values.name(prefix + "base_url"))
            return KlarnaConfiguration(baseURL: baseURL, networkBaseURL: network, credentials: credentials)
        }
        let region = try values.choice(prefix + "region", KlarnaConfiguration.Region.self)
        let environment = try values.choice(prefix + "environment", KlarnaConfiguration.Environment.self)
        guard let region, let environment else {
            throw SettingsError(
                values.name(prefix + "base_url"),
                "missing: set \(prefix)base_url, or \(prefix)region (eu|na|oc) and \(prefix)environment (playground|production)")
        }
        var klarna = KlarnaConfiguration(region: region, environment: environment, credentials: credentials)
        if let network { klarna.networkBaseURL = network }
        return klarna
    }

    /// The `klarna:` section's password (`account` nil: the credential `klarna-password`), or an account's (the
    /// credential `klarna-password.<id>`, else its `password_file`, else the unit's credential file).
    private static func klarnaPassword(_ values: Values, credentials: Secrets, account: AccountID?) throws(SettingsError) -> (String, String) {
        guard let account else {
            guard let found = try secret(values, "klarna.password_file", credential: "klarna.password", credentials) else {
                throw SettingsError("klarna password", "none found: " + credentials.lookedIn("klarna-password", key: "klarna.password_file"))
            }
            return found
        }
        // A credential's name with a dot in it: read as the file it is, not through the key-mapping provider.
        let name = "klarna-password.\(account)"
        if let directory = credentials.directory, FileManager.default.fileExists(atPath: "\(directory)/\(name)") {
            return (try read("\(directory)/\(name)", key: name), "credential \(name)")
        }
        if let file = try values.string("password_file") {
            let path =
                file.hasPrefix("/") ? file : URL(fileURLWithPath: values.configPath).deletingLastPathComponent().appendingPathComponent(file).path
            return (try read(path, key: values.name("password_file")), "file \(path)")
        }
        let stored = credentials.credstorePath(name)
        if FileManager.default.isReadableFile(atPath: stored) { return (try read(stored, key: name), "file \(stored)") }
        throw SettingsError("accounts[\(account)] password", "none found: " + credentials.lookedIn(name, key: values.name("password_file")))
    }
}

extension AccountSettings {
    /// The daemon-wide values an account takes unless it overrides them.
    struct Defaults {
        var ratePerSecond: Double
        var rateBurst: Double
        var capturePolicy: CapturePolicy
        var settlementsEnabled: Bool
        var disputesEnabled: Bool
    }
}
