import Logging
import ReconcilerCore
import ServiceLifecycle

/// The daemon's retention loop: a ``Pruner`` pass every `interval`, the first one `interval` after the start.
public struct RetentionService: Service {
    let pruner: Pruner
    let interval: Duration
    let logger: Logger

    public init(pruner: Pruner, interval: Duration, logger: Logger) {
        self.pruner = pruner
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    try await pruner.clock.sleep(for: interval)
                    let pruned = try await pruner.run(dryRun: false)
                    if !pruned.isEmpty { logger.notice("retention: pruned \(pruned)") }
                } catch is CancellationError {
                    return
                } catch {
                    logger.error("retention: pruning failed (\(error)); trying again in \(interval)")
                }
            }
        }
    }
}
