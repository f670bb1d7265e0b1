import ChildProcess
import Foundation
import Glibc
import KlarnaSandbox
import ReconcilerCore
import SQLiteBackend
import Testing
import TestSupport

/// What the daemon tells systemd (sd_notify datagrams on `$NOTIFY_SOCKET`) around a reload, a watchdog and a stop,
/// with the real binary and no service manager. The same behaviour under a real systemd is in Tests/System.
@Suite("The sd_notify protocol", .serialized)
struct SystemdProtocolTests {
    /// Datagrams until one satisfies `done`, or the deadline.
    static func datagrams(_ fixture: DaemonFixture, timeout: Duration = .seconds(15), until done: (String) -> Bool) async throws -> [String] {
        var seen: [String] = []
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline, let next = try await fixture.notify?.receive(timeout: deadline - ContinuousClock.now) {
            seen.append(next)
            if done(next) { break }
        }
        return seen
    }

    static func monotonicMicroseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1_000
    }

    @Test(
        "reload: RELOADING=1 with MONOTONIC_USEC, then READY=1; a changed setting is applied; a broken file exits 78 and changes nothing; no daemon exits 69"
    )
    func reload() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let config = try String(contentsOfFile: fixture.configPath, encoding: .utf8)
        try config.replacingOccurrences(of: "  level: info", with: "  level: debug")
            .write(toFile: fixture.configPath, atomically: true, encoding: .utf8)

        // As under ExecReload= of a namespaced unit: a credentials directory the command cannot read (systemd#35227).
        let before = Self.monotonicMicroseconds()
        let reloaded = try await fixture.cli(["reload"], environment: ["CREDENTIALS_DIRECTORY": fixture.directory + "/no-such-dir"])
        #expect(reloaded.status == 0, "\(reloaded.errors)")
        #expect(reloaded.output.contains("applied log.level"), "\(reloaded.output)")
        let messages = try await Self.datagrams(fixture) { $0.hasPrefix("READY=1") }
        let reloading = try #require(messages.first { $0.hasPrefix("RELOADING=1\n") }, "\(messages)")
        let stamp = reloading.split(separator: "\n").first { $0.hasPrefix("MONOTONIC_USEC=") }.flatMap { Int64($0.dropFirst(15)) }
        #expect(stamp.map { $0 >= before && $0 <= Self.monotonicMicroseconds() } == true, "\(reloading)")
        #expect(messages.last?.hasPrefix("READY=1\nSTATUS=") == true, "\(messages)")

        // A setting that is not live keeps being named until a restart, also by a later reload that changes nothing.
        let restartOnly = config.replacingOccurrences(of: "  level: info", with: "  level: debug") + "\nnotify:\n  timeout_seconds: 3\n"
        try restartOnly.write(toFile: fixture.configPath, atomically: true, encoding: .utf8)
        #expect(try await fixture.cli(["reload"]).output.contains("no live setting changed; takes a restart: notify.timeout_seconds"))
        let again = try await fixture.cli(["reload"])
        #expect(again.output.contains("no live setting changed; takes a restart: notify.timeout_seconds"), "\(again.output)")
        for _ in 0..<2 { _ = try await Self.datagrams(fixture) { $0.hasPrefix("READY=1") } }

        try config.replacingOccurrences(of: "dense_interval_seconds: 0.2", with: "dense_interval_seconds: -1")
            .write(toFile: fixture.configPath, atomically: true, encoding: .utf8)
        let refused = try await fixture.cli(["reload"])
        #expect(refused.status == 78)
        #expect(refused.errors.contains("polling.dense_interval_seconds"), "\(refused.errors)")
        #expect(fixture.daemon?.isRunning == true)

        // Valid as far as the command can tell without credentials, refused by the daemon: it keeps running on the
        // old configuration, says why, and still ends the reload with READY=1.
        try config.replacingOccurrences(of: "password_file: klarna-password", with: "password_file: no-such-password")
            .write(toFile: fixture.configPath, atomically: true, encoding: .utf8)
        let daemonRefused = try await fixture.cli(["reload"])
        #expect(daemonRefused.status == 78)
        #expect(daemonRefused.errors.contains("reload refused, the running configuration stays: klarna.password_file"), "\(daemonRefused.errors)")
        let afterRefusal = try await Self.datagrams(fixture) { $0.hasPrefix("READY=1") }
        #expect(afterRefusal.contains { $0.hasPrefix("RELOADING=1\n") } && afterRefusal.last?.hasPrefix("READY=1") == true, "\(afterRefusal)")
        #expect(fixture.daemon?.isRunning == true)

        try config.write(toFile: fixture.configPath, atomically: true, encoding: .utf8)
        #expect(try await fixture.stop() == 0)
        #expect(try await fixture.cli(["reload"]).status == 69)
    }

    @Test("watchdog: WATCHDOG=1 while the loops make progress; a wedged work loop stops the pings and sends WATCHDOG=trigger naming it")
    func watchdog() async throws {
        let wedge = NSTemporaryDirectory() + "wedge-" + UUID().uuidString.prefix(8)
        let fixture = try await DaemonFixture(testingConfig: ["wedge_work_loop_file: \(wedge)"])
        try await fixture.start(environment: ["WATCHDOG_USEC": "1500000"])
        // Pings every 0.75 s (half the interval) while healthy.
        let healthy = try await Self.datagrams(fixture, timeout: .seconds(3)) { _ in false }
        #expect(healthy.count { $0 == "WATCHDOG=1" } >= 3, "\(healthy)")
        #expect(!healthy.contains { $0.contains("trigger") })

        _ = FileManager.default.createFile(atPath: wedge, contents: nil)
        let messages = try await Self.datagrams(fixture, timeout: .seconds(10)) { $0.contains("WATCHDOG=trigger") }
        let trigger = try #require(messages.last { $0.contains("WATCHDOG=trigger") }, "\(messages)")
        #expect(trigger.contains("STATUS=wedged: work loop"), "\(trigger)")
        #expect(!FileManager.default.fileExists(atPath: wedge))
        // No ping after the trigger.
        let after = try await Self.datagrams(fixture, timeout: .seconds(1)) { _ in false }
        #expect(!after.contains("WATCHDOG=1"), "\(after)")
        try await fixture.kill9()
    }

    @Test("stop: STOPPING=1 first, EXTEND_TIMEOUT_USEC while draining, exit 0")
    func stop() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let daemon = try #require(fixture.daemon)
        kill(daemon.processIdentifier, SIGTERM)
        let messages = try await Self.datagrams(fixture) { $0.hasPrefix("EXTEND_TIMEOUT_USEC=") }
        let stopping = try #require(messages.firstIndex { $0.hasPrefix("STOPPING=1\n") }, "\(messages)")
        let extend = try #require(messages.firstIndex { $0.hasPrefix("EXTEND_TIMEOUT_USEC=") }, "\(messages)")
        #expect(stopping < extend)
        #expect(try await fixture.stop() == 0)
    }

    /// The fixture with `klarna.request_timeout_seconds` set to `seconds` (the drain follows it: + 5 s).
    static func fixture(requestTimeout seconds: Int) async throws -> DaemonFixture {
        let fixture = try await DaemonFixture()
        let config = try String(contentsOfFile: fixture.configPath, encoding: .utf8)
        try config.replacingOccurrences(of: "request_timeout_seconds: 2", with: "request_timeout_seconds: \(seconds)")
            .write(toFile: fixture.configPath, atomically: true, encoding: .utf8)
        return fixture
    }

    @Test("stop with a Klarna call hanging: the call ends at its request timeout, inside the drain, and the daemon exits")
    func boundedDrain() async throws {
        let fixture = try await Self.fixture(requestTimeout: 3)
        fixture.sandbox.addFault(SandboxFault(route: "om.create_capture", kind: .delay, delayMs: 15_000))
        try await fixture.start()
        let payment = try fixture.sandbox.createSession(
            SessionSpec(placeOrderMode: "PLACE_ORDER", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        #expect(try await fixture.cli(["track", payment.hppSessionId, "--kp-session", payment.kpSessionId, "--mode", "PLACE_ORDER"]).status == 0)
        try await waitUntil(timeout: .seconds(20)) { !fixture.sandbox.requests(route: "om.create_capture").isEmpty }

        let daemon = try #require(fixture.daemon)
        let stopped = ContinuousClock.now
        kill(daemon.processIdentifier, SIGTERM)
        try await waitUntil(timeout: .seconds(15)) { !daemon.isRunning }
        let took = ContinuousClock.now - stopped
        // Not the 15 s the capture would take: its 3 s request timeout ends it, well inside the 8 s drain. The capture
        // is `ambiguous` (Klarna deduplicates it), and the next start reads the order before anything else.
        #expect(took < .seconds(8), "stop took \(took)")
        let messages = try await Self.datagrams(fixture, timeout: .seconds(1)) { _ in false }
        #expect(messages.first?.hasPrefix("STOPPING=1") == true, "\(messages)")
        #expect(messages.contains { $0.hasPrefix("EXTEND_TIMEOUT_USEC=") })
        #expect(daemon.terminationStatus == 0, "\(fixture.daemonLog.suffix(600))")
    }

    @Test(
        "stop while a create-order is on its way: the drain waits for Klarna's answer, never cancels it; the order is recorded before the daemon exits"
    )
    func stopWaitsForCreateOrder() async throws {
        let fixture = try await Self.fixture(requestTimeout: 10)
        // Klarna places the order at once and answers 4 s later.
        fixture.sandbox.addFault(SandboxFault(route: "kp.create_order", kind: .holdAnswer, holdSeconds: 4, count: 1))
        try await fixture.start()
        let payment = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 4_200, placeOrderMode: "NONE", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        #expect(try await fixture.cli(["track", payment.hppSessionId, "--kp-session", payment.kpSessionId, "--mode", "NONE"]).status == 0)
        try await waitUntil(timeout: .seconds(20)) { !fixture.sandbox.requests(route: "kp.create_order").isEmpty }

        let daemon = try #require(fixture.daemon)
        kill(daemon.processIdentifier, SIGTERM)
        try await waitUntil(timeout: .seconds(20)) { !daemon.isRunning }
        #expect(daemon.terminationStatus == 0, "\(fixture.daemonLog.suffix(600))")
        let answered = try #require(fixture.sandbox.requests(route: "kp.create_order").first)
        #expect(answered.status == 200, "the create-order was answered, not cut off: \(answered)")

        let store = try fixture.readStore()
        let intent = try #require(try await store.intents(subject: payment.hppSessionId).first { $0.kind == .placeOrder })
        #expect(intent.state == .confirmed, "\(intent.state): \(intent.lastError ?? "")")
        let placed = try #require(fixture.sandbox.effects(kind: .orderPlaced).first)
        #expect(intent.result == placed.orderId)
        #expect(try await store.session(payment.hppSessionId)?.orderID == placed.orderId)
        #expect(fixture.sandbox.createOrderCounts().map(\.received) == [1])
    }

    @Test("a failing start says why in STATUS= with ERRNO=, then exits")
    func failingStart() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        // A second daemon on the same store cannot take the lock.
        let notify = try NotifySocket(path: fixture.directory + "/notify-second")
        let second = ChildProcess()
        second.executableURL = DaemonFixture.executable
        second.arguments = ["run", "--config", fixture.configPath]
        second.environment = ProcessInfo.processInfo.environment.merging(["NOTIFY_SOCKET": notify.path]) { $1 }
        second.standardError = FileHandle.nullDevice
        try second.run()
        let message = try await notify.receive(timeout: .seconds(20))
        #expect(message?.hasPrefix("STATUS=cannot start: another klarna-reconciler daemon") == true, "\(message ?? "nothing")")
        #expect(message?.hasSuffix("\nERRNO=\(EBUSY)") == true, "\(message ?? "nothing")")
        try await waitUntil(timeout: .seconds(10)) { !second.isRunning }
        #expect(second.terminationStatus == 1)
        #expect(try await fixture.stop() == 0)
    }
}
