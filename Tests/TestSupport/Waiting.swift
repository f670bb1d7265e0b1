import Foundation
import Synchronization

/// Waits for a condition with a deadline: tests synchronise on what they can observe, never on a sleep alone. The
/// deadline only bounds a failure (a condition met returns at once): 30 s, because the whole suite runs in parallel on
/// CI's two cores, where what a condition waits for may get no CPU for seconds (10 s was once not enough for an idle
/// worker service under the full suite).
/// The condition is checked again after 1 ms, then ever less often, up to every 25 ms: dozens of tests wait at once,
/// and checking each of them every 2 ms (reading a store, listing a directory) took the CPU the awaited work needed,
/// until waits on the daemon processes ran out under the full suite.
public func waitUntil(timeout: Duration = .seconds(30), _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout * waitSlack
    var pause = Duration.milliseconds(1)
    while try await !condition() {
        if ContinuousClock.now > deadline { throw WaitTimeout() }
        try await Task.sleep(for: pause)
        pause = min(pause * 2, .milliseconds(25))
    }
}

public struct WaitTimeout: Error {}

/// Every wait's deadline is this many times the one a test names. The names are what the awaited work needs on a
/// loaded machine; the first half minute of a full run, when every suite starts its daemons, sandboxes and PostgreSQL
/// databases at once on CI's two cores, stalled whole test processes for 35 s (engine tests that take under a second
/// alone took 37 s), so that waits of 30 s ran out with nothing wrong; as the suite grew, one such stall passed 60 s
/// (an ingest test whose steps take 2 s alone). A met condition returns at once: the slack only makes a real failure
/// take longer to report.
public let waitSlack = 3

/// A flag one task sets and another waits on.
public final class Flag: Sendable {
    private let value = Mutex(false)
    public init() {}
    public var isSet: Bool { value.withLock { $0 } }
    public func set() { value.withLock { $0 = true } }
}

/// A count one task raises and another waits on.
public final class Counter: Sendable {
    private let count = Mutex(0)
    public init() {}
    public var value: Int { count.withLock { $0 } }
    public func add() { count.withLock { $0 += 1 } }
}
