import Engine
import Foundation
import ReconcilerCore
import Testing
@testable import Settings

/// `accounts:`: several Klarna accounts, each with its hosts, credentials and overrides.
@Suite("Configuration: accounts")
struct AccountSettingsTests {
    /// Loads `yaml` with the password files `pw` and `pw-us`, and `credentials` as the unit's credential directory.
    func load(_ yaml: String, credentials: [String: String] = [:]) async throws(SettingsError) -> Settings {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        try! yaml.write(toFile: directory.path + "/config.yaml", atomically: true, encoding: .utf8)
        try! "pw-eu-secret".write(toFile: directory.path + "/pw", atomically: true, encoding: .utf8)
        try! FileManager.default.createDirectory(atPath: directory.path + "/credentials", withIntermediateDirectories: true)
        for (name, content) in credentials {
            try! content.write(toFile: directory.path + "/credentials/\(name)", atomically: true, encoding: .utf8)
        }
        return try await Settings.load(
            configPath: directory.path + "/config.yaml",
            environment: credentials.isEmpty ? [:] : ["CREDENTIALS_DIRECTORY": directory.path + "/credentials"],
            credstore: directory.path + "/no-credstore")
    }

    func error(_ yaml: String, credentials: [String: String] = ["klarna-password.us": "pw-us"]) async -> String? {
        do {
            _ = try await load(yaml, credentials: credentials)
            return nil
        } catch {
            return error.description
        }
    }

    static let two = """
        klarna:
          request_timeout_seconds: 10
        rate_limit:
          requests_per_second: 40
        accounts:
          - id: eu
            base_url: https://api.klarna.com
            username: K123_abc
            password_file: pw
            settlements:
              enabled: true
          - id: us
            region: na
            environment: production
            username: K456_def
            rate_limit:
              requests_per_second: 10
              burst: 5
            capture:
              default_policy: never
        store:
          path: state.sqlite
        """

    @Test("Two accounts: each its hosts, credentials and merchant id; overrides on top of the daemon-wide values; secrets redacted")
    func twoAccounts() async throws {
        let settings = try await load(Self.two, credentials: ["klarna-password.us": "pw-us-secret\n"])
        #expect(settings.accounts.map(\.id.rawValue) == ["eu", "us"])
        let eu = try #require(settings.account(AccountID(rawValue: "eu")!))
        let us = try #require(settings.account(AccountID(rawValue: "us")!))
        #expect(eu.klarna.baseURL == "https://api.klarna.com" && eu.klarna.credentials.password == "pw-eu-secret")
        #expect(us.klarna.baseURL == "https://api-na.klarna.com" && us.klarna.credentials.password == "pw-us-secret")
        #expect(eu.merchantID == "K123" && us.merchantID == "K456")
        #expect(eu.ratePerSecond == 40 && us.ratePerSecond == 10 && us.rateBurst == 5)
        #expect(eu.capturePolicy == .immediate && us.capturePolicy == .never)
        #expect(eu.settlementsEnabled && !us.settlementsEnabled && settings.settlements.enabled)
        #expect(settings.unnamedAccount == nil)
        let text = settings.effectiveDescription
        #expect(text.contains("accounts: eu, us"))
        #expect(text.contains("accounts[us].password: <redacted> (credential klarna-password.us)"))
        #expect(text.contains("accounts[eu].password: <redacted> (file "))
        #expect(text.contains("accounts[us].rate_limit.requests_per_second: 10.0"))
        #expect(!text.contains("pw-us-secret") && !text.contains("pw-eu-secret"))
        // Each account's payouts and disputes may be followed: one service of each per account.
        let both = try await load(
            Self.two.replacingOccurrences(
                of: "    capture:\n", with: "    settlements:\n      enabled: true\n    disputes:\n      enabled: true\n    capture:\n"),
            credentials: ["klarna-password.us": "pw-us"])
        #expect(both.accounts.map(\.settlementsEnabled) == [true, true] && both.accounts.map(\.disputesEnabled) == [false, true])
    }

    @Test("A bare key is an empty value, as before the accounts list: ingest.socket: turns the socket off")
    func bareKeyIsEmpty() async throws {
        let settings = try await load(
            "klarna:\n  base_url: https://api.klarna.com\n  username: K9_x\n  password_file: pw\ningest:\n  socket:\n  spool_dir: ~\n")
        #expect(settings.ingestSocket == nil && settings.spoolDirectory == nil)
    }

