import Configuration
import Engine
import Foundation
import KlarnaAPI
import Logging
import PostgresBackend
import ReconcilerCore
import SystemPackage
import Yams

extension Settings {
    public static let defaultConfigPath = "/etc/klarna-reconciler/config.yaml"
    /// Environment variables with this prefix override config.yaml: `KLARNA_RECONCILER_KLARNA_BASE_URL` sets
    /// `klarna.base_url`.
    public static let environmentPrefix = "KLARNA_RECONCILER_"
    /// Where the unit's `LoadCredential=` reads secrets from (`klarna-reconciler.NAME`); commands run outside the unit
    /// look there last.
    public static let credstoreDirectory = "/etc/credstore"

    /// Reads and validates everything. Any problem is one ``SettingsError``.
    /// - Parameter needsKlarnaPassword: `false` for operator commands that only touch the store.
    /// - Parameter credstore: the directory of the unit's credential files (a test's own folder in tests).
    public static func load(
        configPath: String, environment: [String: String] = ProcessInfo.processInfo.environment, needsKlarnaPassword: Bool = true,
        credstore: String = credstoreDirectory
    ) async throws(SettingsError) -> Settings {
        let text: String
        do {
            text = try String(contentsOfFile: configPath, encoding: .utf8)
        } catch {
            throw SettingsError(nil, "cannot read config file \(configPath): \(Self.reason(error))")
        }
        try checkKeys(text, path: configPath)
        // The file's single values by key as written (`accounts:` is a list, read on its own by `accountEntries`).
        let file = InMemoryProvider(
            name: configPath,
            values: Dictionary(
                uniqueKeysWithValues: try scalars(text, path: configPath).map {
                    (AbsoluteConfigKey($0.key.split(separator: ".").map(String.init)), ConfigValue(.string($0.value), isSecret: false))
                }))
        var overrides: [String: String] = [:]
        for (name, value) in environment where name.hasPrefix(environmentPrefix) {
            overrides[String(name.dropFirst(environmentPrefix.count))] = value
        }
        let reader = Values(
            reader: ConfigReader(providers: [EnvironmentVariablesProvider(environmentVariables: overrides), file]),
            configPath: configPath)

        var credentials = Secrets(directory: nil, reader: nil, credstore: credstore)
        if let directory = environment["CREDENTIALS_DIRECTORY"], !directory.isEmpty {
            do {
                credentials = Secrets(
                    directory: directory, reader: ConfigReader(provider: try await DirectoryFilesProvider(directoryPath: FilePath(directory))),
                    credstore: credstore)
            } catch {
                throw SettingsError(nil, "cannot read credentials directory \(directory): \(oneLine(error))")
            }
        }
        return try build(
            reader, accounts: try accountEntries(text, path: configPath), credentials: credentials, environment: environment,
            needsKlarnaPassword: needsKlarnaPassword)
    }

    /// Where secrets are looked for, in order: the unit's `$CREDENTIALS_DIRECTORY`, the `*_file` keys, then the
    /// files the unit loads them from (`/etc/credstore/klarna-reconciler.NAME`), so `check-config` and
    /// `callback-url` work outside the unit too (as root, or as a user the file is given to).
    struct Secrets {
        let directory: String?
        let reader: ConfigReader?
        let credstore: String

        func credstorePath(_ name: String) -> String { "\(credstore)/klarna-reconciler.\(name)" }

        /// The places tried, for the message when none has the secret.
        func lookedIn(_ name: String, key: String) -> String {
            "looked in $CREDENTIALS_DIRECTORY (\(directory.map { "\($0)/\(name): not there" } ?? "not set: not inside the unit")), "
                + "\(key) (not set), \(credstorePath(name)) (\(FileManager.default.fileExists(atPath: credstorePath(name)) ? "not readable by this user: run as root" : "not there"))"
        }
    }

