import Foundation
import Logging
import ReconcilerCore
import ReconcilerStore
import PostgresBackend
import SQLiteBackend
import SystemdSupport

/// A start whose store cannot be written (a full disk, an I/O error) waits for it instead of exiting: under the
/// shipped unit an exit every few seconds would reach systemd's start limit and leave the service down after the
/// space returned. Meanwhile it says why (`STATUS=`, the journal once a minute with ``MessageID/storeWaiting``,
/// `/v1/ready` once it answers), extends systemd's start timeout and keeps its watchdog fed.
struct StartWait {
    let notifier: SystemdNotifier
    let logger: Logger
    /// Given back at the first failure: the space it frees may be all the start needs.
    let reserve: ReserveFile?
    let readiness: Readiness?

    static let longestPause: Duration = .seconds(5)
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
        var pause = Duration.milliseconds(500)
        var complained: ContinuousClock.Instant?
        while true {
            do {
                let value = try await body()
                if complained != nil {
                    logger.notice("the store took the start's writes: \(what) done")
                    readiness?.waitingForStore(nil)
                }
                return value
            } catch  where Self.waitsOut(error) {
                reserve?.release()
                let status = "waiting for the store: cannot \(what): \(error); trying again in \(pause)"
                _ = notifier.extendTimeout(by: pause + .seconds(30), status: status)
                _ = notifier.watchdogPing()
                readiness?.waitingForStore("\(error)")
                if complained.map({ ContinuousClock.now - $0 >= Self.complaintInterval }) ?? true {
                    complained = .now
                    logger.error(
                        "\(status) (the daemon waits; it does not exit)", metadata: [MessageID.metadataKey: .string(MessageID.storeWaiting.rawValue)])
                }
                try await Task.sleep(for: pause)
                pause = min(pause * 2, Self.longestPause)
            }
        }
    }
}