    @Test("The klarna: section alone is the default account, as before accounts existed")
    func defaultAccount() async throws {
        let settings = try await load("klarna:\n  base_url: https://api.klarna.com\n  username: K9_x\n  password_file: pw\n")
        #expect(settings.accounts.map(\.id) == [.default] && settings.unnamedAccount == .default)
        #expect(settings.effectiveDescription.contains("accounts: default (the klarna: section)"))
        #expect(settings.effectiveDescription.contains("klarna.merchant_id: K9"))
    }

    @Test("A reload applies an account's rate budget live; its hosts or credentials, or another list of accounts, wait for a restart")
    func reloadClassifiesAccountKeys() async throws {
        let old = try await load(Self.two, credentials: ["klarna-password.us": "pw-us"])
        let faster = try await load(
            Self.two.replacingOccurrences(of: "      requests_per_second: 10", with: "      requests_per_second: 20"),
            credentials: ["klarna-password.us": "pw-us"])
        // Each load is in its own folder: only the accounts' lines are compared.
        func accountsOnly(_ keys: [String]) -> [String] { keys.filter { $0.hasPrefix("accounts[us]") } }
        #expect(accountsOnly(faster.changes(from: old).live) == ["accounts[us].rate_limit.requests_per_second"])
        #expect(accountsOnly(faster.changes(from: old).restart).isEmpty)
        let moved = try await load(
            Self.two.replacingOccurrences(of: "    region: na\n    environment: production", with: "    base_url: https://api-oc.klarna.com"),
            credentials: ["klarna-password.us": "pw-us"])
        #expect(accountsOnly(moved.changes(from: old).restart).contains("accounts[us].base_url"))
        let rotated = try await load(Self.two, credentials: ["klarna-password.us": "pw-us-2"])
        #expect(accountsOnly(rotated.changes(from: old).restart) == ["accounts[us].password"])
    }

    @Test("Every refusal names the account and the key")
    func refusals() async throws {
        let cases: [(String, String)] = [
            (Self.two.replacingOccurrences(of: "id: eu", with: "id: EU"), "accounts[1].id: \"EU\" is not an account id"),
            (Self.two.replacingOccurrences(of: "id: us", with: "id: eu"), "accounts[2].id: eu is named twice"),
            (Self.two.replacingOccurrences(of: "    username: K456_def\n", with: ""), "accounts[us].username: missing"),
            (
                Self.two.replacingOccurrences(of: "    username: K456_def\n", with: "    username: K123_zzz\n"),
                "accounts[us].merchant_id: K123 is account eu's too"
            ),
            (Self.two.replacingOccurrences(of: "    region: na\n", with: ""), "accounts[us].base_url: missing"),
            (
                Self.two.replacingOccurrences(of: "    username: K456_def\n", with: "    username: K456_def\n    password: hunter2\n"),
                "secrets are never read from config.yaml"
            ),
            (
                Self.two.replacingOccurrences(of: "    username: K456_def\n", with: "    username: K456_def\n    colour: red\n"),
                "accounts[2].colour: unknown key"
            ),
            (
                Self.two.replacingOccurrences(of: "  request_timeout_seconds: 10", with: "  username: K1_a"),
                "klarna.username: with accounts:, each account names its own username"
            ),
            ("accounts:\n  - eu\n", "accounts[1]: must be a mapping"),
            ("accounts: eu\n", "accounts: must be a list of accounts"),
            (
                Self.two.replacingOccurrences(of: "    base_url: https://api.klarna.com", with: "    base_url: http://api.klarna.com"),
                "accounts[eu].base_url: \"http://api.klarna.com\" uses plain http"
            ),
        ]
        for (yaml, expected) in cases {
            let message = await error(yaml)
            #expect(message?.contains(expected) == true, "\(expected): \(message ?? "loaded")")
        }
        let missing = await error(Self.two, credentials: [:])
        #expect(missing?.contains("accounts[us] password: none found") == true && missing?.contains("klarna-password.us") == true, "\(missing ?? "")")
    }
}
