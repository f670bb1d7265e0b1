import Foundation
import ReconcilerCore
import Synchronization

/// Real time plus an offset that the control API can move forward, so a separate sandbox process can be told
/// "61 minutes have passed" without anyone waiting for them.
public final class AdjustableClock: WallClock {
    private let offset = Mutex<TimeInterval>(0)

    public init() {}

    public var now: Date { Date().addingTimeInterval(offset.withLock { $0 }) }

    public func advance(by duration: Duration) {
        offset.withLock { $0 += duration.timeInterval }
    }

    public func sleep(for duration: Duration) async throws {
        try await Task.sleep(for: duration)
    }
}
