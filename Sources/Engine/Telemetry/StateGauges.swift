import Foundation
import Metrics
import ReconcilerCore
import ReconcilerStore

/// The gauges `/metrics` reads from the state rather than counts as things happen: open work by phase, unfinished
/// intents, outbox and notify backlog, holds, the oldest open item and the next deadline (from the store), the
/// spool's `new/` and `quarantine/` (from the disk). Those are read at most every `refreshEvery`, however often
/// Prometheus scrapes; what comes from memory (backlog, readiness) is fresh on every scrape.
public actor StateGauges {
    let store: any StoreHealth
    let spoolDirectory: String?
    let refreshEvery: Duration
    private var refreshedAt: ContinuousClock.Instant?

    public init(store: any StoreHealth, spoolDirectory: String?, refreshEvery: Duration = .seconds(5)) {
        self.store = store
        self.spoolDirectory = spoolDirectory
        self.refreshEvery = refreshEvery
    }

    public func update(now: Date, backlog: Int, ready: Bool) async {
        gauge(.backlog).record(backlog)
        gauge(.ready).record(ready ? 1 : 0)
        if let refreshedAt, ContinuousClock.now - refreshedAt < refreshEvery { return }
        // A store that does not answer keeps the last values; /v1/ready and the journal say why.
        guard let snapshot = try? await store.stateSnapshot() else { return }
        refreshedAt = .now
        for phase in TrackedSession.Phase.allCases where phase == .polling || phase == .authorized {
            gauge(.openSessions, ("phase", phase.rawValue)).record(snapshot.openSessionsByPhase[phase.rawValue] ?? 0)
        }
        for phase in TrackedOrder.Phase.allCases where phase != .closed {
            gauge(.openOrders, ("phase", phase.rawValue)).record(snapshot.openOrdersByPhase[phase.rawValue] ?? 0)
        }
        for state in [Intent.State.intended, .sent, .ambiguous] {
            gauge(.unfinishedIntents, ("state", state.rawValue)).record(snapshot.unfinishedIntentsByState[state.rawValue] ?? 0)
        }
        gauge(.outboxBacklog).record(snapshot.outboxBacklog)
        gauge(.notifyBacklog).record(snapshot.notifyBacklog)
        gauge(.held).record(snapshot.held)
        gauge(.chargesWaiting).record(snapshot.chargesWaiting)
        gauge(.oldestOpenAge).record(snapshot.oldestOpenSince.map { max(0, now.timeIntervalSince($0)) } ?? 0)
        gauge(.nextDeadline).record(snapshot.nextDeadline?.timeIntervalSince1970 ?? 0)
        if let spoolDirectory {
            gauge(.spoolNew).record(Self.files(in: spoolDirectory + "/new"))
            gauge(.spoolQuarantined).record(Self.files(in: spoolDirectory + "/quarantine") { !$0.hasSuffix(".reason") })
        }
    }

    private func gauge(_ name: MetricName, _ dimensions: (String, String)...) -> Gauge {
        Gauge(label: name.rawValue, dimensions: dimensions)
    }

    /// Entries in `directory` (dot-files aside) that pass `include`.
    static func files(in directory: String, _ include: (String) -> Bool = { _ in true }) -> Int {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).count { !$0.hasPrefix(".") && include($0) }
    }
}