    private static func build(
        _ values: Values, accounts entries: [[String: String]]?, credentials: Secrets, environment: [String: String], needsKlarnaPassword: Bool
    ) throws(SettingsError) -> Settings {
        let ratePerSecond = try values.double("rate_limit.requests_per_second", default: 25, range: 0.1...10_000)
        let rateBurst = try values.double("rate_limit.burst", default: 10, range: 1...10_000)
        let capturePolicy = try values.choice("capture.default_policy", CapturePolicy.self) ?? .immediate
        let accounts = try buildAccounts(
            values, entries: entries, credentials: credentials, needsPassword: needsKlarnaPassword,
            defaults: AccountSettings.Defaults(
                ratePerSecond: ratePerSecond, rateBurst: rateBurst, capturePolicy: capturePolicy,
                settlementsEnabled: try values.bool("settlements.enabled", default: false),
                disputesEnabled: try values.bool("disputes.enabled", default: false)))

        let base = URL(fileURLWithPath: values.configPath).deletingLastPathComponent()
        func path(_ value: String) -> String { value.hasPrefix("/") ? value : base.appendingPathComponent(value).standardizedFileURL.path }
        let defaultStore =
            environment["STATE_DIRECTORY"].flatMap { $0.split(separator: ":").first.map(String.init) }.map { "\($0)/state.sqlite" }
            ?? "/var/lib/klarna-reconciler/state.sqlite"

        let notifyURL = try values.string("notify.url").flatMap { $0.isEmpty ? nil : $0 }
        if let notifyURL { try validateURL(notifyURL, key: "notify.url", allowRemoteHTTP: true) }

        let polling = PollingSchedule(
            denseInterval: try values.seconds("polling.dense_interval_seconds", default: 2),
            denseWindow: try values.seconds("polling.dense_window_seconds", default: 600),
            maxInterval: try values.seconds("polling.max_interval_seconds", default: 300),
            expiryGrace: try values.seconds("polling.expiry_grace_seconds", default: 600))
        guard polling.maxInterval >= polling.denseInterval else {
            throw SettingsError("polling.max_interval_seconds", "must be at least polling.dense_interval_seconds")
        }
        let deadlines = Deadlines(
            authorizationWarnBefore: try values.seconds("authorization_expiry.warn_before_hours", default: 72, unit: 3_600),
            autoExtendAuthorization: try values.bool("authorization_expiry.auto_extend", default: false),
            pendingFraudInterval: try values.seconds("polling.pending_fraud_interval_seconds", default: 900),
            orderRecheckInterval: try values.seconds("polling.order_recheck_interval_seconds", default: 21_600))
        // Tests of the daemon as a process cannot wait minutes for a settle period: `testing.create_order_settle_ms`
        // takes any positive one, outside the operators' range. Never set in production.
        var testingSettle: Duration?
        if try values.string("testing.create_order_settle_ms") != nil {
            testingSettle = try values.seconds("testing.create_order_settle_ms", default: 0, unit: 0.001)
        }
        let configuredSettle = Duration.seconds(
            try values.int(
                "engine.create_order_settle_seconds", default: Int(CreateOrderSettle.standard.timeInterval),
                range: CreateOrderSettle.configurableSeconds))
        let requestTimeout = try values.seconds("klarna.request_timeout_seconds", default: 30)
        let initial = try values.seconds("retry.initial_delay_ms", default: 1_000, unit: 0.001)
        let maxDelay = try values.seconds("retry.max_delay_seconds", default: 300)
        let engine = EngineSettings(
            polling: polling, deadlines: deadlines,
            readRetry: RetryPolicy(initialDelay: initial, maxDelay: maxDelay, maxAttempts: .max),
            writeRetry: RetryPolicy(
                initialDelay: initial, maxDelay: maxDelay, maxAttempts: try values.int("retry.max_attempts", default: 25, range: 1...1_000)),
            maxConcurrency: try values.int("engine.max_concurrency", default: 16, range: 1...1_024),
            customerTokenDescription: try values.string("engine.customer_token_description") ?? "Subscription",
            wakeupInterval: try values.seconds("engine.wakeup_interval_ms", default: 1_000, unit: 0.001),
            createOrderSettle: testingSettle ?? configuredSettle, longestCall: requestTimeout + .seconds(1))

        let socketSetting = try values.string("ingest.socket")
        let defaultSocket =
            environment["RUNTIME_DIRECTORY"].flatMap { $0.split(separator: ":").first.map(String.init) }.map { "\($0)/ingest.sock" }
            ?? "/run/klarna-reconciler/ingest.sock"
        let socket = socketSetting.map { $0.isEmpty ? nil : path($0) } ?? defaultSocket
        let group = try values.string("ingest.socket_group").flatMap { $0.isEmpty ? nil : $0 }
        if let group, getgrnam(group) == nil { throw SettingsError("ingest.socket_group", "no group named \(group)") }
        func loopback(_ key: String) throws(SettingsError) -> String? {
            guard let listen = try values.string(key).flatMap({ $0.isEmpty ? nil : $0 }) else { return nil }
            let host = listen.split(separator: ":").dropLast().joined(separator: ":")
            guard Int(listen.split(separator: ":").last ?? "") != nil, ["127.0.0.1", "localhost", "[::1]"].contains(host) else {
                throw SettingsError(key, "must be a loopback HOST:PORT (127.0.0.1:PORT or [::1]:PORT), not \"\(listen)\"")
            }
            return listen
        }
        let listen = try loopback("ingest.listen")
        let metricsListen = try loopback("metrics.listen")
        let policy = try values.string("callback_token.policy") ?? "require"
        guard ["require", "warn"].contains(policy) else {
            throw SettingsError("callback_token.policy", "must be one of require, warn, not \"\(policy)\"")
        }
        let callbackSecret = try secret(values, "callback_token.key_file", credential: "callback.key", credentials)
        let callbackKey = callbackSecret.map { Array($0.value.utf8) }
        let callbackKeySource = callbackSecret?.source ?? "none: " + credentials.lookedIn("callback-key", key: "callback_token.key_file")
        if let callbackKey, callbackKey.count < 16 { throw SettingsError("callback-key", "must be at least 16 bytes") }
        var signingKeys: [String: [UInt8]] = [:]
        if let json = try secret(values, "webhook_signing.keys_file", credential: "webhook.signing.keys", credentials) {
            // `{}` is allowed and means none: the unit's LoadCredential= needs the file to exist even when unused.
            guard let object = try? JSONSerialization.jsonObject(with: Data(json.value.utf8)) as? [String: Any],
                object.values.allSatisfy({ ($0 as? String)?.isEmpty == false })
            else { throw SettingsError("webhook-signing-keys", "must be a JSON object of signing key id → key (non-empty strings), or {} for none") }
            signingKeys = object.mapValues { Array(($0 as! String).utf8) }
        }

        let level = try values.string("log.level") ?? "info"
        guard let logLevel = Logger.Level(rawValue: level) else {
            throw SettingsError("log.level", "must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")), not \"\(level)\"")
        }
        var settings = Settings(
            configPath: values.configPath, accounts: accounts, callbackKeySource: callbackKeySource,
            connectTimeout: try values.seconds("klarna.connect_timeout_seconds", default: 5),
            requestTimeout: requestTimeout,
            storePath: path(try values.string("store.path") ?? defaultStore),
            storeBusyTimeout: try values.seconds("store.busy_timeout_ms", default: 5_000, unit: 0.001),
            outboxDirectory: path(try values.string("outbox.dir") ?? "/var/spool/klarna-reconciler-outbox"),
            notifyURL: notifyURL,
            notifyTimeout: try values.seconds("notify.timeout_seconds", default: 10),
            notifyMaxAttempts: try values.int("notify.max_attempts", default: 12, range: 1...100),
            ratePerSecond: ratePerSecond, rateBurst: rateBurst, defaultCapturePolicy: capturePolicy,
            engine: engine, logLevel: logLevel, ingestSocket: socket, ingestSocketGroup: group, ingestListen: listen,
            ingestMaxBodyBytes: try values.int("ingest.max_body_bytes", default: 1 << 20, range: 1_024...(64 << 20)),
            ingestRequestTimeout: try values.seconds("ingest.request_timeout_seconds", default: 10),
            ingestMaxConnections: try values.int("ingest.max_connections", default: 256, range: 1...65_536),
            spoolDirectory: (try values.string("ingest.spool_dir")).map { $0.isEmpty ? nil : path($0) } ?? "/var/spool/klarna-reconciler",
            spoolRescanInterval: try values.seconds("ingest.spool_rescan_seconds", default: 5),
            spoolKeepDone: try values.bool("ingest.spool_keep_done", default: false),
            retention: RetentionPolicy(
                closedPayments: try values.days("retention.closed_days", default: 90),
                events: try values.days("retention.events_days", default: 180),
                rejections: try values.days("retention.rejections_days", default: 7),
                spoolDone: try values.days("retention.spool_done_days", default: 7),
                outboxAcknowledged: try values.days("retention.outbox_days", default: 30),
                unknownNotifications: try values.days("retention.unknown_notifications_days", default: 7),
                unverifiedRowCap: try values.cap("retention.unverified_max_rows", default: 10_000)),
            retentionInterval: .seconds(60 * (try values.int("retention.interval_minutes", default: 60, range: 1...10_080))),
            callbackPolicy: policy, callbackKey: callbackKey, signingKeys: signingKeys,
            drainTimeout: try values.seconds("engine.drain_timeout_seconds", default: (requestTimeout + Settings.drainAfterLongestCall).timeInterval),
            statusInterval: try values.seconds("engine.status_interval_seconds", default: 5),
            wedgeWorkLoopFile: try values.string("testing.wedge_work_loop_file").flatMap { $0.isEmpty ? nil : path($0) })
        settings.metricsListen = metricsListen
        settings.testingCreateOrderSettle = testingSettle
        // An unclear create-order ends after at most the request timeout and is followed by the settle period; the
        // next attempt must still come in the first half of the authorization token's 60 minutes.
        let tokenHalfLife = Deadlines.authorizationTokenLifetime / 2
        guard settings.requestTimeout + engine.createOrderSettle <= tokenHalfLife else {
            throw SettingsError(
                "engine.create_order_settle_seconds",
                "plus klarna.request_timeout_seconds must be at most \(Int(tokenHalfLife.timeInterval)) (half the authorization token's 60 minutes, so that a create-order after an unclear one still goes out in time), not \(Int(engine.createOrderSettle.timeInterval)) + \(Int(settings.requestTimeout.timeInterval))"
            )
        }
        // A stop never cancels a Klarna call it sent: the drain outlasts the longest one and the commit of its answer.
        guard settings.drainTimeout >= settings.requestTimeout + Settings.drainAfterLongestCall else {
            throw SettingsError(
                "engine.drain_timeout_seconds",
                "must be at least klarna.request_timeout_seconds + \(Int(Settings.drainAfterLongestCall.timeInterval)) (a stop waits for a Klarna call already sent, a create-order above all, to be answered or time out, and for its answer to be committed), not \(Int(settings.drainTimeout.timeInterval)) with klarna.request_timeout_seconds \(Int(settings.requestTimeout.timeInterval))"
            )
        }
        settings.leaseTime = try values.seconds("store.lease_seconds", default: 15)
        settings.diskMinFreeBytes = Int64(try values.int("disk.min_free_mb", default: 64, range: 0...1_048_576)) << 20
        if try values.string("disk.reserve_mb") != nil {
            settings.diskReserveBytes = Int64(try values.int("disk.reserve_mb", default: 0, range: 0...65_536)) << 20
        }
        guard settings.leaseTime >= .seconds(3), settings.leaseTime <= .seconds(600) else {
            throw SettingsError("store.lease_seconds", "must be between 3 and 600 (a lease is renewed every third of it)")
        }
        if let url = try values.string("store.url"), !url.isEmpty {
            guard try values.string("store.path") == nil else {
                throw SettingsError("store.url", "names a PostgreSQL store, and store.path a SQLite file: set one of them")
            }
            do {
                settings.storeURL = try PostgresLocation(url: url)
            } catch {
                throw SettingsError("store.url", "\(error)")
            }
            if let password = try secret(values, "store.password_file", credential: "store.password", credentials) {
                settings.storePassword = password.value
                settings.storePasswordSource = password.source
            } else {
                settings.storePasswordSource = credentials.lookedIn("store-password", key: "store.password_file")
            }
        }
        // Under systemd the operators' socket is the one klarna-reconciler-control.socket passes; without it, only
        // one named here (a default inside RuntimeDirectory= would be out of the operators' reach: it is 0750).
        settings.controlSocket = try values.string("control.socket").flatMap { $0.isEmpty ? nil : path($0) }
        settings.controlSocketGroup = try values.string("control.socket_group").flatMap { $0.isEmpty ? nil : $0 }
        if let group = settings.controlSocketGroup, getgrnam(group) == nil { throw SettingsError("control.socket_group", "no group named \(group)") }
        settings.settlements = SettlementSettings(
            enabled: accounts.contains(where: \.settlementsEnabled),
            syncInterval: .seconds(60 * (try values.int("settlements.sync_interval_minutes", default: 60, range: 1...1_440))),
            settleWithinDays: try values.int("settlements.settle_within_days", default: 14, range: 1...365),
            firstSyncLookback: .seconds(86_400 * (try values.int("settlements.first_sync_lookback_days", default: 30, range: 1...365))))
        settings.disputes = DisputeSettings(
            enabled: accounts.contains(where: \.disputesEnabled),
            syncInterval: .seconds(60 * (try values.int("disputes.sync_interval_minutes", default: 60, range: 1...1_440))),
            warnBefore: try values.hours("disputes.warn_before_hours", default: [72, 24]).map { .seconds($0 * 3_600) },
            firstSyncLookback: .seconds(86_400 * (try values.int("disputes.first_sync_lookback_days", default: 120, range: 1...365))),
            retry: settings.engine.writeRetry, longestCall: settings.engine.longestCall)
        return settings
    }

    /// A secret, trimmed, with where it came from: the credential `credential` (a file in `$CREDENTIALS_DIRECTORY`),
    /// else the file named by `key`, else the unit's credential file in the credstore. `nil` when none is there.
    static func secret(
        _ values: Values, _ key: String, credential: String, _ credentials: Secrets
    ) throws(SettingsError) -> (value: String, source: String)? {
        let name = credential.replacingOccurrences(of: ".", with: "-")
        if let value = credentials.reader?.string(forKey: ConfigKey(credential), isSecret: true)?.trimmingCharacters(in: .whitespacesAndNewlines),
            !value.isEmpty
        {
            return (value, "credential \(name)")
        }
        if let file = try values.string(key) {
            let path =
                file.hasPrefix("/") ? file : URL(fileURLWithPath: values.configPath).deletingLastPathComponent().appendingPathComponent(file).path
            return (try read(path, key: key), "file \(path)")
        }
        // The unit's own file: root-only, so a command run as another user (the reload command runs as the daemon's
        // user) goes without it rather than failing.
        let stored = credentials.credstorePath(name)
        guard FileManager.default.isReadableFile(atPath: stored) else { return nil }
        return (try read(stored, key: name), "file \(stored)")
    }

    /// A secret file's text, trimmed; unreadable or empty is a config error naming the file.
    static func read(_ path: String, key: String) throws(SettingsError) -> String {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw SettingsError(key, "cannot read \(path): \(Self.reason(error))")
        }
        let value = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !value.isEmpty else { throw SettingsError(key, "\(path) is empty") }
        return value
    }

    /// `https://host[:port][/path]`; plain `http` only to a loopback host (a local sandbox), because Basic auth would
    /// cross the network in clear text.
    static func validateURL(_ text: String, key: String, allowRemoteHTTP: Bool = false) throws(SettingsError) {
        let url = URL(string: text)
        // Checked first and never echoed: user:password@ or a ?token= would put a secret into the error line, which
        // goes to the journal and to `systemctl status`.
        if url?.user != nil || url?.password != nil || url?.query != nil {
            throw SettingsError(key, "must not carry credentials (user:password@) or a query; credentials come from files")
        }
        guard let url, let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty,
            scheme == "https" || scheme == "http"
        else { throw SettingsError(key, "\"\(text)\" is not an http(s) URL with a host") }
        if scheme == "http", !allowRemoteHTTP, !["127.0.0.1", "localhost", "::1", "[::1]"].contains(host) {
            throw SettingsError(key, "\"\(text)\" uses plain http to a remote host; use https (plain http is for a loopback sandbox only)")
        }
    }

    /// Every single value of the file by its dotted key (`klarna.base_url`), as its text was written (a bare `key:` is
    /// the empty string); the `accounts:` list is left out.
    static func scalars(_ text: String, path: String) throws(SettingsError) -> [String: String] {
        let root: Node?
        do {
            root = try Yams.compose(yaml: text)
        } catch {
            throw yamlError(path, error)
        }
        var values: [String: String] = [:]
        func walk(_ node: Node, _ prefix: String) {
            if let mapping = node.mapping {
                for (key, child) in mapping {
                    guard let name = key.string else { continue }
                    let path = prefix.isEmpty ? name : "\(prefix).\(name)"
                    if path != "accounts" { walk(child, path) }
                }
            } else if let scalar = node.scalar {
                // A bare `key:` is an empty value (`ingest.socket:` turns the socket off), as before.
                values[prefix] = node.null == nil ? scalar.string : ""
            }
        }
        if let root { walk(root, "") }
        return values
    }

    /// Unknown keys are refused by name: a typo must not silently fall back to a default. Secrets in the file are
    /// refused too.
    static func checkKeys(_ text: String, path: String) throws(SettingsError) {
        let document: Any?
        do {
            document = try Yams.load(yaml: text)
        } catch {
            throw yamlError(path, error)
        }
        guard let document else { return }
        guard let root = document as? [String: Any] else {
            throw SettingsError(nil, "config file \(path) must be a mapping of sections (klarna:, store:, …)")
        }
        var keys: [String] = []
        var lists: [String] = []
        func walk(_ value: Any, _ prefix: String) {
            // A list of its own, checked by `accountEntries`.
            if prefix == "accounts" { return }
            if let mapping = value as? [String: Any] {
                for (key, child) in mapping { walk(child, prefix.isEmpty ? key : "\(prefix).\(key)") }
            } else if value is NSNull, SettingsKeys.all.contains(where: { $0.hasPrefix(prefix + ".") }) {
                // A section whose keys are all commented out.
            } else {
                keys.append(prefix)
                if value is [Any] { lists.append(prefix) }
            }
        }
        walk(root, "")
        let known = Set(SettingsKeys.all)
        for key in keys.sorted() where !known.contains(key) {
            // Unknown whatever its name; one that names a secret also says where secrets go, since that is what its
            // author was after.
            let secret =
                Self.namesASecret(key)
                ? "; secrets are never read from config.yaml: use a credential file (klarna-password via LoadCredential=) or klarna.password_file"
                : ""
            let section = key.split(separator: ".").first.map(String.init) ?? key
            let siblings = SettingsKeys.all.filter { $0.hasPrefix(section + ".") }
            throw SettingsError(
                key,
                "unknown key in \(path)\(secret)"
                    + (siblings.isEmpty
                        ? "" : "; \(section) takes: \(siblings.map { String($0.dropFirst(section.count + 1)) }.joined(separator: ", "))"))
        }
        // Known keys only: an unknown one is called unknown above, whatever its value.
        if let key = lists.sorted().first { throw SettingsError(key, "must be a single value, not a list") }
    }

    /// `klarna.password`, `notify.secret`, `callback_token.key`: a key whose last word is a secret's name (not
    /// `engine.bogus_key` or `settlements.group_key`).
    static func namesASecret(_ key: String) -> Bool {
        let last = key.split(separator: ".").last.map(String.init) ?? key
        return ["password", "passwd", "secret", "key", "token", "api_key", "private_key", "client_secret"].contains(last)
            || last.hasSuffix("_password") || last.hasSuffix("_secret")
    }

    /// Library errors can span lines; a config error is one.
    /// The parser's problem and position, without the text it quotes: a broken file may hold a secret in the very
    /// line that is broken (a `password:` key is refused, but only once the file parses), and this line goes to the
    /// journal and to `systemctl status`.
    static func yamlError(_ path: String, _ error: any Error) -> SettingsError {
        var problem = oneLine(error)
        let position = problem.range(of: #"line \d+, column \d+"#, options: [.regularExpression, .backwards]).map { String(problem[$0]) }
        if let context = problem.range(of: " Context:") { problem = String(problem[..<context.lowerBound]) }
        if problem.hasSuffix(" ^"), let quote = problem.range(of: ": ", options: .backwards) { problem = String(problem[..<quote.lowerBound]) }
        if let position, !problem.contains(position) { problem += " (\(position))" }
        return SettingsError(nil, "config file \(path) is not valid YAML: \(problem)")
    }

    static func oneLine(_ error: any Error) -> String {
        "\(error)".split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: " ")
    }

    static func reason(_ error: any Error) -> String {
        let nsError = error as NSError
        if let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(underlying.code)))
        }
        switch nsError.code {
        case NSFileReadNoSuchFileError: return "no such file"
        case NSFileReadNoPermissionError: return "permission denied"
        case NSFileReadInapplicableStringEncodingError: return "not UTF-8 text"
        default: return nsError.localizedDescription
        }
    }
}

