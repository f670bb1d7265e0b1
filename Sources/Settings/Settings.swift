import Engine
import Foundation
import KlarnaAPI
import Logging
import PostgresBackend
import ReconcilerCore

/// The daemon's validated configuration: config.yaml, then `KLARNA_RECONCILER_*` environment overrides, then
/// credentials from `$CREDENTIALS_DIRECTORY` (or `*_file` keys). Secrets never appear in ``description``.
public struct Settings: Sendable {
    public var configPath: String
    /// The Klarna accounts, in the order configured: `accounts:`, or the `klarna:` section alone as the default one.
    public var accounts: [AccountSettings]
    /// Where the callback key came from, or where it was looked for.
    public var callbackKeySource: String
    public var connectTimeout: Duration
    public var requestTimeout: Duration
    public var storePath: String
    public var storeBusyTimeout: Duration
    /// `store.url`: the shared PostgreSQL store instead of the SQLite file at `storePath`.
    public var storeURL: PostgresLocation? = nil
    /// The credential `store-password` (or `store.password_file`); nil when none is there (trust or peer auth).
    public var storePassword: String? = nil
    public var storePasswordSource = "none"
    /// `store.lease_seconds`: with a PostgreSQL store, how long a daemon's lease on a unit of work lasts unrenewed.
    public var leaseTime: Duration = .seconds(15)
    /// `disk.min_free_mb`: the free-space watermark of every directory the daemon writes, in bytes.
    public var diskMinFreeBytes: Int64 = 64 << 20
    /// `disk.reserve_mb`: the reserve file beside a SQLite store, in bytes; `nil`: 1 % of its filesystem, at most 1 GiB.
    public var diskReserveBytes: Int64? = nil
    public var outboxDirectory: String
    public var notifyURL: String?
    public var notifyTimeout: Duration
    public var notifyMaxAttempts: Int
    /// The daemon-wide rate budget and capture policy: an account's unless it sets its own (``AccountSettings``).
    public var ratePerSecond: Double
    public var rateBurst: Double
    public var defaultCapturePolicy: CapturePolicy
    public var engine: EngineSettings
    public var logLevel: Logger.Level
    /// The unix socket forwarders speak HTTP to; `nil` when disabled.
    public var ingestSocket: String?
    public var ingestSocketGroup: String?
    /// An optional loopback TCP listener (`HOST:PORT`).
    public var ingestListen: String?
    /// `metrics.listen`: an optional loopback TCP port serving only `/metrics`, `/v1/health` and `/v1/ready`.
    public var metricsListen: String? = nil
    /// `control.socket`: the operators' unix socket (status, list, show, hold, …); `nil` when disabled.
    public var controlSocket: String? = nil
    public var controlSocketGroup: String? = nil
    public var ingestMaxBodyBytes: Int
    public var ingestRequestTimeout: Duration
    public var ingestMaxConnections: Int
    /// The spool directory (Maildir semantics); `nil` when disabled.
    public var spoolDirectory: String?
    public var spoolRescanInterval: Duration
    public var spoolKeepDone: Bool
    /// `retention.*`: how long finished things are kept, and how often the daemon prunes.
    public var retention: RetentionPolicy
    public var retentionInterval: Duration
    public var callbackPolicy: String
    /// The `callback-key` credential: HMAC key of the callback-URL tokens. `nil` when not configured.
    public var callbackKey: [UInt8]?
    /// The `webhook-signing-keys` credential: Klarna Network signing key id → key.
    public var signingKeys: [String: [UInt8]]
    /// How long a stop lets the steps under way finish (`engine.drain_timeout_seconds`): at least the request timeout
    /// plus ``drainAfterLongestCall``, so no Klarna call already sent is cancelled; by default exactly that.
    public var drainTimeout: Duration
    /// What a drain allows beyond the request timeout: committing the answer of the last call.
    public static let drainAfterLongestCall: Duration = .seconds(5)
    /// How often `STATUS=` is refreshed.
    public var statusInterval: Duration
    /// Fault injection for the watchdog test: when this file appears the work loop hangs. Never set in production.
    public var wedgeWorkLoopFile: String?
    /// `testing.create_order_settle_ms`: a settle period outside the operators' range, for tests of the daemon as a
    /// process (it then is `engine.createOrderSettle`). Never set in production.
    public var testingCreateOrderSettle: Duration? = nil
    /// `settlements.*`: fetching Klarna's payouts and matching them against the ledger (off by default).
    public var settlements = SettlementSettings()
    /// `disputes.*`: following Klarna's disputes and their deadlines (off by default). Its retry and longest call are
    /// the engine's.
    public var disputes = DisputeSettings()
}

