internal import CSystemd
import Foundation

/// The sd_notify protocol: tells the service manager about readiness and state. Without `$NOTIFY_SOCKET` (not
/// started by systemd) every call does nothing, so callers need no special case.
public struct SystemdNotifier: Sendable {
    public init() {}

    /// Sends newline-separated `KEY=VALUE` assignments, in the order given, in one datagram.
    /// - Returns: `false` when a manager is listening but the message could not be sent.
    @discardableResult
    public func notify(_ assignments: KeyValuePairs<String, String>) -> Bool {
        let message = assignments.map { "\($0.key)=\(Self.oneLine($0.value))" }.joined(separator: "\n")
        return sd_notify(0, message) >= 0
    }

    /// Start-up (or a reload) is complete.
    @discardableResult
    public func ready(status: String) -> Bool { notify(["READY": "1", "STATUS": status]) }

    @discardableResult
    public func status(_ status: String) -> Bool { notify(["STATUS": status]) }

    /// A reload began. systemd wants the monotonic time in the same datagram (systemd.service(5), v253+; older
    /// managers ignore the field); `READY=1` must follow.
    @discardableResult
    public func reloading(status: String) -> Bool {
        notify(["RELOADING": "1", "MONOTONIC_USEC": "\(Self.monotonicMicroseconds())", "STATUS": status])
    }

    /// Shutdown has begun; send it before draining, not after.
    @discardableResult
    public func stopping(status: String) -> Bool { notify(["STOPPING": "1", "STATUS": status]) }

    /// Asks for more time before the stop (or start) timeout fires; repeat before it runs out.
    @discardableResult
    public func extendTimeout(by duration: Duration, status: String) -> Bool {
        notify(["EXTEND_TIMEOUT_USEC": "\(duration.microseconds)", "STATUS": status])
    }

    /// The reason for a failing exit, just before it (`systemctl status` shows both).
    @discardableResult
    public func failing(status: String, errno code: Int32) -> Bool {
        notify(["STATUS": status, "ERRNO": "\(code)"])
    }

    @discardableResult
    public func watchdogPing() -> Bool { notify(["WATCHDOG": "1"]) }

    /// Fires the unit's watchdog action now: the daemon found itself wedged.
    @discardableResult
    public func watchdogTrigger(status: String) -> Bool { notify(["STATUS": status, "WATCHDOG": "trigger"]) }

    /// `WatchdogSec=` as passed in `$WATCHDOG_USEC`, if it is meant for this process (`$WATCHDOG_PID`).
    public static func watchdogInterval() -> Duration? {
        var microseconds: UInt64 = 0
        guard sd_watchdog_enabled(0, &microseconds) > 0, microseconds > 0 else { return nil }
        return .microseconds(Int64(microseconds))
    }

    /// A `STATUS=` value is one line: newlines would start new assignments.
    static func oneLine(_ value: String) -> String {
        String(value.map { $0 == "\n" || $0 == "\r" ? " " : $0 })
    }

    static func monotonicMicroseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1_000
    }
}

extension Duration {
    var microseconds: Int64 {
        components.seconds * 1_000_000 + components.attoseconds / 1_000_000_000_000
    }
}
