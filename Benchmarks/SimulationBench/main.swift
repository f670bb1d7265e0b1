import Engine
import Foundation
import HTTPServer
import KlarnaAPI
import KlarnaSandbox
import Logging
import ReconcilerCore
import ReconcilerStore
import SQLiteBackend
import Synchronization

// klarna-sim-bench [--open-sessions M] [--open-window-seconds W] [--sessions N] [--arrival-seconds A]
//                  [--share-completing P] [--expiry-seconds E] [--rate R] [--seed S]
//
// The real engine (Scheduler, Reconciler, RateLimiter, the SQLite store) against the sandbox over loopback, on one
// manual clock that both share and that jumps to the next event once every worker waits for the budget: half an
// hour of traffic in a minute or two. At the start M sessions are open, tracked over the W seconds before and
// abandoned (they never complete; those older than E − W expire during the run); then N more arrive uniformly over
// A seconds, a share P of which completes at a log-normal age (median 3 min, σ 0.8). HPP sessions expire E seconds
// after creation. Polling only (no webhooks), budget R calls/s, and the sandbox enforces R/s itself (429 past it).
// A plain round-robin poller on the same budget and workload is simulated in the same run. Prints `key value` lines
// for scripts/bench.sh.

func option(_ name: String, _ fallback: Double) -> Double {
    guard let index = CommandLine.arguments.firstIndex(of: name), index + 1 < CommandLine.arguments.count,
        let value = Double(CommandLine.arguments[index + 1])
    else { return fallback }
    return value
}

let openCount = Int(option("--open-sessions", 7_000))
let openWindow = option("--open-window-seconds", 10_800)
let sessionCount = Int(option("--sessions", 3_000))
let rate = option("--rate", 50)
let arrivalSeconds = option("--arrival-seconds", 1_200)
let expirySeconds = option("--expiry-seconds", 10_800)
let shareCompleting = option("--share-completing", 0.75)
let random = SeededRandomSource(seed: UInt64(option("--seed", 42)))
let grace = PollingSchedule().expiryGrace.timeInterval

func report(_ key: String, _ value: Any) { print("\(key) \(value)") }
func percentile(_ values: [Double], _ p: Double) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .nan }
    return sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))]
}
func format(_ value: Double) -> String { String(format: "%.2f", value) }

/// Standard normal by Box–Muller, from the seeded source.
func normal() -> Double {
    let u = max(1e-12, random.nextUnit()), v = random.nextUnit()
    return (-2 * log(u)).squareRoot() * cos(2 * .pi * v)
}

struct Arrival {
    /// Seconds from the start of the run; negative for the sessions open when it starts.
    let at: TimeInterval
    /// Age at which the consumer completes; `nil`: abandoned.
    let completesAfter: TimeInterval?
}

let alreadyOpen: [Arrival] = (0..<openCount).map { _ in Arrival(at: -random.nextUnit() * openWindow, completesAfter: nil) }
let workload: [Arrival] =
    alreadyOpen
    + (0..<sessionCount).map { _ in
        let at = random.nextUnit() * arrivalSeconds
        let completes = random.nextUnit() < shareCompleting
        // Completing later than the session lives is abandoning it.
        let age = completes ? min(180 * exp(0.8 * normal()), expirySeconds - 1) : nil
        return Arrival(at: at, completesAfter: age)
    }.sorted { $0.at < $1.at }
let horizonSeconds = arrivalSeconds + 900

// MARK: The round-robin baseline: reads at exactly the budget's rate, open sessions in a circle.

func roundRobin() -> (detection: [Double], reads: Int, misses: Int) {
    // The sessions open at the start in no particular order (Fisher–Yates on the seeded source), then arrivals at
    // the back as they come.
    var queue = Array(0..<openCount)
    for index in queue.indices.reversed() { queue.swapAt(index, Int(random.nextUnit() * Double(index + 1))) }
    var head = 0
    var next = openCount
    var detection: [Double] = []
    var expiryReadAt: [Int: Double] = [:]
    var reads = 0
    var tick = 0
    while true {
        let now = Double(tick) / rate
        tick += 1
        if now > horizonSeconds { break }
        while next < workload.count, workload[next].at <= now { queue.append(next); next += 1 }
        guard head < queue.count else { continue }
        let index = queue[head]
        head += 1
        reads += 1
        let arrival = workload[index]
        if let age = arrival.completesAfter, now >= arrival.at + age {
            detection.append(now - arrival.at - age)
        } else if now >= arrival.at + expirySeconds {
            expiryReadAt[index] = now
        } else {
            queue.append(index)
        }
        // Keep the array from growing without bound.
        if head > 100_000 { queue.removeFirst(head); head = 0 }
    }
    let misses = workload.indices.count { index in
        let arrival = workload[index]
        let expiresAt = arrival.at + expirySeconds
        guard arrival.completesAfter == nil, expiresAt + grace <= horizonSeconds else { return false }
        return (expiryReadAt[index] ?? .infinity) > expiresAt + grace
    }
    return (detection, reads, misses)
}