/// Typed reads that tell a missing key (default applies) from a present one of the wrong type (an error).
struct Values {
    /// The raw text of a key, if set.
    let lookup: (String) -> String?
    let configPath: String
    /// Put before a key in messages: `accounts[eu].` for an account's keys.
    var prefix = ""

    init(reader: ConfigReader, configPath: String) {
        lookup = { reader.string(forKey: ConfigKey($0)) }
        self.configPath = configPath
    }

    init(entries: [String: String], configPath: String, prefix: String) {
        lookup = { entries[$0] }
        self.configPath = configPath
        self.prefix = prefix
    }

    func string(_ key: String) throws(SettingsError) -> String? {
        lookup(key)?.trimmingCharacters(in: .whitespaces)
    }

    /// What a message calls `key`.
    func name(_ key: String) -> String { prefix + key }

    /// A retention in whole days; 0 keeps forever (`nil`).
    func days(_ key: String, default value: Int) throws(SettingsError) -> Duration? {
        let days = try int(key, default: value, range: 0...36_500)
        return days == 0 ? nil : .seconds(days * 86_400)
    }

    /// A most-rows cap; 0 is none.
    func cap(_ key: String, default value: Int) throws(SettingsError) -> Int? {
        let rows = try int(key, default: value, range: 0...100_000_000)
        return rows == 0 ? nil : rows
    }

