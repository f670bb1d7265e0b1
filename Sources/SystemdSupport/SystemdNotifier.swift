internal import CSystemd
import Glibc

/// The sd_notify protocol: tells the service manager about readiness and state. Without `$NOTIFY_SOCKET` (not
/// started by systemd) every call does nothing, so callers need no special case.
public struct SystemdNotifier: Sendable {
    public init() {}

    /// `true` when a service manager is listening.
    public var isEnabled: Bool {
        guard let socket = getenv("NOTIFY_SOCKET") else { return false }
        return socket.pointee != 0
    }

    /// Sends newline-separated `KEY=VALUE` assignments in one datagram.
    /// - Returns: `false` when a manager is listening but the message could not be sent.
    @discardableResult
    public func notify(_ assignments: [String: String]) -> Bool {
        let message = assignments.sorted { $0.key < $1.key }.map { "\($0.key)=\(Self.oneLine($0.value))" }.joined(separator: "\n")
        return sd_notify(0, message) >= 0
    }

    @discardableResult
    public func ready(status: String) -> Bool { notify(["READY": "1", "STATUS": status]) }

    @discardableResult
    public func stopping(status: String) -> Bool { notify(["STOPPING": "1", "STATUS": status]) }

    /// A `STATUS=` value is one line: newlines would start new assignments.
    static func oneLine(_ value: String) -> String {
        String(value.map { $0 == "\n" || $0 == "\r" ? " " : $0 })
    }
}
