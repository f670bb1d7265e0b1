import Foundation
import Glibc
import Logging
import ReconcilerCore
import ServiceLifecycle

/// Watches the spool: a scan at start (`cur/` first: files claimed before a crash), inotify on `new/` for low
/// latency, and a periodic rescan for anything inotify missed. Each file is claimed, read, ingested (the files a scan
/// finds, together), and removed only once its delivery is committed.
public struct SpoolService: Service {
    let spool: Spool
    let ingestor: Ingestor
    let rescanInterval: Duration
    let clock: any WallClock
    let logger: Logger
    /// Beaten every time round the loop, for the watchdog.
    public let heartbeat: Heartbeat?

    public init(spool: Spool, ingestor: Ingestor, rescanInterval: Duration, clock: any WallClock, logger: Logger, heartbeat: Heartbeat? = nil) {
        self.spool = spool
        self.ingestor = ingestor
        self.rescanInterval = rescanInterval
        self.clock = clock
        self.logger = logger
        self.heartbeat = heartbeat
    }

    public func run() async throws {
        let bell = Doorbell()
        let stopping = Live(false)
        let watcher = DirectoryWatcher(path: "\(spool.directory)/new", logger: logger) { bell.ring() }
        defer { watcher.stop() }
        await withGracefulShutdownHandler {
            var retryClaimedAt = clock.now
            while !stopping.value {
                heartbeat?.beat()
                // Files left in cur/ (a crash, or a store that could not take them) are retried on the rescan
                // interval, not on every inotify event: a full disk must not become a busy loop.
                let retryClaimed = clock.now.hasReached(retryClaimedAt)
                if retryClaimed { retryClaimedAt = clock.now.addingTimeInterval(rescanInterval.timeInterval) }
                await scan(includingClaimed: retryClaimed) { !stopping.value }
                await bell.wait(timeout: min(rescanInterval, heartbeat?.interval ?? rescanInterval), clock: clock)
            }
        } onGracefulShutdown: {
            stopping.replace(with: true)
            bell.ring()
        }
    }

    /// Files committed together, at most: what one scan finds is claimed, read and committed this many at a time.
    static let batchSize = 256

    /// Processes what waits in `cur/` (when asked), then everything in `new/`, oldest name first. Files waiting in
    /// `cur/` (the store could not take them) hold back `new/`, so a later delivery for a payment never commits
    /// before an earlier one; they are taken again on the rescan. `proceed` is asked between batches (a stop).
    public func scan(includingClaimed: Bool = false, proceed: () -> Bool = { true }) async {
        // A full disk: files stay where they are (claiming one writes the spool's directory) until space returns.
        if ingestor.disk?.pressure != nil { return }
        if includingClaimed {
            guard await process(spool.names(in: "cur"), claimed: true, proceed: proceed) else { return }
        } else if !spool.names(in: "cur").isEmpty {
            return
        }
        await process(spool.names(in: "new"), claimed: false, proceed: proceed)
    }

    /// Claims and reads `names` (from `cur/` when `claimed`), then commits their deliveries together, in name order,
    /// one batch at a time: one commit for a batch rather than one per file. Three batches are under way at once: one
    /// being claimed and read, the one before it being committed, and the committed one before that being removed. A
    /// batch is committed only after the one before it has been. After a batch the store could not take, or when
    /// `proceed` says stop, no later batch is committed (one already claimed waits in `cur/`). Returns whether every
    /// batch was taken by the store.
    @discardableResult
    func process(_ names: [String], claimed: Bool, proceed: () -> Bool = { true }) async -> Bool {
        var chunks = stride(from: names.startIndex, to: names.endIndex, by: Self.batchSize)
            .map { names[$0..<min($0 + Self.batchSize, names.endIndex)] }.makeIterator()
        guard let first = chunks.next() else { return true }
        var batch = take(first, claimed: claimed)
        var committed: [String] = []
        var storeTookAll = true
        while true {
            let removing = committed
            async let answered = commit(batch)
            async let removed: Void = remove(removing)
            let next = chunks.next().map { take($0, claimed: claimed) }
            let result = await answered
            committed = result.committed
            storeTookAll = !result.storeFailed
            await removed
            guard let next, storeTookAll, proceed() else { break }
            batch = next
        }
        remove(committed)
        return storeTookAll
    }

    private typealias TakenFile = (name: String, path: String, delivery: Delivery)

