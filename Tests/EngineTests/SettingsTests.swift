import Engine
import Foundation
import Testing
@testable import Settings

@Suite("Configuration")
struct SettingsTests {
    /// Writes `yaml` (and a password file) into a fresh directory and loads it.
    /// `credstore`: files written to the test's own stand-in for /etc/credstore (name → content).
    func load(
        _ yaml: String, environment: [String: String] = [:], password: String? = "pw-secret-value", credstore: [String: String] = [:]
    ) async throws(SettingsError) -> Settings {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        try! yaml.write(toFile: directory.path + "/config.yaml", atomically: true, encoding: .utf8)
        if let password { try! password.write(toFile: directory.path + "/pw", atomically: true, encoding: .utf8) }
        try! FileManager.default.createDirectory(atPath: directory.path + "/credstore", withIntermediateDirectories: true)
        for (name, content) in credstore {
            try! content.write(toFile: directory.path + "/credstore/klarna-reconciler.\(name)", atomically: true, encoding: .utf8)
        }
        return try await Settings.load(
            configPath: directory.path + "/config.yaml", environment: environment, credstore: directory.path + "/credstore")
    }

    let minimal = """
        klarna:
          base_url: https://api.playground.klarna.com
          username: K123_abc
          password_file: pw
        store:
          path: state.sqlite
        """

    func error(_ yaml: String, environment: [String: String] = [:], password: String? = "pw") async -> SettingsError? {
        do {
            _ = try await load(yaml, environment: environment, password: password)
            return nil
        } catch {
            return error
        }
    }

    @Test("A minimal config loads with documented defaults; relative paths are relative to the config file")
    func minimalConfig() async throws {
        let settings = try await load(minimal)
        #expect(settings.accounts[0].klarna.baseURL == "https://api.playground.klarna.com")
        #expect(settings.accounts[0].klarna.credentials.password == "pw-secret-value")
        #expect(settings.storePath.hasSuffix("/state.sqlite") && settings.storePath.hasPrefix("/"))
        #expect(settings.outboxDirectory == "/var/spool/klarna-reconciler-outbox")
        #expect(settings.defaultCapturePolicy == .immediate)
        #expect(settings.engine.polling.denseInterval == .seconds(2))
        #expect(settings.ratePerSecond == 25)
        #expect(!settings.effectiveDescription.contains("pw-secret-value"))
        #expect(settings.effectiveDescription.contains("klarna.password: <redacted>"))
    }