    func int(_ key: String, default value: Int, range: ClosedRange<Int>) throws(SettingsError) -> Int {
        guard let raw = try string(key) else { return value }
        guard let number = Int(raw) else { throw SettingsError(name(key), "must be a whole number, not \"\(raw)\"") }
        guard range.contains(number) else {
            throw SettingsError(name(key), "must be between \(range.lowerBound) and \(range.upperBound), not \(number)")
        }
        return number
    }

    func double(_ key: String, default value: Double, range: ClosedRange<Double>) throws(SettingsError) -> Double {
        guard let raw = try string(key) else { return value }
        guard let number = Double(raw), number.isFinite else { throw SettingsError(name(key), "must be a number, not \"\(raw)\"") }
        guard range.contains(number) else {
            throw SettingsError(name(key), "must be between \(range.lowerBound) and \(range.upperBound), not \(raw)")
        }
        return number
    }

    /// A positive duration given in `unit` seconds (1 for `_seconds`, 0.001 for `_ms`, 3600 for `_hours`).
    func seconds(_ key: String, default value: Double, unit: Double = 1) throws(SettingsError) -> Duration {
        guard let raw = try string(key) else { return Duration(timeInterval: value * unit) }
        guard let number = Double(raw), number.isFinite else { throw SettingsError(name(key), "must be a number, not \"\(raw)\"") }
        guard number > 0 else { throw SettingsError(name(key), "must be greater than 0, not \(raw)") }
        return Duration(timeInterval: number * unit)
    }