/// A configuration problem, said in one line: which key, what is wrong, and where it came from.
public struct SettingsError: Error, CustomStringConvertible, Equatable {
    public let key: String?
    public let problem: String

    public init(_ key: String?, _ problem: String) {
        self.key = key
        self.problem = problem
    }

    public var description: String { key.map { "\($0): \(problem)" } ?? problem }
}

/// Every key config.yaml may hold, with its default as documented in etc/config.yaml.
public enum SettingsKeys {
    public static let all: [String] = [
        "klarna.base_url", "klarna.network_base_url", "klarna.region", "klarna.environment", "klarna.username",
        "klarna.password_file", "klarna.connect_timeout_seconds", "klarna.request_timeout_seconds",
        "store.path", "store.busy_timeout_ms", "store.url", "store.password_file", "store.lease_seconds",
        "outbox.dir",
        "disk.min_free_mb", "disk.reserve_mb",
        "notify.url", "notify.timeout_seconds", "notify.max_attempts",
        "polling.dense_interval_seconds", "polling.dense_window_seconds", "polling.max_interval_seconds",
        "polling.expiry_grace_seconds", "polling.pending_fraud_interval_seconds", "polling.order_recheck_interval_seconds",
        "retry.initial_delay_ms", "retry.max_delay_seconds", "retry.max_attempts",
        "rate_limit.requests_per_second", "rate_limit.burst",
        "capture.default_policy",
        "authorization_expiry.warn_before_hours", "authorization_expiry.auto_extend",
        "engine.max_concurrency", "engine.customer_token_description", "engine.wakeup_interval_ms",
        "engine.drain_timeout_seconds", "engine.status_interval_seconds", "engine.create_order_settle_seconds",
        "testing.wedge_work_loop_file", "testing.create_order_settle_ms",
        "log.level",
        "ingest.socket", "ingest.socket_group", "ingest.listen", "ingest.max_body_bytes", "ingest.request_timeout_seconds",
        "ingest.max_connections",
        "ingest.spool_dir", "ingest.spool_rescan_seconds", "ingest.spool_keep_done",
        "callback_token.policy", "callback_token.key_file", "webhook_signing.keys_file",
        "retention.closed_days", "retention.events_days", "retention.rejections_days", "retention.unknown_notifications_days",
        "retention.unverified_max_rows", "retention.spool_done_days", "retention.outbox_days", "retention.interval_minutes",
        "metrics.listen",
        "control.socket", "control.socket_group",
        "settlements.enabled", "settlements.sync_interval_minutes", "settlements.settle_within_days",
        "settlements.first_sync_lookback_days",
        "disputes.enabled", "disputes.sync_interval_minutes", "disputes.warn_before_hours", "disputes.first_sync_lookback_days",
    ]
}