    private func take(_ names: ArraySlice<String>, claimed: Bool) -> [TakenFile] {
        names.compactMap { name in
            // A long backlog is progress too: one beat per file, so the watchdog never takes a busy scan for a hang.
            heartbeat?.beat()
            return take(name, claimed: claimed).map { (name, $0.path, $0.delivery) }
        }
    }

    /// Commits a batch's deliveries and returns the paths of the committed files, and whether the store failed to
    /// take any; what the store could not take stays in `cur/` and what it refused is quarantined.
    private func commit(_ batch: [TakenFile]) async -> (committed: [String], storeFailed: Bool) {
        guard !batch.isEmpty else { return ([], false) }
        let answers = await ingestor.ingest(batch.map { (delivery: $0.delivery, source: "spool:\($0.name)") })
        let now = clock.now
        var committed: [String] = []
        var storeFailed = false
        for (file, answer) in zip(batch, answers) {
            if answer.accepted {
                committed.append(file.path)
            } else if answer.status == 503 {
                storeFailed = true
                // The store could not take it (full disk?): the file stays claimed in cur/ and is retried on the
                // next rescan.
                logger.warning(
                    "spool file \(file.name) stays in cur/ until the store takes it: \(answer.detail)", metadata: ["spool_file": .string(file.name)])
            } else {
                quarantine(file.path, rule: answer.word, detail: answer.detail, status: answer.status, at: now)
            }
        }
        return (committed, storeFailed)
    }

    /// Removes (or keeps in `done/`) committed files. One left behind by a crash is taken again from `cur/` and
    /// found a duplicate.
    private func remove(_ committed: [String]) {
        for path in committed { spool.finish(path) }
    }

    /// Claims `name` (unless it is in `cur/` already) and reads its delivery; a file that cannot be is quarantined
    /// with the reason, and `nil` returned (also for a file another process took first).
    private func take(_ name: String, claimed: Bool) -> (path: String, delivery: Delivery)? {
        let now = clock.now
        let path: String
        if claimed {
            path = "\(spool.directory)/cur/\(name)"
        } else {
            do {
                guard let taken = try spool.claim(name) else { return nil }
                path = taken
            } catch {
                Ingestor.count(source: "spool", nil, refusedFor: error.rule)
                quarantine("\(spool.directory)/new/\(name)", rule: error.rule, detail: error.detail, status: nil, at: now)
                return nil
            }
        }
        do {
            return (path, try SpoolFile.delivery(try spool.read(path)))
        } catch {
            Ingestor.count(source: "spool", nil, refusedFor: error.rule)
            quarantine(path, rule: error.rule, detail: error.detail, status: nil, at: now)
            return nil
        }
    }

    private func quarantine(_ path: String, rule: String, detail: String, status: Int?, at: Date) {
        let name = (path as NSString).lastPathComponent
        do {
            try spool.quarantine(path, rule: rule, detail: detail, status: status, at: at)
            logger.warning(
                "spool file \(name) quarantined: \(rule): \(detail)",
                metadata: [
                    "spool_file": .string(name), "rule": .string(rule), MessageID.metadataKey: .string(MessageID.deliveryRefused.rawValue),
                ])
        } catch {
            logger.error("cannot quarantine spool file \(name) (\(rule): \(detail)): \(error)", metadata: ["spool_file": .string(name)])
        }
    }
}

/// inotify on one directory, read on its own thread (never on Swift's cooperative pool); any event rings `onChange`.
final class DirectoryWatcher: Sendable {
    private let stopped = Live(false)

    init(path: String, logger: Logger, onChange: @escaping @Sendable () -> Void) {
        let fd = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        guard fd >= 0, inotify_add_watch(fd, path, UInt32(IN_MOVED_TO | IN_CLOSE_WRITE | IN_CREATE)) >= 0 else {
            logger.warning("no inotify on \(path) (\(String(cString: strerror(errno)))): relying on the periodic rescan")
            if fd >= 0 { close(fd) }
            return
        }
        let stopped = self.stopped
        let worker = Thread {
            var buffer = [UInt8](repeating: 0, count: 4_096)
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            while !stopped.value {
                // A short poll timeout lets stop() end the thread without closing a descriptor under it.
                guard poll(&poller, 1, 250) > 0 else { continue }
                while read(fd, &buffer, buffer.count) > 0 {}
                onChange()
            }
            close(fd)
        }
        worker.name = "klarna-reconciler.spool-watch"
        worker.start()
    }

    func stop() { stopped.replace(with: true) }
}
