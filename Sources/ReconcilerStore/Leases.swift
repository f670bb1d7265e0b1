import Foundation
import ReconcilerCore

// Work shared by several daemons on one store (PostgreSQL). Each unit of work (a session, an order, a payment
// request) is leased to one daemon at a time; the lease is renewed while held and runs out when its holder stops
// renewing it, and then another daemon claims the work. Every commit of a step is fenced by its key's lease (see
// `WorkStore.commit(_:at:fencedBy:)`). The SQLite store has one daemon (its file lock) and no leases.

/// One daemon as the store knows it.
public struct DaemonIdentity: Sendable, Equatable {
    /// Unique per start: host, pid and start time.
    public var id: String
    public var host: String
    public var pid: Int

    public init(host: String, pid: Int, started: Date) {
        self.host = host
        self.pid = pid
        id = "\(host)/\(pid)/\(Int(started.timeIntervalSince1970 * 1_000) % 100_000_000)"
    }
}

/// A unit of work a daemon just claimed.
public struct Claim: Sendable, Equatable {
    public var key: WorkKey
    /// Its open state, to plan the next run from; `nil` when the key is not open (it was woken for an operator
    /// request or a late webhook): it runs once, now.
    public var work: OpenWork?
    /// Taken from another daemon whose lease ran out (not one that let it go): whose it was and when it ended,
    /// relative to the claim query. The claimer makes it a ``Takeover`` with the instant the answer arrived.
    public var lapsed: LapsedLease?

    public init(key: WorkKey, work: OpenWork?, lapsed: LapsedLease?) {
        self.key = key
        self.work = work
        self.lapsed = lapsed
    }
}

/// What a renewal learnt.
public struct LeaseRenewal: Sendable, Equatable {
    /// The keys this daemon still holds.
    public var held: Set<WorkKey>
    /// Daemons whose heartbeat is younger than a lease: this one included.
    public var liveDaemons: Int

    public init(held: Set<WorkKey>, liveDaemons: Int) {
        self.held = held
        self.liveDaemons = liveDaemons
    }
}

/// A daemon sharing the store, as `klarna-reconciler cluster` shows it.
public struct DaemonRecord: Sendable, Equatable, Codable {
    public var id: String
    public var host: String
    public var pid: Int
    public var startedAt: Date
    public var heartbeatAt: Date
    /// Stopped on purpose (its leases were handed back); `nil` while it runs or after it died.
    public var stoppedAt: Date?
    public var leases: Int
    /// A few of the keys it holds, for a look.
    public var sample: [String]

    public init(id: String, host: String, pid: Int, startedAt: Date, heartbeatAt: Date, stoppedAt: Date?, leases: Int, sample: [String]) {
        self.id = id
        self.host = host
        self.pid = pid
        self.startedAt = startedAt
        self.heartbeatAt = heartbeatAt
        self.stoppedAt = stoppedAt
        self.leases = leases
        self.sample = sample
    }
}

/// The commit's key is no longer this daemon's: its lease ran out and another daemon claimed the work. Nothing of
/// the commit was written.
public struct LeaseLost: Error, CustomStringConvertible {
    public let key: WorkKey
    public init(key: WorkKey) { self.key = key }
    public var description: String { "the lease on \(key) is no longer this daemon's: another daemon holds the work; nothing was committed" }
}

/// The commit's key is still this daemon's, but its lease ran out unrenewed (the store was unreachable for a
/// while) and no other daemon has claimed it yet. Nothing was written; the same commit goes through once a renewal
/// has extended the lease, and a Klarna answer it carries is kept rather than left for a takeover to guess at.
public struct LeaseLapsed: Error, CustomStringConvertible {
    public let key: WorkKey
    public init(key: WorkKey) { self.key = key }
    public var description: String {
        "the lease on \(key) ran out unrenewed and nobody has taken it: nothing was committed yet; committed once a renewal extends it"
    }
}

/// What a daemon sharing the store needs to share the work: register, claim, renew, hand back, and hear of new work.
public protocol LeaseStore: Sendable {
    /// Who this handle writes as; every fenced commit checks the lease is this daemon's.
    var daemon: DaemonIdentity { get }
    /// Records the daemon as live. Refused while `store copy` fills the database.
    func register(at: Date) async throws
    /// Moves the heartbeat and every lease this daemon holds on by `ttl`.
    func renewLeases(ttl: Duration) async throws -> LeaseRenewal
    /// Claims up to `limit` keys nobody holds or whose holder's lease ran out, oldest first: while this daemon
    /// holds less than its share of all leased work (the whole divided by `liveDaemons`), any of them; beyond its
    /// share, only keys left unclaimed for `patience` (no daemon with room took them). So the work spreads over
    /// the daemons, and none waits for long.
    func claimWork(ttl: Duration, limit: Int, liveDaemons: Int, patience: Duration) async throws -> [Claim]
    /// The open work of `keys` (those without an open unit are left out).
    func openWork(of keys: [WorkKey]) async throws -> [OpenWork]
    /// Takes the wakeups of keys this daemon holds, except those its own ingest acted on already.
    func takeWakeups() async throws -> [WorkKey]
    /// Lets go of keys whose work is done, in one exchange, and returns those let go of. A key is kept while its unit
    /// is still open (a held payment, an order with a refund under way) or a wakeup for it waits, and when this
    /// daemon no longer holds it.
    func releaseLeases(_ keys: [WorkKey]) async throws -> Set<WorkKey>
    /// Hands every lease back at once (a graceful stop: no call is in flight), so others need not wait them out.
    func deregister(at: Date) async throws
    /// Calls `heard` whenever work arrives for anyone (a new unit, a wakeup), until cancelled; reconnects on its own.
    func listenForWork(_ heard: @escaping @Sendable () -> Void) async
}

/// What `klarna-reconciler cluster` reads.
public protocol ClusterView: Sendable {
    func daemons() async throws -> [DaemonRecord]
    /// Units of work nobody holds (waiting to be claimed, or their holder's lease ran out).
    func unclaimedWork() async throws -> Int
}