    /// Whole hours, comma-separated (`72, 24`): each 1–2160, no repeats, at most 10.
    func hours(_ key: String, default value: [Int]) throws(SettingsError) -> [Int] {
        guard let raw = try string(key) else { return value }
        let parts = raw.trimmingCharacters(in: CharacterSet(charactersIn: "[] ")).split(separator: ",").map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        var hours: [Int] = []
        for part in parts {
            guard let number = Int(part), (1...2_160).contains(number) else {
                throw SettingsError(name(key), "must be whole hours from 1 to 2160, separated by commas (72, 24), not \"\(raw)\"")
            }
            guard !hours.contains(number) else { throw SettingsError(name(key), "names \(number) twice") }
            hours.append(number)
        }
        guard (1...10).contains(hours.count) else { throw SettingsError(name(key), "must name 1 to 10 lead times, not \"\(raw)\"") }
        return hours
    }

    func bool(_ key: String, default value: Bool) throws(SettingsError) -> Bool {
        guard let raw = try string(key) else { return value }
        switch raw.lowercased() {
        case "true", "yes", "on", "1": return true
        case "false", "no", "off", "0": return false
        default: throw SettingsError(name(key), "must be true or false, not \"\(raw)\"")
        }
    }

    func choice<T: RawRepresentable & CaseIterable>(_ key: String, _ type: T.Type) throws(SettingsError) -> T? where T.RawValue == String {
        guard let raw = try string(key) else { return nil }
        guard let value = T(rawValue: raw) else {
            throw SettingsError(name(key), "must be one of \(T.allCases.map(\.rawValue).joined(separator: ", ")), not \"\(raw)\"")
        }
        return value
    }
}