// MARK: The engine

final class Counter: Sendable {
    private let value = Mutex(0)
    var current: Int { value.withLock { $0 } }
    func add(_ delta: Int) { value.withLock { $0 += delta } }
}

final class Waits: Sendable {
    private let values = Mutex<[Double]>([])
    var all: [Double] { values.withLock { $0 } }
    func append(_ value: Double) { values.withLock { $0.append(value) } }
}

let start = Date(timeIntervalSince1970: 1_800_000_000)
let clock = ManualClock(now: start)
let sandbox = KlarnaSandbox(configuration: .init(clock: clock, random: SeededRandomSource(seed: 7)))
sandbox.setRateLimit(perSecond: rate)
let server = try await HTTPServer.bind(.tcp(host: "127.0.0.1", port: 0), logger: Logger(label: "sim.sandbox")) { await sandbox.handle($0) }
let serving = Task { try await server.run() }
let transport = CurlTransport(configuration: .init(requestTimeout: .seconds(30), maxConnectionsPerHost: 32))
var quiet = Logger(label: "sim")
quiet.logLevel = ProcessInfo.processInfo.environment["SIM_LOG"].flatMap { Logger.Level(rawValue: $0) } ?? .critical
let client = KlarnaClient(
    configuration: KlarnaConfiguration(
        baseURL: "http://127.0.0.1:\(server.port!)", credentials: BasicCredentials(username: "sandbox-merchant", password: "sandbox-secret")),
    transport: transport, logger: quiet)
// tmpfs when there is one: the bench measures scheduling, not the disk.
let folder =
    (FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm/" : NSTemporaryDirectory()) + "klarna-sim-bench-" + UUID().uuidString.prefix(8)
try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(atPath: folder) }
let store = try SQLiteStore(path: folder + "/state.sqlite")
let sideEffectWaits = Waits()
let limiter = RateLimiter(ratePerSecond: rate, burst: 10, clock: clock) { urgency, waited in
    if urgency >= .inMotion { sideEffectWaits.append(waited.timeInterval) }
}
let settings = EngineSettings()
let reconciler = Reconciler(
    store: store, accounts: KlarnaAccounts(client: client, rateLimiter: limiter), clock: clock, random: SeededRandomSource(seed: 11),
    settings: settings, logger: quiet)
let scheduler = Scheduler()
let workers = WorkerService(reconciler: reconciler, queue: store, scheduler: scheduler, logger: quiet)
let inFlight = Counter()

struct Created {
    let hppSessionID: String
    let arrival: Arrival
}
var created: [Created] = []
var pending = workload.drop { $0.at < 0 }
let horizon = start.addingTimeInterval(horizonSeconds)
let schedule = PollingSchedule()

// The sessions open at the start: tracked in the past, read a little while ago, never completing.
for arrival in workload.prefix(while: { $0.at < 0 }) {
    let session = try sandbox.createSession(SessionSpec(orderAmount: 10_000, hppExpiresAfterSeconds: arrival.at + expirySeconds))
    var tracked = TrackedSession(
        hppSessionID: session.hppSessionId, kpSessionID: session.kpSessionId, mode: ReconcilerCore.PlaceOrderMode.none,
        merchantReference: nil, capturePolicy: .immediate, purpose: .buy, trackedAt: start.addingTimeInterval(arrival.at))
    tracked.hppStatus = .waiting
    tracked.expiresAt = session.expiresAt
    tracked.reads = 1
    tracked.lastReadAt = max(tracked.trackedAt, start.addingTimeInterval(-random.nextUnit() * 300))
    tracked.nextDueAt = schedule.nextPoll(now: tracked.lastReadAt!, anchor: tracked.trackedAt, expiresAt: tracked.expiresAt)
    _ = try await store.track(tracked, event: DomainEvent(.tracked, "simulation"), at: start)
    if let plan = tracked.plan(now: start) { await scheduler.schedule(.session(session.hppSessionId), plan) }
    created.append(Created(hppSessionID: session.hppSessionId, arrival: arrival))
}
let began = ContinuousClock.now
var lastProgress = start

/// Every in-flight job waits for a token that is not there yet: nothing more happens until the clock moves.
func settled() -> Bool {
    let waiting = limiter.waiting
    return inFlight.current == waiting && !(limiter.nextGrant.map { $0 <= clock.now } ?? false)
}

