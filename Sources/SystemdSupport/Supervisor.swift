import Logging
import ReconcilerCore
import ServiceLifecycle

/// Keeps systemd informed while the daemon runs: `WATCHDOG=1` every half `WatchdogSec=`, but only while every loop
/// shows recent progress; `WATCHDOG=trigger` the moment one does not; `STATUS=` refreshed every few seconds; and,
/// once a stop begins, `EXTEND_TIMEOUT_USEC=` while the drain lasts. Start it first in the service group so it
/// stops last.
public struct Supervisor: Service {
    /// Something to check from here rather than beat from inside: the store answers a query, an event loop runs a
    /// task. Its heartbeat beats each time `check` returns.
    public struct Probe: Sendable {
        public let heartbeat: Heartbeat
        public let check: @Sendable () async -> Void

        public init(heartbeat: Heartbeat, check: @escaping @Sendable () async -> Void) {
            self.heartbeat = heartbeat
            self.check = check
        }
    }

    let notifier: SystemdNotifier
    /// `WatchdogSec=`; `nil` without a watchdog (no pings, no checks).
    let watchdog: Duration?
    let heartbeats: [Heartbeat]
    let probes: [Probe]
    let statusInterval: Duration
    let status: @Sendable () async -> String
    let logger: Logger
    private let drain = Live<ContinuousClock.Instant?>(nil)
    private let drainLimit: Duration
    /// How often the supervisor looks: half the watchdog interval, at most the status interval.
    private let tick: Duration

    public init(
        notifier: SystemdNotifier, watchdog: Duration?, heartbeats: [Heartbeat], probes: [Probe], statusInterval: Duration,
        drainLimit: Duration, logger: Logger, status: @escaping @Sendable () async -> String
    ) {
        self.notifier = notifier
        self.watchdog = watchdog
        self.heartbeats = heartbeats
        self.probes = probes
        self.statusInterval = statusInterval
        self.drainLimit = drainLimit
        tick = min(statusInterval, watchdog.map { $0 / 2 } ?? statusInterval)
        self.logger = logger
        self.status = status
    }

    /// The heartbeat interval loops should use: a quarter of `WatchdogSec=`, so a healthy loop beats several times
    /// between two pings.
    public static func heartbeatInterval(watchdog: Duration?) -> Duration {
        watchdog.map { max(.milliseconds(50), $0 / 4) } ?? .seconds(5)
    }

    /// The stop has begun: keep the watchdog fed whatever the loops do now, and ask for time while draining.
    public func draining() {
        guard drain.value == nil else { return }
        drain.replace(with: .now)
        extendStop(left: drainLimit)
    }

    /// Asks systemd for the rest of the drain plus a margin; repeated every tick, so a stop that takes longer than
    /// TimeoutStopSec= but stays within the drain limit is not killed.
    private func extendStop(left: Duration) {
        notifier.extendTimeout(by: left + tick * 3, status: "stopping: finishing the steps under way")
    }

    public func run() async throws {
        let quiet = Live(false)  // after a trigger or once draining, STATUS= says so and nothing overwrites it
        await withDiscardingTaskGroup { group in
            for probe in probes {
                group.addTask {
                    while !Task.isCancelled {
                        await probe.check()
                        probe.heartbeat.beat()
                        try? await Task.sleep(for: probe.heartbeat.interval)
                    }
                }
            }
            // Its own task: a status that waits on a slow store must not hold up the watchdog.
            group.addTask {
                // READY=1 carries the first status; updates follow it.
                while !Task.isCancelled {
                    try? await Task.sleep(for: statusInterval)
                    let text = await status()
                    if !quiet.value && drain.value == nil { notifier.status(text) }
                }
            }
            await cancelWhenGracefulShutdown {
                while !Task.isCancelled {
                    if let started = drain.value {
                        // Only within the drain limit: a stop that hangs past it must meet systemd's timeout.
                        let left = drainLimit - (.now - started)
                        if left > .zero {
                            extendStop(left: left)
                            if watchdog != nil { notifier.watchdogPing() }
                        }
                    } else if let watchdog, !quiet.value {
                        let stalled = (heartbeats + probes.map(\.heartbeat)).filter { $0.age > watchdog }
                        if stalled.isEmpty {
                            notifier.watchdogPing()
                        } else {
                            quiet.replace(with: true)
                            let names = stalled.map { "\($0.name) (no progress for \(Self.seconds($0.age)))" }.joined(separator: ", ")
                            logger.critical(
                                "wedged: \(names); asking systemd to restart the daemon",
                                metadata: [MessageID.metadataKey: .string(MessageID.stalled.rawValue)])
                            notifier.watchdogTrigger(status: "wedged: \(names)")
                        }
                    }
                    try? await Task.sleep(for: tick)
                }
            }
            group.cancelAll()
        }
    }

    static func seconds(_ duration: Duration) -> String {
        let value = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        return value < 10 ? "\((value * 10).rounded() / 10) s" : "\(Int(value)) s"
    }
}
