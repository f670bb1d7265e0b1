import Foundation
import HTTPServer
import KlarnaAPI
import KlarnaSandbox
import Logging
import Testing
import TestSupport
@testable import Engine
@testable import ReconcilerCore
import PostgresBackend
import ReconcilerStore
@testable import SQLiteBackend

/// The stores the engine's tests run against: a real SQLite file, or a database of its own on the tests' real
/// PostgreSQL server (``PostgresServer``).
enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite, postgres

    var testDescription: String { rawValue }
}

/// The engine against the sandbox over a real loopback socket, with a real store (SQLite by default), on one manual
/// clock shared by both sides: 61 minutes pass in a call, and nothing sleeps.
struct EngineHarness {
    let sandbox: KlarnaSandbox
    let store: any ReconcilerStore
    /// Another store of the same kind, empty: another daemon's.
    let openEmptyStore: @Sendable () async throws -> any ReconcilerStore
    let reconciler: Reconciler
    /// The default account's client: the sandbox merchant's credentials.
    var client: KlarnaClient { reconciler.accounts.all[0].client }
    let clock: ManualClock
    let directory: TemporaryDirectory
    let logs: LogLines

    /// - Parameter wrapStore: puts a fault-injecting double between the engine and the real store.
    /// - Parameter requestTimeout: generous by default (a loaded machine runs the in-process sandbox late); the
    ///   timeout tests pass their own.
    /// - Parameter wrapTransport: puts a fault-injecting double between the client and libcurl.
    static func with<T: Sendable>(
        store kind: StoreKind = .sqlite, settings: EngineSettings = EngineHarness.fastSettings, requestTimeout: Duration = .seconds(10),
        wrapStore: (any ReconcilerStore) -> any WorkStore = { $0 },
        wrapTransport: (CurlTransport) -> any HTTPTransport = { $0 },
        _ body: (EngineHarness) async throws -> T
    ) async throws -> T {
        let clock = ManualClock(now: Date())
        let sandbox = KlarnaSandbox(configuration: .init(username: "merchant", password: "secret", clock: clock, random: SeededRandomSource(seed: 7)))
        let server = try await HTTPServer.bind(.tcp(host: "127.0.0.1", port: 0), logger: Logger(label: "test.sandbox")) { await sandbox.handle($0) }
        let serving = Task { try await server.run() }
        defer { serving.cancel() }
        let transport = CurlTransport(configuration: .init(connectTimeout: .seconds(2), requestTimeout: requestTimeout))
        defer { transport.shutdown() }
        let logs = LogLines()
        let client = KlarnaClient(
            configuration: KlarnaConfiguration(
                baseURL: "http://127.0.0.1:\(server.port!)", credentials: BasicCredentials(username: "merchant", password: "secret")),
            transport: wrapTransport(transport), logger: logs.logger())
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let stores = OpenedStores(kind: kind, directory: directory.path)
        defer { stores.closeAll() }
        let store = try await stores.openEmpty()
        let reconciler = Reconciler(
            store: wrapStore(store), accounts: KlarnaAccounts(client: client, rateLimiter: nil), clock: clock, random: SeededRandomSource(seed: 11),
            settings: settings, logger: logs.logger())
        return try await body(
            EngineHarness(
                sandbox: sandbox, store: store, openEmptyStore: { try await stores.openEmpty() }, reconciler: reconciler, clock: clock,
                directory: directory, logs: logs))
    }

