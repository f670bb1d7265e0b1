import Foundation
import Glibc
import Logging
import Synchronization
import Testing
import TestSupport

@testable import Engine
@testable import Ingest
@testable import ReconcilerCore
import ReconcilerStore
@testable import SQLiteBackend

/// A real filesystem filled to the last byte (a tmpfs of its own, as root): the store, the reserve, the disk watch and
/// the spool on it.
@Suite("A full disk", .enabled(if: SmallDisk.canMount, "mounting a small filesystem needs root (CI and the development machines run as root)"))
struct DiskFullTests {
    static let mib: Int64 = 1 << 20

    @Test(
        "A write on a disk filled to the last byte is recorded with the reserve's space; without it, the error names the file and the free space; with space back, writes go on"
    )
    func reserveRecordsTheWrite() async throws {
        try await SmallDisk.with(megabytes: 16) { disk in
            let reserve = ReserveFile(path: disk.path + "/state.sqlite.reserve", bytes: 2 * Self.mib)
            try reserve.make()
            #expect(reserve.isHeld)
            let store = try SQLiteStore(path: disk.path + "/state.sqlite", reserve: reserve)
            _ = try await store.track(Fixtures.session("before"), event: DomainEvent(.tracked, "test"), at: Fixtures.t0)
            try disk.fill()
            #expect(disk.freeBytes < 4_096)
            // Enough rows that the write needs new pages of the WAL.
            for index in 0..<40 {
                _ = try await store.track(Fixtures.session("during-\(index)"), event: DomainEvent(.tracked, "test"), at: Fixtures.t0)
            }
            #expect(!reserve.isHeld, "the reserve was given back for the writes")
            #expect(try await store.session("during-39") != nil)
            try disk.fill()
            var refused: SQLiteError?
            for index in 0..<400 where refused == nil {
                do {
                    _ = try await store.track(Fixtures.session("after-\(index)"), event: DomainEvent(.tracked, "test"), at: Fixtures.t0)
                } catch let error as SQLiteError {
                    refused = error
                }
            }
            let error = try #require(refused, "a disk with no reserve left refuses a write")
            #expect(error.isDiskFull)
            #expect("\(error)".contains("on \(disk.path)/state.sqlite"))
            #expect("\(error)".contains("free in \(disk.path)"))
            try await disk.free()
            _ = try await store.track(Fixtures.session("space-back"), event: DomainEvent(.tracked, "test"), at: Fixtures.t0)
            #expect(try await store.session("space-back") != nil)
        }
    }

    @Test(
        "The disk watch: full below the watermark (the journal says which directory and how much is free), the reserve's debt counted, lifted with space back and the reserve made again"
    )
    func watch() async throws {
        try await SmallDisk.with(megabytes: 16) { disk in
            let logs = LogLines()
            let reserve = ReserveFile(path: disk.path + "/state.sqlite.reserve", bytes: 2 * Self.mib)
            try reserve.make()
            let guarding = DiskGuard(watermark: DiskWatermark(minFreeBytes: 2 * Self.mib))
            let changes = Mutex<[DiskPressure?]>([])
            let watch = DiskWatch(
                guarding: guarding, directories: [(.store, disk.path)], reserve: reserve, logger: logs.logger()
            ) { pressure in changes.withLock { $0.append(pressure) } }
            watch.check()
            #expect(guarding.pressure == nil)
            try disk.fill(leaving: Self.mib)
            watch.check()
            let pressure = try #require(guarding.pressure)
            #expect(pressure.full.map(\.role) == [.store])
            #expect(guarding.refusal?.error == "disk_full")
            #expect(logs.all.contains { $0.contains("disk full: the store directory \(disk.path) has") && $0.contains("503 disk_full") })
            // A commit gave the reserve back: 3 MiB free, but 2 MiB of it owed, so still full.
            reserve.release()
            watch.check()
            #expect(guarding.pressure?.full.first?.availableBytes ?? .max < 2 * Self.mib)
            #expect(!reserve.isHeld)
            try await disk.free()
            watch.check()
            #expect(guarding.pressure == nil)
            #expect(reserve.isHeld, "made again once space returned")
            #expect(logs.all.contains { $0.contains("disk space is back") })
            #expect(changes.withLock { $0.map { $0 == nil } } == [false, true])
        }
    }

    @Test("Under disk pressure a delivery is refused 503 disk_full naming the directory, nothing is written, and spool files stay in new/")
    func ingestRefused() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let spool = Spool(directory: directory.path + "/spool", maxFileBytes: 4_096, keepDone: false)
        try spool.prepare()
        let store = try SQLiteStore(path: directory.path + "/state.sqlite")
        let guarding = DiskGuard(watermark: DiskWatermark(minFreeBytes: 64 * Self.mib))
        guarding.update([DiskReading(role: .spool, path: spool.directory, freeBytes: Self.mib, totalBytes: 100 * Self.mib)])
        let reader = WebhookReader(tokens: nil, policy: .require, signingKeys: SigningKeys([:]))
        let ingestor = Ingestor(
            reader: reader, store: store, defaultCapturePolicy: .immediate, clock: SystemClock(), logger: Logger(label: "t"), disk: guarding
        ) { _, _ in }
        let track = Delivery(route: .track, query: [:], headers: [], body: Array(#"{"hpp_session_id":"h-1","kp_session_id":"k-1"}"#.utf8))
        let answer = await ingestor.ingest(track, source: "socket")
        #expect(answer.status == 503)
        #expect(answer.word == "disk_full")
        #expect(answer.detail.contains("the spool directory \(spool.directory) has 1.0 MiB free"))
        #expect(try await store.session("h-1") == nil)
        #expect(try await store.summary(now: Date()).rejectionsLastDay == 0, "nothing written while the disk is full")

        try #"{"hpp_session_id":"h-2","kp_session_id":"k-2"}"#.write(toFile: spool.directory + "/tmp/a.json", atomically: false, encoding: .utf8)
        rename(spool.directory + "/tmp/a.json", spool.directory + "/new/a.json")
        let service = SpoolService(spool: spool, ingestor: ingestor, rescanInterval: .seconds(60), clock: SystemClock(), logger: Logger(label: "t"))
        await service.scan(includingClaimed: true)
        #expect(spool.names(in: "new") == ["a.json"], "left where it was")
        #expect(spool.names(in: "quarantine").isEmpty)
        guarding.update([DiskReading(role: .spool, path: spool.directory, freeBytes: 100 * Self.mib, totalBytes: 100 * Self.mib)])
        await service.scan(includingClaimed: true)
        #expect(spool.names(in: "new").isEmpty)
        #expect(try await store.session("h-2") != nil)
        #expect(await ingestor.ingest(track, source: "socket").accepted)
    }
}
