import ChildProcess
import Daemon
import Foundation
import Glibc
import HTTPServer
import KlarnaSandbox
import Logging
import ReconcilerCore
import ReconcilerStore
import SQLiteBackend
import Synchronization
import Testing
import TestSupport

/// The real `klarna-reconciler` binary as a separate process, with its config, store and outbox in a temporary
/// folder, against a sandbox served from the test process over a real loopback socket.
final class DaemonFixture: @unchecked Sendable {
    let directory: String
    let sandbox: KlarnaSandbox
    let sandboxURL: String
    private let serving: Task<Void, any Error>
    private(set) var daemon: ChildProcess?
    /// The daemon's `$NOTIFY_SOCKET`: what it tells systemd, datagram by datagram.
    private(set) var notify: NotifySocket?
    var configPath: String { directory + "/config.yaml" }
    let twoAccounts: Bool
    /// With `twoAccounts`: `$CREDENTIALS_DIRECTORY`, holding `klarna-password.us` as a unit's `LoadCredential=` would.
    var credentials: [String: String] { twoAccounts ? ["CREDENTIALS_DIRECTORY": directory + "/credentials"] : [:] }
    /// The SQLite file `store.path` names (absolute).
    let storePath: String
    /// `outbox.dir` and `ingest.spool_dir`, absolute: in the fixture's folder unless given elsewhere.
    let outboxDirectory: String
    let spoolDirectory: String
    var outboxNew: String { outboxDirectory + "/new" }
    var socketPath: String { directory + "/ingest.sock" }
    /// The operators' socket (`control.socket`).
    var controlPath: String { directory + "/control.sock" }
    /// The built daemon, next to this test binary.
    static let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        .deletingLastPathComponent().appendingPathComponent("klarna-reconciler")
    static let callbackKey = "callback-key-for-tests-0123456789"
    static let signingKey = "kn-signing-key-for-tests"