    /// ``with(store:settings:requestTimeout:wrapStore:wrapTransport:_:)`` with the engine's store behind a
    /// ``FaultyStore``, which `body` gets too: what the engine read, and the faults to turn on. `stepInputsFromStore`:
    /// a step's inputs as the real store reads them.
    static func withFaultyStore<T: Sendable>(
        store kind: StoreKind = .sqlite, stepInputsFromStore: Bool = false, _ body: (EngineHarness, FaultyStore) async throws -> T
    ) async throws -> T {
        var faulty: FaultyStore?
        return try await with(
            store: kind,
            wrapStore: { store in
                let wrapped = FaultyStore(store, stepInputsFromStore: stepInputsFromStore)
                faulty = wrapped
                return wrapped
            }
        ) { h in try await body(h, try #require(faulty)) }
    }

    static let fastSettings = EngineSettings(
        polling: PollingSchedule(denseInterval: .seconds(2), denseWindow: .seconds(600), maxInterval: .seconds(300), expiryGrace: .seconds(600)),
        deadlines: Deadlines(
            authorizationWarnBefore: .seconds(3 * 86_400), autoExtendAuthorization: false, pendingFraudInterval: .seconds(60),
            orderRecheckInterval: .seconds(6 * 3_600)),
        readRetry: RetryPolicy(initialDelay: .seconds(1), maxDelay: .seconds(60), maxAttempts: .max),
        writeRetry: RetryPolicy(initialDelay: .seconds(1), maxDelay: .seconds(60), maxAttempts: 25),
        maxConcurrency: 4)

    /// Creates a payment in the sandbox and tracks it.
    @discardableResult
    func track(
        _ spec: SessionSpec = SessionSpec(orderAmount: 10_000), mode: ReconcilerCore.PlaceOrderMode? = ReconcilerCore.PlaceOrderMode.none,
        capture: CapturePolicy = .immediate, purpose: PaymentPurpose = .buy
    ) async throws -> CreatedSession {
        var spec = spec
        spec.placeOrderMode = spec.placeOrderMode ?? mode?.rawValue
        spec.intent = spec.intent ?? purpose.rawValue
        let created = try sandbox.createSession(spec)
        let session = TrackedSession(
            hppSessionID: created.hppSessionId, kpSessionID: created.kpSessionId, mode: mode,
            merchantReference: spec.merchantReference, capturePolicy: capture, purpose: purpose, trackedAt: clock.now)
        _ = try await store.track(session, event: DomainEvent(.tracked, "test"), at: clock.now)
        return created
    }

    /// Lets `horizon` pass: works every due key, moving the clock to each next due time, and leaves the clock at the
    /// end of the horizon. Returns how many steps ran.
    @discardableResult
    func run(for horizon: Duration = .seconds(3_600), maxSteps: Int = 2_000) async throws -> Int {
        let end = clock.now.addingTimeInterval(horizon.timeInterval)
        var steps = 0
        while steps < maxSteps {
            let work = try await store.openWork()
            let due = work.filter { $0.due <= clock.now }
            if due.isEmpty {
                guard let next = work.map(\.due).min(), next <= end else {
                    if end > clock.now { clock.advance(by: Duration(timeInterval: end.timeIntervalSince(clock.now))) }
                    break
                }
                clock.advance(by: Duration(timeInterval: next.timeIntervalSince(clock.now)))
                continue
            }
            for item in due.sorted(by: { $0.due < $1.due }) {
                _ = try await reconciler.process(item.key)
                steps += 1
            }
        }
        // Hitting the limit means some key keeps coming back at the same instant: a scheduling bug.
        #expect(steps < maxSteps, "the engine did not settle in \(maxSteps) steps")
        return steps
    }

    func session(_ created: CreatedSession) async throws -> TrackedSession {
        try #require(try await store.session(created.hppSessionId))
    }

    func order(of created: CreatedSession) async throws -> TrackedOrder {
        let orderID = try #require(try await session(created).orderID)
        return try #require(try await store.order(orderID))
    }

    func outcomes(_ created: CreatedSession) async throws -> [OutcomeKind] {
        try await store.timeline(for: created.hppSessionId).outcomes.map(\.outcome.kind)
    }

    func effects(_ kind: SandboxEffect.Kind, kp: String? = nil, order: String? = nil) -> [SandboxEffect] {
        sandbox.effects(kind: kind).filter { (kp == nil || $0.kpSessionId == kp) && (order == nil || $0.orderId == order) }
    }

    /// The invariant every test ends with: no KP session got two orders, no order more captures than allowed, no
    /// session two customer tokens.
    func expectNoDoubleEffects(capturesPerOrder: Int = 1, sourceLocation: SourceLocation = #_sourceLocation) {
        let orders = Dictionary(grouping: sandbox.effects(kind: .orderPlaced), by: { $0.kpSessionId ?? "" })
        #expect(orders.values.allSatisfy { $0.count == 1 }, "an order was placed twice for a KP session", sourceLocation: sourceLocation)
        let captures = Dictionary(grouping: sandbox.effects(kind: .captured), by: { $0.orderId ?? "" })
        #expect(
            captures.values.allSatisfy { $0.count <= capturesPerOrder }, "an order was captured too often: \(captures.mapValues(\.count))",
            sourceLocation: sourceLocation)
        let tokens = Dictionary(grouping: sandbox.effects(kind: .customerTokenCreated), by: { $0.kpSessionId ?? "" })
        #expect(tokens.values.allSatisfy { $0.count == 1 }, "two customer tokens for one session", sourceLocation: sourceLocation)
    }
}

/// The stores a harness opened, each new and empty, closed when it ends.
private final class OpenedStores: @unchecked Sendable {
    private let kind: StoreKind
    private let directory: String
    private let lock = NSLock()
    private var postgres: [PostgresStore] = []
    private var files = 0

    init(kind: StoreKind, directory: String) {
        self.kind = kind
        self.directory = directory
    }

    func openEmpty() async throws -> any ReconcilerStore {
        switch kind {
        case .sqlite:
            let name = lock.withLock {
                files += 1
                return files == 1 ? "state.sqlite" : "state-\(files).sqlite"
            }
            return try SQLiteStore(path: directory + "/" + name)
        case .postgres:
            let server = try await PostgresServer.shared()
            let location = try PostgresLocation(url: server.url(try await server.createDatabase()))
            let store = try await PostgresStore.open(location, password: server.password, logger: Logger(label: "test.postgres"))
            lock.withLock { postgres.append(store) }
            return store
        }
    }

    func closeAll() { lock.withLock { postgres.forEach { $0.close() } } }
}
