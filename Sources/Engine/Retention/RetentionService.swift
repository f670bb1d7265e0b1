import Logging
import ReconcilerCore
import ServiceLifecycle

/// The daemon's retention loop: a ``Pruner`` pass every `interval`, the first one `interval` after the start; between
/// passes, every `capInterval`, only the cap on refusals and notifications for unknown orders, so that a flood of
/// unauthenticated requests is cut back within that time rather than at the next pass.
public struct RetentionService: Service {
    let pruner: Pruner
    let interval: Duration
    let capInterval: Duration
    let logger: Logger

    public init(pruner: Pruner, interval: Duration, capInterval: Duration = .seconds(60), logger: Logger) {
        self.pruner = pruner
        self.interval = interval
        self.capInterval = capInterval
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            let clock = pruner.clock
            var nextPass = clock.now.addingTimeInterval(interval.timeInterval)
            while !Task.isCancelled {
                do {
                    let nextCap = clock.now.addingTimeInterval(capInterval.timeInterval)
                    try await clock.sleep(until: pruner.policy.unverifiedRowCap == nil ? nextPass : min(nextPass, nextCap))
                    if clock.now >= nextPass {
                        nextPass = clock.now.addingTimeInterval(interval.timeInterval)
                        let pruned = try await pruner.run(dryRun: false)
                        if !pruned.isEmpty { logger.notice("retention: pruned \(pruned)") }
                    } else {
                        let capped = try await pruner.enforceCap()
                        if !capped.isEmpty { logger.notice("retention: over retention.unverified_max_rows, pruned \(capped)") }
                    }
                } catch is CancellationError {
                    return
                } catch {
                    logger.error("retention: pruning failed (\(error)); trying again at the next pass")
                }
            }
        }
    }
}