    @Test("engine.drain_timeout_seconds outlasts the longest Klarna call: request timeout + 5 by default, never less")
    func drainOutlastsTheLongestCall() async throws {
        #expect(try await load(minimal).drainTimeout == .seconds(35))
        let tenSeconds = minimal.replacingOccurrences(of: "  password_file: pw", with: "  password_file: pw\n  request_timeout_seconds: 10")
        #expect(try await load(tenSeconds).drainTimeout == .seconds(15))
        #expect(try await load(minimal + "\nengine:\n  drain_timeout_seconds: 120").drainTimeout == .seconds(120))
        #expect(
            try await load(minimal + "\nengine:\n  drain_timeout_seconds: 35").effectiveDescription.contains("engine.drain_timeout_seconds: 35\n"))
        let short = await error(minimal + "\nengine:\n  drain_timeout_seconds: 15")
        #expect(
            short?.description
                == "engine.drain_timeout_seconds: must be at least klarna.request_timeout_seconds + 5 (a stop waits for a Klarna call already sent, a create-order above all, to be answered or time out, and for its answer to be committed), not 15 with klarna.request_timeout_seconds 30"
        )
    }

    @Test("region + environment give Klarna's regional host")
    func region() async throws {
        let settings = try await load(
            """
            klarna:
              region: na
              environment: production
              username: u
              password_file: pw
            """)
        #expect(settings.accounts[0].klarna.baseURL == "https://api-na.klarna.com")
    }

    @Test("Environment overrides win over the file; credentials come from $CREDENTIALS_DIRECTORY")
    func overridesAndCredentials() async throws {
        let credentials = TemporaryDirectory()
        defer { credentials.remove() }
        try "from-credential\n".write(toFile: credentials.path + "/klarna-password", atomically: true, encoding: .utf8)
        let settings = try await load(
            """
            klarna:
              base_url: https://api.klarna.com
              username: u
            polling:
              dense_interval_seconds: 2
            """,
            environment: [
                "KLARNA_RECONCILER_POLLING_DENSE_INTERVAL_SECONDS": "7", "CREDENTIALS_DIRECTORY": credentials.path,
                "KLARNA_RECONCILER_CAPTURE_DEFAULT_POLICY": "on_request", "STATE_DIRECTORY": "/var/lib/x",
            ], password: nil)
        #expect(settings.engine.polling.denseInterval == .seconds(7))
        #expect(settings.accounts[0].klarna.credentials.password == "from-credential")
        #expect(settings.accounts[0].passwordSource == "credential klarna-password")
        #expect(settings.defaultCapturePolicy == .onRequest)
        #expect(settings.storePath == "/var/lib/x/state.sqlite")
    }

    @Test(
        "Every kind of bad configuration is one precise line naming the key",
        arguments: [
            ("klarna:\n  base_url: https://x.klarna.com\n  password_file: pw", "klarna.username: missing"),
            ("klarna:\n  username: u\n  password_file: pw", "klarna.base_url: missing"),
            ("klarna:\n  base_url: not a url\n  username: u\n  password_file: pw", "klarna.base_url: \"not a url\" is not an http(s) URL"),
            ("klarna:\n  base_url: http://api.klarna.com\n  username: u\n  password_file: pw", "plain http to a remote host"),
            ("klarna:\n  base_url: ftp://api.klarna.com\n  username: u\n  password_file: pw", "is not an http(s) URL"),
            ("klarna:\n  base_url: https://a.b\n  username: u\n  password_file: missing-file", "klarna.password_file: cannot read"),
            (
                "klarna:\n  base_url: https://a.b\n  username: u",
                "klarna password: none found: looked in $CREDENTIALS_DIRECTORY (not set: not inside the unit), klarna.password_file (not set), "
            ),
            (
                "klarna:\n  base_url: https://a.b\n  username: u\n  password: hunter2",
                "secrets are never read from config.yaml: use a credential file"
            ),
            ("klarna:\n  base_url: https://a.b\n  username: u\n  password: hunter2", "klarna.password: unknown key in "),
            ("klarna:\n  base_url: https://a.b\n  username: u\n  password_file: pw\nengine:\n  bogus_key: 1", "engine.bogus_key: unknown key in "),
            ("klarna:\n  base_url: https://a.b\n  username: u\n  password_file: pw\nnotify:\n  api_secret: 1", "notify.api_secret: unknown key in "),
            (
                "klarna:\n  base_url: https://a.b\n  username: u\n  password_file: pw\npolling:\n  dense_interval_seconds: fast",
                "polling.dense_interval_seconds: must be a number, not \"fast\""
            ),
            (
                "klarna:\n  base_url: https://a.b\n  username: u\n  password_file: pw\npolling:\n  dense_interval_seconds: -1",
                "must be greater than 0"
            ),
            (
                "klarna:\n  base_url: https://a.b\n  username: u\n  password_file: pw\nengine:\n  max_concurrency: 1.5",
                "engine.max_concurrency: must be a whole number"
            ),
            ("klarna:\n  base_url: https://a.b\n  username: u\n  password_file: pw\nengine:\n  max_concurrency: 0", "must be between 1 and 1024"),
            (
                "klarna:\n  base_url: https://a.b\n  username: u\n  password_file: pw\ncapture:\n  default_policy: later",
                "capture.default_policy: must be one of immediate, on_request, never"
            ),
            (
                "klarna:\n  base_url: https://a.b\n  username: u\n  password_file: pw\nauthorization_expiry:\n  auto_extend: maybe",
                "must be true or false"
            ),
            (
                "klarna:\n  base_url: https://a.b\n  username: u\n  password_file: pw\npolling:\n  dense_intervall_seconds: 2",
                "polling.dense_intervall_seconds: unknown key"
            ),
            ("klarna:\n  base_url: https://a.b\n  username: u\n  password_file: pw\nlog:\n  level: loud", "log.level: must be one of"),
            ("klarna:\n  base_url: https://a.b\n  username: u\n  password_file: pw\nnotify:\n  url: mailto:x", "notify.url"),
            (
                "klarna:\n  base_url: https://a.b\n  username: u\n  password_file: pw\nnotify:\n  url: https://shop:hunter2@example.com/hook",
                "notify.url: must not carry credentials"
            ),
            (
                "klarna:\n  base_url: https://a.b\n  username: u\n  password_file: pw\nnotify:\n  url: https://example.com/hook?token=hunter2",
                "notify.url: must not carry credentials (user:password@) or a query"
            ),
            (
                "klarna:\n  base_url: http://u:hunter2@api.klarna.com\n  username: u\n  password_file: pw",
                "klarna.base_url: must not carry credentials"
            ),
            ("klarna:\n  base_url: https://a.b\n  username: [u, v]\n  password_file: pw", "klarna.username: must be a single value"),
            ("klarna: [unclosed", "not valid YAML"),
            ("klarna:\n  password: [hunter2\n", "not valid YAML"),
            ("klarna:\n  password: hunter2\npolling: 1\npolling: 2\n", "duplicated key(s): 'polling'. (line 3, column 1)"),
            ("- just\n- a list", "must be a mapping"),
        ])
    func badConfig(yaml: String, expected: String) async {
        let error = await error(yaml)
        #expect(error?.description.contains(expected) == true, "\(error?.description ?? "no error") should say \(expected)")
        #expect(error?.description.contains("\n") == false)
        #expect(error?.description.contains("hunter2") == false)
    }

    @Test("An unknown key is called unknown whatever its name; only one naming a secret adds where secrets go")
    func unknownKeys() async {
        let bogus = await error(minimal + "\nengine:\n  bogus_key: 1")?.description ?? ""
        #expect(bogus.hasPrefix("engine.bogus_key: unknown key in "))
        #expect(!bogus.contains("secret"))
        #expect(bogus.contains("engine takes: "))
        let password = await error(minimal + "\nnotify:\n  password: hunter2")?.description ?? ""
        #expect(password.hasPrefix("notify.password: unknown key in "))
        #expect(password.contains("secrets are never read from config.yaml"))
        let listed = await error(minimal + "\nnotify:\n  signing_keys: [a, b]")?.description ?? ""
        #expect(listed.hasPrefix("notify.signing_keys: unknown key in "), "\(listed)")
    }

    @Test("settlements: off by default, hourly, 14 days to settle, 30 days back on the first sync; bounds are checked; all but enabled reload live")
    func settlements() async throws {
        let defaults = try await load(minimal)
        #expect(
            defaults.settlements
                == SettlementSettings(
                    enabled: false, syncInterval: .seconds(3_600), settleWithinDays: 14, firstSyncLookback: .seconds(30 * 86_400)))
        let set = try await load(
            minimal + "\nsettlements:\n  enabled: true\n  sync_interval_minutes: 15\n  settle_within_days: 10\n  first_sync_lookback_days: 90")
        #expect(
            set.settlements
                == SettlementSettings(
                    enabled: true, syncInterval: .seconds(900), settleWithinDays: 10, firstSyncLookback: .seconds(90 * 86_400)))
        #expect(set.effectiveDescription.contains("settlements.enabled: true"))
        #expect(set.effectiveDescription.contains("settlements.sync_interval_minutes: 15"))
        let (live, restart) = set.changes(from: defaults)
        // Each load reads a credentials folder of its own, so other keys (the callback key) may differ too.
        #expect(
            live.filter { $0.hasPrefix("settlements.") } == [
                "settlements.first_sync_lookback_days", "settlements.settle_within_days", "settlements.sync_interval_minutes",
            ])
        #expect(restart.contains("settlements.enabled"))
        for (yaml, expected) in [
            ("enabled: sometimes", "settlements.enabled: must be true or false"),
            ("sync_interval_minutes: 0", "settlements.sync_interval_minutes: must be between 1 and 1440, not 0"),
            ("sync_interval_minutes: 1441", "settlements.sync_interval_minutes: must be between 1 and 1440"),
            ("settle_within_days: 0", "settlements.settle_within_days: must be between 1 and 365, not 0"),
            ("settle_within_days: two weeks", "settlements.settle_within_days: must be a whole number"),
            ("first_sync_lookback_days: 400", "settlements.first_sync_lookback_days: must be between 1 and 365"),
            ("sync_interval: 60", "settlements.sync_interval: unknown key"),
        ] {
            let error = await error(minimal + "\nsettlements:\n  " + yaml)
            #expect(error?.description.contains(expected) == true, "\(error?.description ?? "no error") should say \(expected)")
        }
    }

    @Test("disputes: off by default, hourly, warnings at 72 h and 24 h, 120 days back; lead times and bounds are checked; the engine's retry")
    func disputes() async throws {
        let defaults = try await load(minimal)
        #expect(!defaults.disputes.enabled && defaults.disputes.syncInterval == .seconds(3_600))
        #expect(defaults.disputes.warnBefore == [.seconds(72 * 3_600), .seconds(24 * 3_600)])
        #expect(defaults.disputes.firstSyncLookback == .seconds(120 * 86_400))
        #expect(defaults.disputes.retry == defaults.engine.writeRetry && defaults.disputes.longestCall == defaults.engine.longestCall)
        let set = try await load(minimal + "\ndisputes:\n  enabled: true\n  warn_before_hours: 4, 48, 12")
        #expect(set.disputes.enabled && set.disputes.warnBefore == [.seconds(48 * 3_600), .seconds(12 * 3_600), .seconds(4 * 3_600)])
        #expect(set.effectiveDescription.contains("disputes.warn_before_hours: 48, 12, 4"))
        #expect(set.changes(from: defaults).restart.contains("disputes.enabled"))
        for (yaml, expected) in [
            ("warn_before_hours: 72, soon", "disputes.warn_before_hours: must be whole hours from 1 to 2160"),
            ("warn_before_hours: 0", "disputes.warn_before_hours: must be whole hours from 1 to 2160"),
            ("warn_before_hours: 24, 24", "disputes.warn_before_hours: names 24 twice"),
            ("warn_before_hours: 1,2,3,4,5,6,7,8,9,10,11", "disputes.warn_before_hours: must name 1 to 10 lead times"),
            ("sync_interval_minutes: 0", "disputes.sync_interval_minutes: must be between 1 and 1440, not 0"),
            ("first_sync_lookback_days: 366", "disputes.first_sync_lookback_days: must be between 1 and 365"),
        ] {
            let error = await error(minimal + "\ndisputes:\n  " + yaml)
            #expect(error?.description.contains(expected) == true, "\(error?.description ?? "no error") should say \(expected)")
        }
    }

    @Test("Outside the unit, secrets come from the unit's credential files; $CREDENTIALS_DIRECTORY, then *_file, then the credstore")
    func credentialOrder() async throws {
        let bare = "klarna:\n  base_url: https://a.b\n  username: u"
        let stored = ["klarna-password": "from-credstore\n", "callback-key": "callback-key-from-credstore\n"]
        let outside = try await load(bare, password: nil, credstore: stored)
        #expect(outside.accounts[0].klarna.credentials.password == "from-credstore")
        #expect(outside.accounts[0].passwordSource.hasSuffix("/credstore/klarna-reconciler.klarna-password"))
        #expect(outside.callbackKey == Array("callback-key-from-credstore".utf8))

        let withFile = try await load(bare + "\n  password_file: pw", credstore: stored)
        #expect(withFile.accounts[0].klarna.credentials.password == "pw-secret-value")

        let credentials = TemporaryDirectory()
        defer { credentials.remove() }
        try "from-credential\n".write(toFile: credentials.path + "/klarna-password", atomically: true, encoding: .utf8)
        let inside = try await load(bare + "\n  password_file: pw", environment: ["CREDENTIALS_DIRECTORY": credentials.path], credstore: stored)
        #expect(inside.accounts[0].klarna.credentials.password == "from-credential")
        #expect(inside.accounts[0].passwordSource == "credential klarna-password")
        #expect(!inside.effectiveDescription.contains("from-cred"))
    }

    @Test("No secret anywhere: the error says every place it looked; a missing callback key says so in check-config")
    func nothingFound() async throws {
        let credentials = TemporaryDirectory()
        defer { credentials.remove() }
        let error = await error(
            "klarna:\n  base_url: https://a.b\n  username: u", environment: ["CREDENTIALS_DIRECTORY": credentials.path], password: nil)
        let text = error?.description ?? ""
        #expect(text.contains("$CREDENTIALS_DIRECTORY (\(credentials.path)/klarna-password: not there)"), "\(text)")
        #expect(text.contains("klarna.password_file (not set)"))
        #expect(text.contains("/credstore/klarna-reconciler.klarna-password (not there)"))
        let settings = try await load(minimal)
        #expect(settings.callbackKey == nil)
        #expect(settings.effectiveDescription.contains("klarna-reconciler.callback-key (not there)"))
    }

    @Test("An unreadable password file or credential is a config error naming it, not a crash")
    func unreadable() async throws {
        // A directory where a file should be cannot be read as text, not even by root.
        let credentials = TemporaryDirectory()
        defer { credentials.remove() }
        try FileManager.default.createDirectory(atPath: credentials.path + "/klarna-password", withIntermediateDirectories: false)
        let fromDirectory = await error(
            "klarna:\n  base_url: https://a.b\n  username: u", environment: ["CREDENTIALS_DIRECTORY": credentials.path], password: nil)
        #expect(fromDirectory != nil)
        #expect(fromDirectory?.description.contains("\n") == false)
        let fromFile = await error("klarna:\n  base_url: https://a.b\n  username: u\n  password_file: /")
        #expect(fromFile?.description.hasPrefix("klarna.password_file: cannot read /") == true)
    }

    @Test("webhook-signing-keys: {} means none (the unit needs the credential file to exist); other shapes are refused")
    func signingKeys() async throws {
        let credentials = TemporaryDirectory()
        defer { credentials.remove() }
        func withKeys(_ json: String) async -> (Settings?, SettingsError?) {
            try! json.write(toFile: credentials.path + "/webhook-signing-keys", atomically: true, encoding: .utf8)
            do {
                return (try await load(minimal, environment: ["CREDENTIALS_DIRECTORY": credentials.path]), nil)
            } catch {
                return (nil, error)
            }
        }
        let none = await withKeys("{}\n")
        #expect(none.0?.signingKeys.isEmpty == true)
        #expect(none.0?.effectiveDescription.contains("webhook_signing.keys: (none") == true)
        let two = await withKeys(#"{"k1": "a", "k2": "b"}"#)
        #expect(two.0?.signingKeys.keys.sorted() == ["k1", "k2"])
        for bad in ["[]", #"{"k1": ""}"#, #"{"k1": 1}"#, "not json"] {
            #expect(await withKeys(bad).1?.key == "webhook-signing-keys", "\(bad)")
        }
    }

    @Test("A missing config file says which path")
    func missingFile() async {
        do {
            _ = try await Settings.load(configPath: "/nonexistent/config.yaml", environment: [:])
            Issue.record("loaded")
        } catch {
            #expect(error.description == "cannot read config file /nonexistent/config.yaml: no such file")
        }
    }

    @Test("etc/config.yaml documents every key and loads as it is")
    func exampleConfig() async throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let example = root.appendingPathComponent("etc/config.yaml").path
        let text = try String(contentsOfFile: example, encoding: .utf8)
        // Each key by its full path: `  key:` or `  # key:` under its `section:`.
        var documented: Set<String> = []
        var section = ""
        for line in text.split(separator: "\n") {
            if let first = line.first, first.isLetter, line.hasSuffix(":") { section = String(line.dropLast()) }
            let body = line.trimmingCharacters(in: .whitespaces)
            guard line.hasPrefix("  "), let colon = body.firstIndex(of: ":") else { continue }
            let name = body[..<colon].replacingOccurrences(of: "# ", with: "")
            documented.insert("\(section).\(name)")
        }
        for key in SettingsKeys.all { #expect(documented.contains(key), "etc/config.yaml does not document \(key)") }
        // The accounts: example, commented out: every key an account takes, by its last word.
        let accountsExample = text.components(separatedBy: "# accounts:").last?.components(separatedBy: "\nstore:").first ?? ""
        for key in AccountKeys.all {
            let word = key.split(separator: ".").last.map(String.init) ?? key
            #expect(accountsExample.contains("\(word):"), "etc/config.yaml's accounts: example does not show \(key)")
        }
        let credentials = TemporaryDirectory()
        defer { credentials.remove() }
        try "pw".write(toFile: credentials.path + "/klarna-password", atomically: true, encoding: .utf8)
        let settings = try await Settings.load(configPath: example, environment: ["CREDENTIALS_DIRECTORY": credentials.path])
        #expect(settings.accounts[0].klarna.baseURL == "https://api.playground.klarna.com")
        #expect(settings.storePath == "/var/lib/klarna-reconciler/state.sqlite")
    }
}

