import ReconcilerCore
import Synchronization

/// Whether the daemon is under disk pressure, read from memory before every delivery, operator request and side
/// effect (``DiskWatch`` keeps it current). Under pressure the daemon takes nothing new and starts no side effect;
/// what is in flight goes on and its answers are recorded.
public final class DiskGuard: Sendable {

    public let watermark: DiskWatermark
    private let state = Mutex<DiskPressure?>(nil)

    public init(watermark: DiskWatermark) {
        self.watermark = watermark
    }

    /// The directories below the watermark now; `nil` while every directory has room.
    public var pressure: DiskPressure? { state.withLock { $0 } }

    /// Takes new readings and returns the pressure before and after them.
    @discardableResult
    public func update(_ readings: [DiskReading]) -> (before: DiskPressure?, after: DiskPressure?) {
        state.withLock { pressure in
            let before = pressure
            pressure = watermark.pressure(readings, before: before)
            return (before, pressure)
        }
    }

    /// What a request refused for the pressure is told (`503 disk_full`), or `nil` when there is room.
    public var refusal: (error: String, detail: String)? {
        pressure.map { (DiskPressure.errorWord, "\($0.summary): nothing new is taken until space returns; send it again") }
    }
}
