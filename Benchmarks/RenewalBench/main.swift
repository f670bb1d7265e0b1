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

// klarna-renewal-bench [--charges N] [--rate R] [--live-per-second L] [--live-seconds S] [--answer-ms A]
//
// A renewal burst beside live checkouts: the real engine (Scheduler, Reconciler, RateLimiter, the SQLite store)
// against the sandbox over loopback, on one manual clock both share that jumps to the next event once every worker
// waits. One account, budget R calls/s (the sandbox enforcing R/s itself); Klarna answers every call A ms (of the
// manual clock) after it arrives. Live payments arrive at L/s for S seconds:
// each HPP session completes 1 s after it is created and its status callback (a webhook) reaches the engine then; the
// daemon reads it, places the order and captures it. Run twice in one process: the live load alone (the reference),
// then with N charges of N customer tokens recorded at the start. Measured: webhook → order placed for the live
// payments (p50, p99) in both runs; when the last charge's order was captured, against the time its share of the
// budget allows (charges × calls a charge ÷ (budget − the live load's calls/s, measured in the reference run)).
// Prints `key value` lines for scripts/bench.sh.

func option(_ name: String, _ fallback: Double) -> Double {
    guard let index = CommandLine.arguments.firstIndex(of: name), index + 1 < CommandLine.arguments.count,
        let value = Double(CommandLine.arguments[index + 1])
    else { return fallback }
    return value
}

let chargeCount = Int(option("--charges", 10_000))
let rate = option("--rate", 50)
let livePerSecond = option("--live-per-second", 5)
let liveSeconds = option("--live-seconds", 1_500)
let answerSeconds = option("--answer-ms", 150) / 1_000

func report(_ key: String, _ value: Any) { print("\(key) \(value)") }
func percentile(_ values: [Double], _ p: Double) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .nan }
    return sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))]
}
func format(_ value: Double) -> String { String(format: "%.2f", value) }

final class Counter: Sendable {
    private let value = Mutex(0)
    var current: Int { value.withLock { $0 } }
    func add(_ delta: Int) { value.withLock { $0 += delta } }
}

struct Measured {
    /// Webhook (the HPP session's completion) → order placed, per live payment, in seconds.
    var webhookToOrder: [Double]
    var livePayments: Int
    var liveOrders: Int
    /// Calls that served the live payments (every call but the charges' own).
    var liveCalls: Int
    /// The charges' own calls: token reads, charges, and their orders' captures.
    var chargeCalls: Int
    var chargesPlaced: Int
    var chargesCaptured: Int
    /// When the last charge's order was captured, from the start.
    var lastChargeDone: Double?
    var simulatedSeconds: Double
    var realSeconds: Double
    var limited: Int
}

