import Synchronization

/// A loop's proof of life for the watchdog: the loop calls ``beat()`` each time round (and wakes at least every
/// ``interval`` to do so); the watchdog pings systemd only while every heartbeat is recent. Monotonic time, so a
/// wall-clock jump neither hides a wedge nor fakes one.
public final class Heartbeat: Sendable {
    public let name: String
    /// The longest a healthy loop may sleep between beats.
    public let interval: Duration
    private let last: Mutex<ContinuousClock.Instant>

    public init(name: String, interval: Duration) {
        self.name = name
        self.interval = interval
        last = Mutex(.now)
    }

    public func beat() { last.withLock { $0 = .now } }

    /// How long ago the loop last beat.
    public var age: Duration { .now - last.withLock { $0 } }
}

/// A value the running daemon replaces on reload while readers keep going: every read sees the old or the new value
/// whole, never a mix.
public final class Live<Value: Sendable>: Sendable {
    private let current: Mutex<Value>

    public init(_ value: Value) { current = Mutex(value) }

    public var value: Value { current.withLock { $0 } }

    public func replace(with value: Value) { current.withLock { $0 = value } }
}
