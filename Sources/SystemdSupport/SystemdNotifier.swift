internal import CSystemd

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

    @discardableResult
    public func ready(status: String) -> Bool { notify(["READY": "1", "STATUS": status]) }

    /// Shutdown has begun; send it before draining, not after.
    @discardableResult
    public func stopping(status: String) -> Bool { notify(["STOPPING": "1", "STATUS": status]) }

    /// A `STATUS=` value is one line: newlines would start new assignments.
    static func oneLine(_ value: String) -> String {
        String(value.map { $0 == "\n" || $0 == "\r" ? " " : $0 })
    }
}
