/// A directory the daemon writes, named by what it holds.
public enum DiskRole: String, Sendable, CaseIterable {
    case store, spool, outbox
}

/// What one directory's filesystem has free for the daemon (statvfs's `f_bavail`: what a process without root may
/// use), and what the daemon owes its reserve there.
public struct DiskReading: Sendable, Equatable {
    public var role: DiskRole
    public var path: String
    public var freeBytes: Int64
    public var totalBytes: Int64
    /// Space the reserve file gave back and wants again (``DiskWatermark``): counted as taken, so that releasing the
    /// reserve never lifts the watermark by itself.
    public var owedBytes: Int64

    public init(role: DiskRole, path: String, freeBytes: Int64, totalBytes: Int64, owedBytes: Int64 = 0) {
        self.role = role
        self.path = path
        self.freeBytes = freeBytes
        self.totalBytes = totalBytes
        self.owedBytes = owedBytes
    }

    /// What the watermark judges: the free space less what the reserve is owed.
    public var availableBytes: Int64 { max(0, freeBytes - owedBytes) }
}

/// The free-space watermark (`disk.min_free_mb`). Below it the daemon takes nothing new (no delivery, track,
/// capture, refund or operator request, no new side effect) and goes on recording the answers of what is in flight;
/// the directory counts as full until its space reaches ``liftBytes`` (hysteresis, so a disk hovering at the line
/// does not flip the daemon every second).
public struct DiskWatermark: Sendable, Equatable {
    public var minFreeBytes: Int64

    public init(minFreeBytes: Int64) {
        self.minFreeBytes = max(0, minFreeBytes)
    }

    /// Where a full directory counts as free again: a quarter above the watermark, at least 1 MiB above it.
    public var liftBytes: Int64 { minFreeBytes + max(minFreeBytes / 4, 1 << 20) }

    /// Whether `reading` is below the watermark, given whether its directory was before.
    public func isFull(_ reading: DiskReading, wasFull: Bool) -> Bool {
        reading.availableBytes < (wasFull ? liftBytes : minFreeBytes)
    }

    /// The pressure `readings` put the daemon under, given the pressure before; `nil` when every directory has room.
    public func pressure(_ readings: [DiskReading], before: DiskPressure?) -> DiskPressure? {
        let wasFull = Set(before?.full.map(\.path) ?? [])
        let full = readings.filter { isFull($0, wasFull: wasFull.contains($0.path)) }
        return full.isEmpty ? nil : DiskPressure(full: full, watermark: self)
    }

    /// Whether the reserve may be made again in a directory: only once the watermark would stay lifted with it made.
    public func mayRemakeReserve(_ reading: DiskReading) -> Bool { reading.availableBytes >= liftBytes }
}

/// The directories below the watermark, and what the daemon says of them.
public struct DiskPressure: Sendable, Equatable {
    public var full: [DiskReading]
    public var watermark: DiskWatermark

    /// The error word of every refusal the pressure causes (`503 disk_full`).
    public static let errorWord = "disk_full"

    /// One line for the refusal's detail, `/v1/ready`, `STATUS=` and the journal: which directory, how much is free.
    public var summary: String {
        let each = full.map { reading in
            "the \(reading.role.rawValue) directory \(reading.path) has \(ByteCount(reading.availableBytes)) free"
                + (reading.owedBytes > 0 ? " (\(ByteCount(reading.freeBytes)) with the reserve given back)" : "")
        }
        return "disk full: \(each.joined(separator: "; ")) (disk.min_free_mb \(ByteCount(watermark.minFreeBytes)))"
    }
}

/// The reserve file's size when `disk.reserve_mb` is not set: 1 % of the store's filesystem, at most 1 GiB.
public enum DiskReserveSize {
    public static let ceiling: Int64 = 1 << 30

    public static func automatic(totalBytes: Int64) -> Int64 { min(max(0, totalBytes / 100), ceiling) }
}

/// A size for a person: bytes below 1 KiB, else KiB, MiB or GiB with one decimal.
public struct ByteCount: Sendable, Equatable, CustomStringConvertible {
    public let bytes: Int64

    public init(_ bytes: Int64) { self.bytes = bytes }

    public var description: String {
        let units = ["KiB", "MiB", "GiB", "TiB"]
        guard bytes >= 1_024 else { return "\(bytes) B" }
        var value = Double(bytes) / 1_024
        var unit = 0
        while value >= 1_024, unit < units.count - 1 {
            value /= 1_024
            unit += 1
        }
        let tenths = Int((value * 10).rounded())
        return "\(tenths / 10).\(tenths % 10) \(units[unit])"
    }
}
