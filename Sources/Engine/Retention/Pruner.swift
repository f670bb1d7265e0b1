import Foundation
import ReconcilerCore
import ReconcilerStore

/// Applies a ``RetentionPolicy``: the store in small batches (each its own short transaction, so the daemon's own
/// commits go on between them), and the spool's `done/` files by age. `prune` and the daemon's retention loop both
/// use it.
public struct Pruner: Sendable {
    public let store: any PruningStore
    public let policy: RetentionPolicy
    /// The spool's `done/` folder, when there is a spool.
    public let doneDirectory: String?
    /// The outbox's `cur/` folder (outcomes consumers acknowledged).
    public let acknowledgedDirectory: String?
    public let clock: any WallClock
    /// Rows of each kind per transaction.
    public let batch: Int

    public init(
        store: any PruningStore, policy: RetentionPolicy, doneDirectory: String?, acknowledgedDirectory: String? = nil, clock: any WallClock,
        batch: Int = 500
    ) {
        self.store = store
        self.policy = policy
        self.doneDirectory = doneDirectory
        self.acknowledgedDirectory = acknowledgedDirectory
        self.clock = clock
        self.batch = batch
    }

    /// Removes everything past its retention or over the cap now (or, with `dryRun`, counts it) and says how much.
    public func run(dryRun: Bool) async throws -> PruneCounts {
        let cutoffs = policy.cutoffs(now: clock.now)
        var total = try await dryRun ? store.prune(cutoffs, limit: -1, dryRun: true) : remove(cutoffs)
        if let doneDirectory, let before = cutoffs.spoolDoneBefore {
            total.spoolFiles = Self.pruneFiles(in: doneDirectory, before: before, dryRun: dryRun)
        }
        if let acknowledgedDirectory, let before = cutoffs.outboxAcknowledgedBefore {
            // By change time: the rename into cur/ sets it, so a file waits its full time after the acknowledgement
            // however long it sat in new/ (its modification time is when the daemon wrote it).
            total.outboxFiles = Self.pruneFiles(in: acknowledgedDirectory, before: before, dryRun: dryRun, byChangeTime: true)
        }
        return total
    }

    /// Only what is over the cap (`retention.unverified_max_rows`): the oldest refusals and notifications for unknown
    /// orders beyond it; the daemon does it every minute between two passes.
    public func enforceCap() async throws -> PruneCounts {
        guard policy.unverifiedRowCap != nil else { return PruneCounts() }
        return try await remove(policy.capOnly)
    }

    /// Removes what `cutoffs` select, a batch per transaction, until nothing is left.
    private func remove(_ cutoffs: PruneCutoffs) async throws -> PruneCounts {
        var total = PruneCounts()
        while true {
            try Task.checkCancellation()
            let pruned = try await store.prune(cutoffs, limit: batch, dryRun: false)
            if pruned.isEmpty { return total }
            total += pruned
            await Task.yield()
        }
    }

    /// Files in `directory` last modified (or, `byChangeTime`, last renamed or changed) before `before`: removed
    /// unless `dryRun`; how many.
    static func pruneFiles(in directory: String, before: Date, dryRun: Bool, byChangeTime: Bool = false) -> Int {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        var count = 0
        for name in names {
            let path = "\(directory)/\(name)"
            var info = stat()
            guard lstat(path, &info) == 0 else { continue }
            let time = byChangeTime ? info.st_ctim : info.st_mtim
            guard Date(timeIntervalSince1970: Double(time.tv_sec) + Double(time.tv_nsec) / 1e9) < before else { continue }
            if dryRun || unlink(path) == 0 { count += 1 }
        }
        return count
    }
}