    /// - Parameters:
    ///   - extraConfig: YAML appended to the generated config.
    ///   - ingestConfig: lines added to its `ingest:` section (indented by two spaces).
    ///   - storeConfig: the `store:` section's lines (a PostgreSQL `url:` instead of the SQLite file).
    ///   - outboxDir, spoolDir: `outbox.dir` and `ingest.spool_dir`, relative to the fixture's folder or absolute.
    ///   - diskConfig: the `disk:` section's lines; by default a small reserve (the default, 1 % of the filesystem up
    ///     to 1 GiB, would be allocated by every daemon a test starts).
    /// - Parameter testingConfig: keys for the `testing:` section, besides the short create-order settle period every
    ///   fixture has (the operators' minimum, 30 s, would make each unclear create-order a half-minute wait).
    /// - Parameter twoAccounts: `accounts:` eu and us (``TwoAccounts``) against a sandbox with their two merchants,
    ///   instead of the `klarna:` section alone.
    init(
        extraConfig: String = "", ingestConfig: [String] = [], storeConfig: [String] = ["path: state/state.sqlite"], testingConfig: [String] = [],
        outboxDir: String = "outbox", spoolDir: String = "spool", diskConfig: [String] = ["reserve_mb: 8"], twoAccounts: Bool = false
    ) async throws {
        directory = NSTemporaryDirectory() + "klarna-reconciler-daemon-" + UUID().uuidString.prefix(8)
        let directory = self.directory
        func absolute(_ path: String) -> String { path.hasPrefix("/") ? path : directory + "/" + path }
        outboxDirectory = absolute(outboxDir)
        spoolDirectory = absolute(spoolDir)
        storePath = absolute(storeConfig.first { $0.hasPrefix("path: ") }.map { String($0.dropFirst(6)) } ?? "state/state.sqlite")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        sandbox = KlarnaSandbox(
            configuration: .init(username: "merchant", password: "daemon-secret", otherMerchants: twoAccounts ? [TwoAccounts.usMerchant] : []))
        let sandbox = self.sandbox
        let server = try await HTTPServer.bind(.tcp(host: "127.0.0.1", port: 0), logger: Logger(label: "test.sandbox")) { await sandbox.handle($0) }
        serving = Task { try await server.run() }
        sandboxURL = "http://127.0.0.1:\(server.port!)"
        try "daemon-secret\n".write(toFile: directory + "/klarna-password", atomically: true, encoding: .utf8)
        try "\(Self.callbackKey)\n".write(toFile: directory + "/callback-key", atomically: true, encoding: .utf8)
        try #"{"krn:partner:global:notification:signing-key:1": "\#(Self.signingKey)"}"#.write(
            toFile: directory + "/signing-keys.json", atomically: true, encoding: .utf8)
        // The second account's password as the unit passes it: a credential named klarna-password.us.
        self.twoAccounts = twoAccounts
        if twoAccounts {
            try FileManager.default.createDirectory(atPath: directory + "/credentials", withIntermediateDirectories: true)
            try "\(TwoAccounts.usMerchant.password)\n".write(
                toFile: directory + "/credentials/klarna-password.us", atomically: true, encoding: .utf8)
        }
        let klarna =
            twoAccounts
            ? """
            klarna:
              request_timeout_seconds: 2
            accounts:
              - id: eu
                base_url: \(sandboxURL)
                username: merchant
                merchant_id: \(TwoAccounts.euMerchantID)
                password_file: klarna-password
              - id: us
                base_url: \(sandboxURL)
                username: \(TwoAccounts.usMerchant.username)
                capture:
                  default_policy: on_request
            """
            : """
            klarna:
              base_url: \(sandboxURL)
              username: merchant
              password_file: klarna-password
              request_timeout_seconds: 2
            """
        try """
        \(klarna)
        store:
        \(storeConfig.map { "  " + $0 }.joined(separator: "\n"))
        outbox:
          dir: \(outboxDir)
        disk:
        \(diskConfig.map { "  " + $0 }.joined(separator: "\n"))
        ingest:
          socket: ingest.sock
          spool_dir: \(spoolDir)
          spool_rescan_seconds: 1
          request_timeout_seconds: 1
        \(ingestConfig.map { "  " + $0 }.joined(separator: "\n"))
        control:
          socket: control.sock
        callback_token:
          key_file: callback-key
        webhook_signing:
          keys_file: signing-keys.json
        polling:
          dense_interval_seconds: 0.2
          pending_fraud_interval_seconds: 0.5
        retry:
          initial_delay_ms: 100
          max_delay_seconds: 2
        rate_limit:
          requests_per_second: 2000
          burst: 200
        engine:
          wakeup_interval_ms: 100
        log:
          level: info
        testing:
          create_order_settle_ms: 1000
        \(testingConfig.map { "  " + $0 }.joined(separator: "\n"))
        \(extraConfig)
        """.write(toFile: configPath, atomically: true, encoding: .utf8)
    }

    deinit {
        if let daemon, daemon.isRunning { kill(daemon.processIdentifier, SIGKILL) }
        serving.cancel()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Starts `run` and waits for READY=1 on a notify socket, unless `waitForReady` is false (a start expected to wait:
    /// ``notifications`` gathers what it tells systemd).
    func start(environment: [String: String] = [:], waitForReady: Bool = true) async throws {
        let environment = credentials.merging(environment) { $1 }
        let notify = try NotifySocket(path: directory + "/notify-\(UUID().uuidString.prefix(6))")
        self.notify = notify
        let process = ChildProcess()
        process.executableURL = DaemonFixture.executable
        process.arguments = ["run", "--config", configPath]
        process.environment = ProcessInfo.processInfo.environment.merging(environment.merging(["NOTIFY_SOCKET": notify.path]) { $1 }) { $1 }
            .merging(stateDirectory) { old, _ in old }
        _ = FileManager.default.createFile(atPath: directory + "/daemon.log", contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: directory + "/daemon.log"))
        log.seekToEndOfFile()
        process.standardError = log
        process.standardOutput = log
        try process.run()
        daemon = process
        guard waitForReady else { return }
        // With WATCHDOG_USEC set, the supervisor's first ping may come before READY=1: skip datagrams until READY.
        let deadline = ContinuousClock.now + .seconds(20) * waitSlack
        var ready: String?
        while ContinuousClock.now < deadline, let next = try await notify.receive(timeout: deadline - ContinuousClock.now) {
            if next.hasPrefix("READY=1") { ready = next; break }
        }
        #expect(ready?.hasPrefix("READY=1") == true, "daemon did not report READY: \(daemonLog.suffix(500))")
    }

    /// The daemon in this process (``ReconcilerDaemon``), as `run` assembles it but without signal handlers: returns
    /// once it is ready; ``stopInProcess()`` stops it and returns what its run threw.
    func startInProcess() async throws -> InProcessDaemon {
        let logs = LogLines()
        let daemon = ReconcilerDaemon(
            options: .init(
                configPath: configPath, environment: ProcessInfo.processInfo.environment.merging(stateDirectory) { $1 }, logger: logs.logger()))
        let running = Task { try await daemon.run() }
        do {
            try await waitUntil(timeout: .seconds(20)) { daemon.isReady }
        } catch {
            running.cancel()
            throw error
        }
        return InProcessDaemon(daemon: daemon, running: running, logs: logs)
    }

    /// systemd's `$STATE_DIRECTORY`, this fixture's own: with `store.url` the daemon's lock file (one daemon per
    /// host) goes there, not to /var/lib.
    var stateDirectory: [String: String] { ["STATE_DIRECTORY": directory + "/state"] }

    var daemonLog: String { (try? String(contentsOfFile: directory + "/daemon.log", encoding: .utf8)) ?? "" }

    /// Every datagram the daemon sent its notify socket since ``start(environment:waitForReady:)`` that has not been
    /// read yet, read now.
    var notifications: [String] {
        get async throws {
            var received: [String] = []
            while let next = try await notify?.receive(timeout: .milliseconds(20)) { received.append(next) }
            seen.withLock { $0 += received }
            return seen.withLock { $0 }
        }
    }
    private let seen = Mutex<[String]>([])

    func kill9() async throws {
        guard let daemon else { return }
        kill(daemon.processIdentifier, SIGKILL)
        try await waitUntil(timeout: .seconds(10)) { !daemon.isRunning }
        self.daemon = nil
    }

    /// SIGTERM, then the exit status.
    func stop() async throws -> Int32 {
        guard let daemon else { return -1 }
        kill(daemon.processIdentifier, SIGTERM)
        try await waitUntil(timeout: .seconds(20)) { !daemon.isRunning }
        self.daemon = nil
        return daemon.terminationStatus
    }

    struct Result {
        let status: Int32
        let output: String
        let errors: String
    }

    /// Runs a CLI command against this fixture's config and returns its exit status and output.
    func cli(_ arguments: [String], config: String? = nil, environment: [String: String] = [:]) async throws -> Result {
        let id = UUID().uuidString.prefix(8)
        let out = directory + "/cli-\(id).out", err = directory + "/cli-\(id).err"
        _ = FileManager.default.createFile(atPath: out, contents: nil)
        _ = FileManager.default.createFile(atPath: err, contents: nil)
        let process = ChildProcess()
        process.executableURL = DaemonFixture.executable
        process.arguments = arguments + ["--config", config ?? configPath]
        process.environment = ProcessInfo.processInfo.environment.merging(credentials.merging(environment) { $1 }) { $1 }.merging(stateDirectory) {
            old, _ in old
        }
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: err))
        try process.run()
        try await waitUntil(timeout: .seconds(30)) { !process.isRunning }
        return Result(
            status: process.terminationStatus, output: try String(contentsOfFile: out, encoding: .utf8),
            errors: try String(contentsOfFile: err, encoding: .utf8))
    }

    func readStore() throws -> SQLiteStore { try SQLiteStore(path: storePath, readOnly: true) }

    func outboxFiles() -> [String] { ((try? FileManager.default.contentsOfDirectory(atPath: outboxNew)) ?? []).sorted() }
}

