import Foundation
import Testing

@testable import ReconcilerCore

@Suite("Disk pressure: the watermark, its hysteresis, the reserve's debt, and what ready says")
struct DiskSpaceTests {
    static let mib: Int64 = 1 << 20
    let watermark = DiskWatermark(minFreeBytes: 64 * Self.mib)

    func reading(_ role: DiskRole = .store, free: Int64, owed: Int64 = 0) -> DiskReading {
        DiskReading(role: role, path: "/var/lib/\(role.rawValue)", freeBytes: free, totalBytes: 10_240 * Self.mib, owedBytes: owed)
    }

    @Test("Below the watermark is full; it lifts only a quarter above it, so a disk at the line does not flip")
    func hysteresis() {
        #expect(watermark.liftBytes == 80 * Self.mib)
        #expect(!watermark.isFull(reading(free: 64 * Self.mib), wasFull: false))
        #expect(watermark.isFull(reading(free: 64 * Self.mib - 1), wasFull: false))
        #expect(watermark.isFull(reading(free: 70 * Self.mib), wasFull: true))
        #expect(!watermark.isFull(reading(free: 80 * Self.mib), wasFull: true))
        // A small watermark still lifts at least 1 MiB above it.
        #expect(DiskWatermark(minFreeBytes: 2 * Self.mib).liftBytes == 3 * Self.mib)
        // 0 turns it off: nothing is ever full.
        #expect(DiskWatermark(minFreeBytes: 0).pressure([reading(free: 0)], before: nil) == nil)
    }

    @Test("Pressure names every full directory and follows each one's own history")
    func pressure() throws {
        let first = try #require(watermark.pressure([reading(.store, free: 10 * Self.mib), reading(.spool, free: 70 * Self.mib)], before: nil))
        #expect(first.full.map(\.role) == [.store])
        // The spool at 70 MiB was never full: not full now; the store at 70 MiB was: still full.
        let second = try #require(watermark.pressure([reading(.store, free: 70 * Self.mib), reading(.spool, free: 70 * Self.mib)], before: first))
        #expect(second.full.map(\.role) == [.store])
        #expect(watermark.pressure([reading(.store, free: 90 * Self.mib), reading(.spool, free: 70 * Self.mib)], before: second) == nil)
    }

    @Test("The reserve given back counts as taken: releasing it never lifts the pressure, and it is made again only when that keeps it lifted")
    func reserveDebt() {
        let released = reading(free: 100 * Self.mib, owed: 96 * Self.mib)
        #expect(released.availableBytes == 4 * Self.mib)
        #expect(watermark.isFull(released, wasFull: true))
        #expect(!watermark.mayRemakeReserve(released))
        #expect(watermark.mayRemakeReserve(reading(free: 180 * Self.mib, owed: 96 * Self.mib)))
        #expect(DiskReading(role: .store, path: "/", freeBytes: 1, totalBytes: 1, owedBytes: 5).availableBytes == 0)
    }

    @Test("What an operator reads: the directory, its free space, the reserve, the setting")
    func summary() throws {
        let pressure = try #require(watermark.pressure([reading(.outbox, free: 1_536 * 1_024, owed: 0)], before: nil))
        #expect(pressure.summary == "disk full: the outbox directory /var/lib/outbox has 1.5 MiB free (disk.min_free_mb 64.0 MiB)")
        let owed = try #require(watermark.pressure([reading(.store, free: 100 * Self.mib, owed: 96 * Self.mib)], before: nil))
        #expect(owed.summary.contains("has 4.0 MiB free (100.0 MiB with the reserve given back)"))
        #expect(ByteCount(0).description == "0 B")
        #expect(ByteCount(1_023).description == "1023 B")
        #expect(ByteCount(3 << 30).description == "3.0 GiB")
    }

    @Test("The reserve's default: 1 % of the filesystem, at most 1 GiB")
    func reserveSize() {
        #expect(DiskReserveSize.automatic(totalBytes: 24 * Self.mib) == 24 * Self.mib / 100)
        #expect(DiskReserveSize.automatic(totalBytes: 1 << 40) == 1 << 30)
    }

    @Test("/v1/ready under disk pressure: 503 disk_full naming the directory, before any other reason, not while draining")
    func readiness() throws {
        let readiness = Readiness(storeStaleAfter: .seconds(5))
        readiness.started()
        readiness.storeAnswered()
        #expect(readiness.report().ready)
        let pressure = try #require(watermark.pressure([reading(.spool, free: 0)], before: nil))
        readiness.disk(pressure)
        readiness.storeFailed("SQLite error 13")
        var report = readiness.report()
        #expect(!report.ready)
        #expect(report.error == "disk_full")
        #expect(report.disk == pressure.summary)
        #expect(report.reason == pressure.summary)
        readiness.disk(nil)
        report = readiness.report()
        #expect(report.error == "store_unavailable")
        #expect(report.disk == "ok")
        readiness.storeAnswered()
        #expect(readiness.report().ready)
        #expect(readiness.report().error == nil)
    }

    @Test("A start waiting for its store to load the open work says so in /v1/ready, also once the daemon is up")
    func startWaiting() {
        let readiness = Readiness(storeStaleAfter: .seconds(5))
        readiness.waitingForStore("SQLite error 13: database or disk is full")
        readiness.started()
        readiness.storeAnswered()
        let report = readiness.report()
        #expect(!report.ready)
        #expect(report.error == "store_unavailable")
        #expect(report.reason == "waiting for the store to load the open work: SQLite error 13: database or disk is full")
        readiness.waitingForStore(nil)
        #expect(readiness.report().ready)
    }
}