/// One run: the live load for `liveSeconds`, and `charges` charges recorded at the start.
func run(charges: Int) async throws -> Measured {
    let start = Date(timeIntervalSince1970: 1_800_000_000)
    let clock = ManualClock(now: start)
    let sandbox = KlarnaSandbox(configuration: .init(clock: clock, random: SeededRandomSource(seed: 7)))
    sandbox.setRateLimit(perSecond: rate)
    _ = sandbox.addFault(SandboxFault(route: "*", kind: .holdAnswer, holdSeconds: answerSeconds, count: nil))
    let server = try await HTTPServer.bind(.tcp(host: "127.0.0.1", port: 0), logger: Logger(label: "renewal.sandbox")) { await sandbox.handle($0) }
    let serving = Task { try await server.run() }
    defer { serving.cancel() }
    let transport = CurlTransport(configuration: .init(requestTimeout: .seconds(30), maxConnectionsPerHost: 32))
    defer { transport.shutdown() }
    var quiet = Logger(label: "renewal")
    quiet.logLevel = ProcessInfo.processInfo.environment["SIM_LOG"].flatMap { Logger.Level(rawValue: $0) } ?? .critical
    let client = KlarnaClient(
        configuration: KlarnaConfiguration(
            baseURL: "http://127.0.0.1:\(server.port!)", credentials: BasicCredentials(username: "sandbox-merchant", password: "sandbox-secret")),
        transport: transport, logger: quiet)
    // tmpfs when there is one: the bench measures scheduling, not the disk.
    let folder =
        (FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm/" : NSTemporaryDirectory()) + "klarna-renewal-bench-"
        + UUID().uuidString.prefix(8)
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: folder) }
    let store = try SQLiteStore(path: folder + "/state.sqlite")
    let limiter = RateLimiter(ratePerSecond: rate, burst: 10, clock: clock)
    let settings = EngineSettings()
    let reconciler = Reconciler(
        store: store, accounts: KlarnaAccounts(client: client, rateLimiter: limiter), clock: clock, random: SeededRandomSource(seed: 11),
        settings: settings, logger: quiet)
    let scheduler = Scheduler()
    let workers = WorkerService(reconciler: reconciler, queue: store, scheduler: scheduler, logger: quiet)
    let inFlight = Counter()

    // The burst: every charge recorded at the start, as the socket records them.
    var records: [IngestRecord] = []
    for index in 0..<charges {
        let token = try sandbox.createCustomerToken(currency: "SEK")
        let ask = ChargeAsk(token: token, reference: "renewal-\(index)", amount: 1_990, currency: "SEK")
        records.append(
            IngestRecord(
                dedupeKey: nil, kind: "charge_request", source: "bench", summary: "charge",
                action: .charge(ask, key: IdempotencyKey.make(.charge, ask.keyTarget), capture: .immediate)))
    }
    for batch in stride(from: 0, to: records.count, by: 500) {
        for result in try await store.ingest(Array(records[batch..<min(records.count, batch + 500)]), at: start) {
            if case .accepted(let keys) = result { for key in keys { await scheduler.schedule(key, WorkPlan(due: start, urgency: .renewal)) } }
        }
    }

    // The live load: arrivals at L/s, each completing (and its webhook arriving) 1 s later.
    let liveCount = Int(livePerSecond * liveSeconds)
    var arrivals = (0..<liveCount).map { start.addingTimeInterval(Double($0) / livePerSecond) }[...]
    var webhooks: [(at: Date, hppSessionID: String)] = []
    var completedAt: [String: Date] = [:]
    let horizon = start.addingTimeInterval(liveSeconds + 600)
    let began = ContinuousClock.now

    /// Every in-flight job waits for a token that is not there yet or for Klarna's answer: nothing more happens until
    /// the clock moves.
    func settled() -> Bool {
        let waiting = limiter.waiting
        return inFlight.current == waiting + sandbox.heldAnswerCount && !(limiter.nextGrant.map { $0 <= clock.now } ?? false)
    }
    func chargesOpen() async throws -> Bool { try await store.stateSnapshot().chargesWaiting > 0 }

    while clock.now < horizon {
        let now = clock.now
        while let arrival = arrivals.first, arrival <= now {
            arrivals.removeFirst()
            let session = try sandbox.createSession(SessionSpec(orderAmount: 10_000, schedule: [ScheduleStep(afterSeconds: 1, status: "COMPLETED")]))
            let tracked = TrackedSession(
                hppSessionID: session.hppSessionId, kpSessionID: session.kpSessionId, mode: ReconcilerCore.PlaceOrderMode.none,
                merchantReference: nil, capturePolicy: .immediate, purpose: .buy, trackedAt: now)
            _ = try await store.track(tracked, event: DomainEvent(.tracked, "bench"), at: now)
            if let plan = tracked.plan(now: now) { await scheduler.schedule(.session(session.hppSessionId), plan) }
            webhooks.append((now.addingTimeInterval(1), session.hppSessionId))
        }
        while let hook = webhooks.first, hook.at <= now {
            webhooks.removeFirst()
            completedAt[hook.hppSessionID] = hook.at
            await scheduler.wake(.session(hook.hppSessionID), at: now)
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
        if inFlight.current < settings.maxConcurrency, let due = await scheduler.nextDue(budget: limiter), due <= clock.now { continue }
        var next: [Date] = []
        if let arrival = arrivals.first { next.append(arrival) }
        if let hook = webhooks.first { next.append(hook.at) }
        if let grant = limiter.nextGrant { next.append(grant) }
        if let wake = clock.nextWake { next.append(wake) }
        if inFlight.current < settings.maxConcurrency, let due = await scheduler.nextDue(budget: limiter) { next.append(due) }
        guard let earliest = next.min() else { break }
        // Past the live load with nothing of the burst left: done.
        if arrivals.isEmpty, webhooks.isEmpty, inFlight.current == 0, try await !chargesOpen(), clock.now > start.addingTimeInterval(liveSeconds + 60)
        {
            break
        }
        clock.advance(by: Duration(timeInterval: max(0.000_1, earliest.timeIntervalSince(clock.now))))
    }
    // Steps still under way finish on the clock: Klarna's held answers come when it reaches them.
    while inFlight.current > 0 {
        if settled(), let wake = clock.nextWake { clock.advance(by: Duration(timeInterval: max(0.000_1, wake.timeIntervalSince(clock.now)))) }
        try await Task.sleep(for: .milliseconds(1))
    }

    let effects = sandbox.effects()
    let charged = Dictionary(
        uniqueKeysWithValues: effects.filter { $0.kind == .tokenCharged }.compactMap { effect in effect.orderId.map { ($0, effect) } })
    var ordersOfLive: [String: Date] = [:]
    for effect in effects where effect.kind == .orderPlaced {
        if let kp = effect.kpSessionId { ordersOfLive[kp] = effect.at }
    }
    var webhookToOrder: [Double] = []
    for (hpp, completed) in completedAt {
        guard let session = try await store.session(hpp), let placed = ordersOfLive[session.kpSessionID] else { continue }
        webhookToOrder.append(placed.timeIntervalSince(completed))
    }
    let chargeCaptures = effects.filter { $0.kind == .captured && charged[$0.orderId ?? ""] != nil }
    let requests = sandbox.requests()
    let chargeOrders = Set(charged.keys)
    // `/ordermanagement/v1/orders/{order_id}/captures`: the order is the fourth segment.
    let chargeCalls = requests.count { request in
        request.route == "ct.read_token" || request.route == "ct.create_order"
            || (request.route == "om.create_capture"
                && chargeOrders.contains(request.path.split(separator: "/").dropFirst(3).first.map(String.init) ?? ""))
    }
    return Measured(
        webhookToOrder: webhookToOrder, livePayments: liveCount, liveOrders: ordersOfLive.count, liveCalls: requests.count - chargeCalls,
        chargeCalls: chargeCalls, chargesPlaced: charged.count, chargesCaptured: chargeCaptures.count,
        lastChargeDone: chargeCaptures.map(\.at).max().map { $0.timeIntervalSince(start) }, simulatedSeconds: clock.now.timeIntervalSince(start),
        realSeconds: (ContinuousClock.now - began).timeInterval, limited: requests.count { $0.status == 429 })
}