extension DaemonFixture {
    /// A request over the ingest unix socket with curl, as a forwarder would send it: status and body. Waits by
    /// polling, never by blocking a thread: the sandbox the daemon talks to runs on this process's task pool.
    /// - Parameter via: a base URL to send to instead of the unix socket (a forwarder in front of it).
    /// - Parameter socket: another unix socket than the ingest socket (the operators' socket).
    /// - Parameter maxTime: curl's `--max-time`, seconds: how long one attempt may take.
    func post(
        _ target: String, _ body: String, headers: [String] = [], method: String = "POST", via: String? = nil, socket: String? = nil,
        maxTime: Int = 30
    ) async throws -> (status: Int, body: String) {
        let id = UUID().uuidString.prefix(8)
        let bodyFile = directory + "/req-\(id).json", outFile = directory + "/resp-\(id).json", codeFile = directory + "/code-\(id)"
        try body.write(toFile: bodyFile, atomically: true, encoding: .utf8)
        _ = FileManager.default.createFile(atPath: codeFile, contents: nil)
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        var arguments: [String] = ["-s", "--max-time", "\(maxTime)", "-o", outFile, "-w", "%{http_code}", "-X", method]
        if via == nil { arguments += ["--unix-socket", socket ?? socketPath] }
        if method == "POST" { arguments += ["--data-binary", "@\(bodyFile)", "-H", "Content-Type: application/json"] }
        for header in headers { arguments += ["-H", header] }
        process.arguments = arguments + ["\(via ?? "http://localhost")\(target)"]
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: codeFile))
        try process.run()
        try await waitUntil(timeout: .seconds(40)) { !process.isRunning }
        let code = (try? String(contentsOfFile: codeFile, encoding: .utf8)) ?? ""
        return (Int(code) ?? 0, (try? String(contentsOfFile: outFile, encoding: .utf8)) ?? "")
    }
}

/// The two accounts of a ``DaemonFixture`` made with `twoAccounts`: `eu`, the sandbox's primary merchant, and `us`,
/// another merchant with its own credentials, whose payments are captured on request by default.
enum TwoAccounts {
    static let euMerchantID = "K100001"
    static let usMerchant = SandboxMerchant(id: "K200002", username: "K200002_us", password: "us-secret")
}

/// A daemon started in the test's process by ``DaemonFixture/startInProcess()``.
struct InProcessDaemon {
    let daemon: ReconcilerDaemon
    let running: Task<Void, any Error>
    let logs: LogLines

    /// A graceful stop, as SIGTERM; throws what the daemon's run threw.
    func stop() async throws {
        await daemon.stop()
        try await running.value
    }
}