extension SettingsTests {
    @Test("docs/configuration.md's reference has a row for exactly the keys the loader knows")
    func referenceDocumentsEveryKey() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOfFile: root.appendingPathComponent("docs/configuration.md").path, encoding: .utf8)
        let rows = text.split(separator: "\n").filter { $0.hasPrefix("| `") }
            .compactMap { $0.dropFirst(3).split(separator: "`").first.map(String.init) }
            .filter { $0.contains(".") && !$0.hasPrefix("klarna-password") }  // not the credentials' table (`klarna-password`, …)
        // An account's keys as `accounts[].KEY`.
        let known = SettingsKeys.all + AccountKeys.all.map { "accounts[].\($0)" }
        #expect(
            Set(rows) == Set(known),
            "only in the docs: \(Set(rows).subtracting(known).sorted()); missing there: \(Set(known).subtracting(rows).sorted())"
        )
        #expect(rows.count == Set(rows).count, "a key with two rows")
    }
}

@Suite("Settings reload")
struct SettingsReloadTests {
    @Test("A reload names what it applies live and what waits for a restart; secrets by name only")
    func changes() async throws {
        let directory = NSTemporaryDirectory() + "reload-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try "first-password\n".write(toFile: directory + "/pw", atomically: true, encoding: .utf8)
        func load(_ extra: String) async throws -> Settings {
            try """
            klarna:
              base_url: http://127.0.0.1:9
              username: merchant
              password_file: pw
            \(extra)
            """.write(toFile: directory + "/config.yaml", atomically: true, encoding: .utf8)
            return try await Settings.load(configPath: directory + "/config.yaml", environment: [:], needsKlarnaPassword: true)
        }
        let old = try await load("")
        #expect(old.changes(from: old) == ([], []))
        try "second-password\n".write(toFile: directory + "/pw", atomically: true, encoding: .utf8)
        let new = try await load("log:\n  level: debug\nrate_limit:\n  burst: 20\nstore:\n  path: other.sqlite")
        let (live, restart) = new.changes(from: old)
        #expect(live == ["log.level", "rate_limit.burst"])
        #expect(restart == ["klarna.password", "store.path"])
    }
}
