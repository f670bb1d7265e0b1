import ArgumentParser
import Foundation
import ReconcilerStore

/// `klarna-reconciler cluster`: the daemons sharing a PostgreSQL store, their heartbeats and the work each holds.
struct ClusterCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cluster", abstract: "Lists the daemons sharing the PostgreSQL store: heartbeats, leases and the work each holds.")

    @Flag(help: "One JSON document instead of the table.") var json = false
    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let settings = try await options.load(needsKlarnaPassword: false)
        guard settings.storeURL != nil else {
            print("the store is the SQLite file \(settings.storePath): one daemon on this host, no cluster (store.url shares a PostgreSQL store)")
            return
        }
        guard let cluster = try await options.openStore(settings, readOnly: true) as? any ClusterView else { throw ExitCode.failure }
        let daemons = try await cluster.daemons()
        let unclaimed = try await cluster.unclaimedWork()
        let now = Date()
        let leaseSeconds = settings.leaseTime.timeInterval
        func state(_ daemon: DaemonRecord) -> String {
            if daemon.stoppedAt != nil { return "stopped" }
            return now.timeIntervalSince(daemon.heartbeatAt) <= leaseSeconds ? "live" : "lapsed"
        }
        if json {
            struct Report: Encodable {
                struct Daemon: Encodable {
                    let id: String, host: String, pid: Int, state: String, startedAt: Date, heartbeatAt: Date, stoppedAt: Date?, leases: Int,
                        sample: [String]
                }
                let daemons: [Daemon]
                let unclaimedWork: Int
                let leaseSeconds: Double
            }
            let report = Report(
                daemons: daemons.map {
                    .init(
                        id: $0.id, host: $0.host, pid: $0.pid, state: state($0), startedAt: $0.startedAt, heartbeatAt: $0.heartbeatAt,
                        stoppedAt: $0.stoppedAt, leases: $0.leases, sample: $0.sample)
                },
                unclaimedWork: unclaimed, leaseSeconds: leaseSeconds)
            return try printJSON(report)
        }
        let live = daemons.filter { state($0) == "live" }.count
        print("\(live) live daemon(s) on \(settings.storeDescription); leases last \(Int(leaseSeconds)) s; \(unclaimed) unit(s) of work unclaimed")
        for daemon in daemons {
            let heartbeat = "heartbeat \(String(format: "%.1f", now.timeIntervalSince(daemon.heartbeatAt))) s ago"
            let since = "up since \(daemon.startedAt.formatted(.iso8601))"
            print(
                "  \(daemon.id)  \(state(daemon))  \(heartbeat)  \(since)  \(daemon.leases) lease(s)"
                    + (daemon.sample.isEmpty ? "" : ": \(daemon.sample.joined(separator: ", "))\(daemon.leases > daemon.sample.count ? ", …" : "")"))
        }
    }
}
