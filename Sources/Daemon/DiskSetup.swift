import Engine
import Foundation
import ReconcilerCore
import ReconcilerStore
import Settings

/// The directories the daemon writes and the store's reserve, as the configuration names them: what the disk watch
/// reads and what `status` shows.
public enum DiskSetup {
    /// The store's directory (a SQLite store's; a PostgreSQL server's disk is its own), the spool's and the outbox's.
    public static func directories(_ settings: Settings) -> [(role: DiskRole, path: String)] {
        var directories: [(role: DiskRole, path: String)] = []
        if settings.storeURL == nil { directories.append((.store, (settings.storePath as NSString).deletingLastPathComponent)) }
        if let spool = settings.spoolDirectory { directories.append((.spool, spool)) }
        directories.append((.outbox, settings.outboxDirectory))
        return directories
    }

    /// The reserve file beside a SQLite store (`disk.reserve_mb`, by default 1 % of its filesystem, at most 1 GiB);
    /// `nil` with PostgreSQL or a reserve of 0.
    public static func reserve(_ settings: Settings) -> ReserveFile? {
        guard settings.storeURL == nil else { return nil }
        let directory = (settings.storePath as NSString).deletingLastPathComponent
        let bytes = settings.diskReserveBytes ?? DiskReserveSize.automatic(totalBytes: freeSpace(at: directory)?.total ?? 0)
        guard bytes > 0 else { return nil }
        return ReserveFile(path: settings.storePath + ".reserve", bytes: bytes)
    }

    /// The pressure the directories are under now, as the daemon judges it (for a command run beside it).
    public static func pressure(_ settings: Settings) -> (readings: [DiskReading], pressure: DiskPressure?) {
        let readings = DiskWatch.measure(directories(settings), reserve: reserve(settings))
        return (readings, DiskWatermark(minFreeBytes: settings.diskMinFreeBytes).pressure(readings, before: nil))
    }
}
