import Foundation
import Logging
import Metrics
import ReconcilerCore
import ReconcilerStore
import ServiceLifecycle

/// Reads the free space of every directory the daemon writes (store, spool, outbox) every `interval`, keeps the
/// ``DiskGuard`` current, makes the reserve again once space has come back, and says when the disk fills and when
/// it has room again (the journal, `STATUS=` and `/v1/ready` through `onChange`, and the disk gauges).
public struct DiskWatch: Service {
    public let guarding: DiskGuard
    public let directories: [(role: DiskRole, path: String)]
    /// The store's reserve, when it keeps one.
    public let reserve: ReserveFile?
    public let interval: Duration
    let logger: Logger
    /// Told of every change of the pressure (`nil`: room again).
    let onChange: @Sendable (DiskPressure?) -> Void
    /// Whether the last try to make the reserve failed (said once, not every second).
    private let reserveFailing = Live(false)

    public init(
        guarding: DiskGuard, directories: [(role: DiskRole, path: String)], reserve: ReserveFile?, interval: Duration = .seconds(1),
        logger: Logger, onChange: @escaping @Sendable (DiskPressure?) -> Void
    ) {
        self.guarding = guarding
        self.directories = directories
        self.reserve = reserve
        self.interval = interval
        self.logger = logger
        self.onChange = onChange
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                check()
                try? await Task.sleep(for: interval)
            }
        }
    }

    /// One look at every directory: the reserve made again when it may be, the guard told, a change said.
    public func check() {
        var readings = read()
        if let reserve, reserve.owedBytes > 0, let store = readings.first(where: { $0.role == .store }),
            guarding.watermark.mayRemakeReserve(store)
        {
            do {
                try reserve.make()
                reserveFailing.replace(with: false)
                logger.notice("the store's reserve of \(ByteCount(reserve.bytes)) is made again at \(reserve.path)")
                readings = read()
            } catch {
                // Once until it is made: the watch tries every second.
                if !reserveFailing.value { logger.warning("\(error); trying again every \(interval) while space lasts") }
                reserveFailing.replace(with: true)
            }
        }
        for reading in readings {
            Gauge(label: MetricName.diskFreeBytes.rawValue, dimensions: [("directory", reading.role.rawValue)]).record(reading.availableBytes)
        }
        let (before, after) = guarding.update(readings)
        Gauge(label: MetricName.diskFull.rawValue).record(after == nil ? 0 : 1)
        guard before?.full.map(\.path) != after?.full.map(\.path) else { return }
        if let after {
            logger.critical(
                "\(after.summary): deliveries, requests and new side effects are refused (503 disk_full) until space returns; the answers of calls under way are still recorded",
                metadata: [MessageID.metadataKey: .string(MessageID.diskFull.rawValue)])
        } else {
            logger.notice(
                "disk space is back (\(readings.map { "\($0.role.rawValue) \(ByteCount($0.availableBytes)) free" }.joined(separator: ", "))): taking deliveries and sending side effects again",
                metadata: [MessageID.metadataKey: .string(MessageID.diskSpaceBack.rawValue)])
        }
        onChange(after)
    }

    private func read() -> [DiskReading] { Self.measure(directories, reserve: reserve) }

    /// Each directory's space now; the reserve's debt counts on every directory of the reserve's filesystem. A
    /// directory whose space cannot be read (it is gone) is left out.
    public static func measure(_ directories: [(role: DiskRole, path: String)], reserve: ReserveFile?) -> [DiskReading] {
        let owed = reserve?.owedBytes ?? 0
        let reserveFileSystem = reserve.flatMap { freeSpace(at: ($0.path as NSString).deletingLastPathComponent)?.id }
        return directories.compactMap { directory in
            freeSpace(at: directory.path).map { space in
                DiskReading(
                    role: directory.role, path: directory.path, freeBytes: space.free, totalBytes: space.total,
                    owedBytes: space.id == reserveFileSystem ? owed : 0)
            }
        }
    }
}
