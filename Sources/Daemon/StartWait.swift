import Engine
import Foundation
import Logging
import ReconcilerCore
import ReconcilerStore
import ServiceLifecycle
import PostgresBackend
import SQLiteBackend
import SystemdSupport

/// A start whose store cannot be written (a full disk, an I/O error, a server refusing writes) waits for it instead of
/// exiting: under the shipped unit an exit every few seconds would reach systemd's start limit and leave the service
/// down after the space returned. A store that cannot even be opened is waited for before READY (systemd's start
/// timeout extended); one that opens but cannot load the open work, after it, in the work loop's place
/// (``WorkersAfterStore``), the sockets answering. Meanwhile it says why: `STATUS=`, the journal once a minute with
/// ``MessageID/storeWaiting``, `/v1/ready` once the sockets answer; and keeps the watchdog fed.
struct StartWait {
    let notifier: SystemdNotifier
    let logger: Logger
    /// Given back at the first failure: the space it frees may be all the start needs.
    let reserve: ReserveFile?
    /// Not ready while it waits, with the reason.
    let readiness: Readiness
    /// Beaten at every try: the work loop's, when the wait takes its place (the watchdog must not take the wait for a
    /// hang).
    var heartbeat: Heartbeat? = nil

    /// The longest pause between two tries; shorter under a watchdog (`WatchdogSec=`), which each try feeds.
    var longestPause: Duration { min(.seconds(5), (SystemdNotifier.watchdogInterval() ?? .seconds(15)) / 3) }
    static let complaintInterval: Duration = .seconds(60)

    /// What a start waits out: a SQLite file on a full or failing disk, a PostgreSQL server that refuses writes for
    /// a reason that passes (its disk full, too many connections, read only, starting).
    static func waitsOut(_ error: any Error) -> Bool {
        if let sqlite = error as? SQLiteError { return sqlite.isStorageFault }
        if error is PostgresStore.ServerRefusal { return true }
        return (error as? PostgresProblem)?.kind == .cannotWrite
    }

    /// Runs `body` until it stops failing for want of space or for an I/O error; any other error is thrown at once.
    func retrying<T>(_ what: String, _ body: () async throws -> T) async throws -> T {
        var pause = min(.milliseconds(500), longestPause)
        var complained: ContinuousClock.Instant?
        while true {
            heartbeat?.beat()
            do {
                let value = try await body()
                if complained != nil { logger.notice("the store took the start's writes: \(what) done") }
                readiness.waitingForStore(nil)
                return value
            } catch  where Self.waitsOut(error) {
                reserve?.release()
                let status = "waiting for the store: cannot \(what): \(error); trying again in \(pause)"
                _ = notifier.extendTimeout(by: pause + .seconds(30), status: status)
                _ = notifier.watchdogPing()
                readiness.waitingForStore("\(error)")
                if complained.map({ ContinuousClock.now - $0 >= Self.complaintInterval }) ?? true {
                    complained = .now
                    logger.error(
                        "\(status) (the daemon waits; it does not exit)", metadata: [MessageID.metadataKey: .string(MessageID.storeWaiting.rawValue)])
                }
                try await Task.sleep(for: pause)
                pause = min(pause * 2, longestPause)
            }
        }
    }
}

/// The work loop of a start whose store could not load the open work before READY (a full disk, a server refusing
/// writes): the daemon is up, its sockets answer (`/v1/ready` says it waits for the store), and the work loop waits
/// for the store in its place, then runs.
struct WorkersAfterStore: Service {
    let workers: WorkerService
    let waiting: StartWait
    let what: String

    func run() async throws {
        do {
            try await cancelWhenGracefulShutdown { _ = try await waiting.retrying(what) { try await workers.loadOpenWork() } }
        } catch is CancellationError {
            return  // stopped while it waited: nothing was loaded, nothing runs
        }
        try await workers.run()
    }
}