var iterations = 0
while clock.now < horizon {
    iterations += 1
    let now = clock.now
    while let arrival = pending.first, start.addingTimeInterval(arrival.at) <= now {
        pending.removeFirst()
        let steps = arrival.completesAfter.map { [ScheduleStep(afterSeconds: $0, status: "COMPLETED")] } ?? []
        let session = try sandbox.createSession(SessionSpec(orderAmount: 10_000, schedule: steps, hppExpiresAfterSeconds: expirySeconds))
        let tracked = TrackedSession(
            hppSessionID: session.hppSessionId, kpSessionID: session.kpSessionId, mode: ReconcilerCore.PlaceOrderMode.none,
            merchantReference: nil, capturePolicy: .immediate, purpose: .buy, trackedAt: now)
        _ = try await store.track(tracked, event: DomainEvent(.tracked, "simulation"), at: now)
        if let plan = tracked.plan(now: now) { await scheduler.schedule(.session(session.hppSessionId), plan) }
        created.append(Created(hppSessionID: session.hppSessionId, arrival: arrival))
    }
    let capacity = settings.maxConcurrency - inFlight.current
    if capacity > 0 {
        let jobs = await scheduler.take(now: now, capacity: capacity, budget: limiter)
        for job in jobs {
            inFlight.add(1)
            Task {
                await workers.perform(job)
                inFlight.add(-1)
            }
        }
        if !jobs.isEmpty { continue }
    }
    while !settled() { try await Task.sleep(for: .microseconds(50)) }
    if inFlight.current < settings.maxConcurrency, let due = await scheduler.nextDue(budget: limiter), due <= clock.now {
        continue
    }
    var next: [Date] = []
    if let arrival = pending.first { next.append(start.addingTimeInterval(arrival.at)) }
    if let grant = limiter.nextGrant { next.append(grant) }
    if inFlight.current < settings.maxConcurrency, let due = await scheduler.nextDue(budget: limiter) { next.append(due) }
    guard let earliest = next.min() else { break }
    clock.advance(by: Duration(timeInterval: max(0.000_1, earliest.timeIntervalSince(clock.now))))
    if clock.now.timeIntervalSince(lastProgress) >= 300 {
        lastProgress = clock.now
        let open = await scheduler.scheduledCount + scheduler.runningCount
        FileHandle.standardError.write(
            Data(
                "sim t=\(Int(clock.now.timeIntervalSince(start))) s, \(open) open, \(sandbox.requests().count) calls, \(iterations) steps, \(Int((ContinuousClock.now - began).timeInterval)) s real\n"
                    .utf8))
    }
}
while inFlight.current > 0 { try await Task.sleep(for: .milliseconds(1)) }

// MARK: What happened

let reads = sandbox.requests(route: "hpp.read_session")
var readsBySession: [String: [Date]] = [:]
for read in reads {
    readsBySession[String(read.path.split(separator: "/").last ?? ""), default: []].append(read.at)
}
var detection: [Double] = []
var undetected = 0
var misses = 0
for session in created {
    let times = readsBySession[session.hppSessionID] ?? []
    let createdAt = start.addingTimeInterval(session.arrival.at)
    if let age = session.arrival.completesAfter {
        let completedAt = createdAt.addingTimeInterval(age)
        if let seen = times.filter({ $0 >= completedAt }).min() { detection.append(seen.timeIntervalSince(completedAt)) } else { undetected += 1 }
    } else {
        let expiresAt = createdAt.addingTimeInterval(expirySeconds)
        guard expiresAt.addingTimeInterval(grace) <= horizon else { continue }
        if !times.contains(where: { $0 >= expiresAt && $0.timeIntervalSince(expiresAt) <= grace }) { misses += 1 }
    }
}
let completed = created.count { $0.arrival.completesAfter != nil }
let limited = sandbox.requests().count { $0.status == 429 }
let baseline = roundRobin()
let model = await scheduler.completionModel

report("sim_sessions", created.count)
report("sim_open_at_start", openCount)
report("sim_expiring_in_run", created.count { $0.arrival.completesAfter == nil && $0.arrival.at + expirySeconds + grace <= horizonSeconds })
report("sim_completing", completed)
report("sim_rate", Int(rate))
report("sim_simulated_seconds", Int(clock.now.timeIntervalSince(start)))
report("sim_real_seconds", format((ContinuousClock.now - began).timeInterval))
report("sim_klarna_calls", sandbox.requests().count)
report("sim_detect_p50_s", format(percentile(detection, 0.5)))
report("sim_detect_p90_s", format(percentile(detection, 0.9)))
report("sim_detect_p99_s", format(percentile(detection, 0.99)))
report("sim_undetected", undetected)
report("sim_side_effect_wait_p99_ms", format(percentile(sideEffectWaits.all, 0.99) * 1_000))
report("sim_side_effect_wait_max_ms", format((sideEffectWaits.all.max() ?? 0) * 1_000))
report("sim_reads_per_completed", format(Double(reads.count) / Double(max(1, completed))))
report("sim_429s", limited)
report("sim_missed_expiry", misses)
report("sim_learned_median_s", format(model.median.timeInterval))
report("sim_learned_share_ending", format(model.shareEnding))
report("rr_detect_p50_s", format(percentile(baseline.detection, 0.5)))
report("rr_detect_p90_s", format(percentile(baseline.detection, 0.9)))
report("rr_detect_p99_s", format(percentile(baseline.detection, 0.99)))
report("rr_reads_per_completed", format(Double(baseline.reads) / Double(max(1, completed))))
report("rr_missed_expiry", baseline.misses)
report("detect_p50_ratio", format(percentile(detection, 0.5) / percentile(baseline.detection, 0.5)))
serving.cancel()
transport.shutdown()