extension Settings {
    /// The effective configuration, one `key: value` per line, secrets redacted. What `check-config` prints.
    public var effectiveDescription: String {
        func days(_ age: Duration?) -> String { age.map { "\(Int($0.timeInterval / 86_400))" } ?? "0 (kept forever)" }
        func seconds(_ duration: Duration) -> String {
            let value = duration.timeInterval
            return value == value.rounded() ? "\(Int(value))" : String(format: "%.3f", value)
        }
        let engine = self.engine
        // The `klarna:` section alone names the default account's keys as before; `accounts:` names each account's.
        let single = accounts.count == 1 && accounts[0].id == .default
        let accountLines: [(String, String)] = accounts.flatMap { account -> [(String, String)] in
            let prefix = single ? "klarna." : "accounts[\(account.id)]."
            var lines = [
                (prefix + "base_url", account.klarna.baseURL),
                (prefix + "network_base_url", account.klarna.networkBaseURL),
                (prefix + "username", account.klarna.credentials.username),
                (prefix + "password", "<redacted> (\(account.passwordSource))"),
                (prefix + "merchant_id", account.merchantID),
            ]
            if !single {
                lines += [
                    (prefix + "rate_limit.requests_per_second", "\(account.ratePerSecond)"),
                    (prefix + "rate_limit.burst", "\(account.rateBurst)"),
                    (prefix + "capture.default_policy", account.capturePolicy.rawValue),
                    (prefix + "settlements.enabled", "\(account.settlementsEnabled)"),
                    (prefix + "disputes.enabled", "\(account.disputesEnabled)"),
                ]
            }
            return lines
        }
        let lines: [(String, String)] =
            [
                ("config", configPath),
                ("accounts", single ? "default (the klarna: section)" : accounts.map(\.id.rawValue).joined(separator: ", ")),
            ] + accountLines + [
                ("klarna.connect_timeout_seconds", seconds(connectTimeout)),
                ("klarna.request_timeout_seconds", seconds(requestTimeout)),
                ("store.path", storePath),
                ("store.busy_timeout_ms", "\(Int(storeBusyTimeout.timeInterval * 1_000))"),
                ("store.url", storeURL.map { "\($0)" } ?? "(none: the SQLite file store.path)"),
                (
                    "store.password",
                    storeURL == nil ? "(not used)" : storePassword == nil ? "(none: \(storePasswordSource))" : "<redacted> (\(storePasswordSource))"
                ),
                ("store.lease_seconds", storeURL == nil ? "(not used)" : "\(Int(leaseTime.timeInterval))"),
                ("outbox.dir", outboxDirectory),
                ("disk.min_free_mb", "\(diskMinFreeBytes >> 20)"),
                (
                    "disk.reserve_mb",
                    storeURL != nil
                        ? "(not used: the store is PostgreSQL's)"
                        : diskReserveBytes.map { "\($0 >> 20)" } ?? "(1 % of the store's filesystem, at most 1024)"
                ),
                ("notify.url", notifyURL ?? "(none)"),
                ("notify.timeout_seconds", seconds(notifyTimeout)),
                ("notify.max_attempts", "\(notifyMaxAttempts)"),
                ("polling.dense_interval_seconds", seconds(engine.polling.denseInterval)),
                ("polling.dense_window_seconds", seconds(engine.polling.denseWindow)),
                ("polling.max_interval_seconds", seconds(engine.polling.maxInterval)),
                ("polling.expiry_grace_seconds", seconds(engine.polling.expiryGrace)),
                ("polling.pending_fraud_interval_seconds", seconds(engine.deadlines.pendingFraudInterval)),
                ("polling.order_recheck_interval_seconds", seconds(engine.deadlines.orderRecheckInterval)),
                ("retry.initial_delay_ms", "\(Int(engine.writeRetry.initialDelay.timeInterval * 1_000))"),
                ("retry.max_delay_seconds", seconds(engine.writeRetry.maxDelay)),
                ("retry.max_attempts", "\(engine.writeRetry.maxAttempts)"),
                ("rate_limit.requests_per_second", "\(ratePerSecond)"),
                ("rate_limit.burst", "\(rateBurst)"),
                ("capture.default_policy", defaultCapturePolicy.rawValue),
                ("authorization_expiry.warn_before_hours", String(format: "%g", engine.deadlines.authorizationWarnBefore.timeInterval / 3_600)),
                ("authorization_expiry.auto_extend", "\(engine.deadlines.autoExtendAuthorization)"),
                ("engine.max_concurrency", "\(engine.maxConcurrency)"),
                ("engine.customer_token_description", engine.customerTokenDescription),
                ("engine.wakeup_interval_ms", "\(Int(engine.wakeupInterval.timeInterval * 1_000))"),
                ("engine.drain_timeout_seconds", seconds(drainTimeout)),
                ("engine.status_interval_seconds", seconds(statusInterval)),
                ("engine.create_order_settle_seconds", seconds(engine.createOrderSettle)),
                ("log.level", logLevel.rawValue),
                ("ingest.socket", ingestSocket ?? "(disabled)"),
                ("ingest.socket_group", ingestSocketGroup ?? "(the daemon's group)"),
                ("ingest.listen", ingestListen ?? "(none)"),
                ("ingest.max_body_bytes", "\(ingestMaxBodyBytes)"),
                ("ingest.request_timeout_seconds", seconds(ingestRequestTimeout)),
                ("ingest.max_connections", "\(ingestMaxConnections)"),
                ("ingest.spool_dir", spoolDirectory ?? "(disabled)"),
                ("ingest.spool_rescan_seconds", seconds(spoolRescanInterval)),
                ("ingest.spool_keep_done", "\(spoolKeepDone)"),
                ("retention.closed_days", days(retention.closedPayments)),
                ("retention.events_days", days(retention.events)),
                ("retention.rejections_days", days(retention.rejections)),
                ("retention.unknown_notifications_days", days(retention.unknownNotifications)),
                ("retention.unverified_max_rows", retention.unverifiedRowCap.map { "\($0)" } ?? "0 (no cap)"),
                ("retention.spool_done_days", days(retention.spoolDone)),
                ("retention.outbox_days", days(retention.outboxAcknowledged)),
                ("retention.interval_minutes", "\(Int(retentionInterval.timeInterval / 60))"),
                ("metrics.listen", metricsListen ?? "(none: /metrics on the ingest socket only)"),
                ("control.socket", controlSocket ?? "(disabled)"),
                ("control.socket_group", controlSocketGroup ?? "(the daemon's group)"),
                ("settlements.enabled", single ? "\(settlements.enabled)" : "per account"),
                ("settlements.sync_interval_minutes", "\(Int(settlements.syncInterval.timeInterval / 60))"),
                ("settlements.settle_within_days", "\(settlements.settleWithinDays)"),
                ("settlements.first_sync_lookback_days", "\(Int(settlements.firstSyncLookback.timeInterval / 86_400))"),
                ("disputes.enabled", single ? "\(disputes.enabled)" : "per account"),
                ("disputes.sync_interval_minutes", "\(Int(disputes.syncInterval.timeInterval / 60))"),
                ("disputes.warn_before_hours", disputes.warnBefore.map { "\(Int($0.timeInterval / 3_600))" }.joined(separator: ", ")),
                ("disputes.first_sync_lookback_days", "\(Int(disputes.firstSyncLookback.timeInterval / 86_400))"),
                ("callback_token.policy", callbackPolicy),
                (
                    "callback_token.key",
                    callbackKey == nil
                        ? "(none: HPP and KP callbacks are refused under policy require; \(callbackKeySource))" : "<redacted> (\(callbackKeySource))"
                ),
                ("testing.wedge_work_loop_file", wedgeWorkLoopFile ?? "(none)"),
                (
                    "testing.create_order_settle_ms",
                    testingCreateOrderSettle.map { "\(Int($0.timeInterval * 1_000)) (replaces engine.create_order_settle_seconds)" } ?? "(none)"
                ),
                (
                    "webhook_signing.keys",
                    signingKeys.isEmpty
                        ? "(none: Klarna Network webhooks are refused)" : "<redacted> ids \(signingKeys.keys.sorted().joined(separator: ", "))"
                ),
            ]
        return lines.map { "\($0.0): \($0.1)" }.joined(separator: "\n")
    }
}