let alone = try await run(charges: 0)
let burst = try await run(charges: chargeCount)
let liveCallsPerSecond = Double(alone.liveCalls) / liveSeconds
let callsPerCharge = Double(burst.chargeCalls) / Double(max(1, chargeCount))
let allowed = Double(chargeCount) * callsPerCharge / (rate - liveCallsPerSecond)

report("renewal_charges", chargeCount)
report("renewal_rate", Int(rate))
report("renewal_live_per_second", format(livePerSecond))
report("renewal_live_seconds", Int(liveSeconds))
report("renewal_live_payments", alone.livePayments)
report("renewal_alone_live_orders", alone.liveOrders)
report("renewal_burst_live_orders", burst.liveOrders)
report("renewal_alone_p50_s", format(percentile(alone.webhookToOrder, 0.5)))
report("renewal_alone_p99_s", format(percentile(alone.webhookToOrder, 0.99)))
report("renewal_burst_p50_s", format(percentile(burst.webhookToOrder, 0.5)))
report("renewal_burst_p99_s", format(percentile(burst.webhookToOrder, 0.99)))
report("renewal_p99_ratio", format(percentile(burst.webhookToOrder, 0.99) / percentile(alone.webhookToOrder, 0.99)))
report("renewal_live_calls_per_second", format(liveCallsPerSecond))
report("renewal_calls_per_charge", format(callsPerCharge))
report("renewal_charges_placed", burst.chargesPlaced)
report("renewal_charges_captured", burst.chargesCaptured)
report("renewal_last_charge_done_s", format(burst.lastChargeDone ?? .nan))
report("renewal_allowed_s", format(allowed))
report("renewal_done_ratio", format((burst.lastChargeDone ?? .nan) / allowed))
report("renewal_429s", alone.limited + burst.limited)
report("renewal_simulated_s", "\(Int(alone.simulatedSeconds)) + \(Int(burst.simulatedSeconds))")
report("renewal_real_s", "\(format(alone.realSeconds)) + \(format(burst.realSeconds))")