extension Settings {
    /// Sections a reload applies to the running daemon; everything else is read once at start.
    public static let liveSections: Set<String> = [
        "polling", "retry", "rate_limit", "capture", "authorization_expiry", "engine", "log", "callback_token", "webhook_signing",
        "settlements", "disputes",
    ]

    /// Keys of live sections that are read once at start all the same.
    public static let restartKeys: Set<String> = [
        "engine.drain_timeout_seconds", "engine.status_interval_seconds", "settlements.enabled", "disputes.enabled",
    ]

    /// The keys whose value differs from `old`, split into those a reload applies now and those that wait for a
    /// restart. Secrets are compared by value but named only.
    public func changes(from old: Settings) -> (live: [String], restart: [String]) {
        func lines(_ settings: Settings) -> [String: String] {
            var result: [String: String] = [:]
            for line in settings.effectiveDescription.split(separator: "\n") {
                guard let colon = line.firstIndex(of: ":") else { continue }
                result[String(line[..<colon])] = String(line[colon...])
            }
            return result
        }
        let before = lines(old), after = lines(self)
        var changed = Set(after.keys.filter { before[$0] != after[$0] })
        if callbackKey != old.callbackKey { changed.insert("callback_token.key") }
        if signingKeys != old.signingKeys { changed.insert("webhook_signing.keys") }
        for account in accounts where old.account(account.id).map({ $0.klarna.credentials != account.klarna.credentials }) ?? false {
            changed.insert(accounts.count == 1 && account.id == .default ? "klarna.password" : "accounts[\(account.id)].password")
        }
        let sorted = changed.sorted()
        let live = sorted.filter { key in
            // An account's rate budget and capture policy change live, the rest of it (and the list) at a restart.
            let bare = key.hasPrefix("accounts[") ? String(key.drop { $0 != "." }.dropFirst()) : key
            return Self.liveSections.contains(String(bare.prefix { $0 != "." })) && !Self.restartKeys.contains(bare)
                && (old.accounts.map(\.id) == accounts.map(\.id) || !key.hasPrefix("accounts"))
        }
        return (live, sorted.filter { !live.contains($0) })
    }
}

extension Settings {
    /// The store, as status lines and errors name it.
    public var storeDescription: String { storeURL.map { "\($0)" } ?? storePath }
}
