import ArgumentParser
import Foundation
import HTTPServer
import KlarnaAPI
import KlarnaSandbox
import Logging
import ReconcilerCore

struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Starts the Klarna sandbox and walks payments through it with the real client, printing each step."
    )

    @Flag(name: .long, help: "Also print the client's own log lines (request ids, durations, correlation ids).")
    var verbose = false

    func run() async throws {
        var logger = Logger(label: "klarna-reconciler.demo")
        logger.logLevel = verbose ? .debug : .warning
        let sandbox = KlarnaSandbox()
        let server = try await HTTPServer.bind(.tcp(host: "127.0.0.1", port: 0), logger: logger) { await sandbox.handle($0) }
        let serving = Task { try await server.run() }
        defer { serving.cancel() }

        let baseURL = "http://127.0.0.1:\(server.port!)"
        let transport = CurlTransport(configuration: .init(
            connectTimeout: .seconds(2), requestTimeout: .seconds(2),
            userAgent: KlarnaClient.userAgent(libcurl: CurlTransport.libcurlVersion)))
        let client = KlarnaClient(
            configuration: KlarnaConfiguration(
                baseURL: baseURL, credentials: BasicCredentials(username: "sandbox-merchant", password: "sandbox-secret")),
            transport: transport, logger: logger)
        let retrier = Retrier(
            policy: RetryPolicy(initialDelay: .milliseconds(100), maxDelay: .seconds(2), maxAttempts: 6, deadline: .seconds(20)),
            clock: SystemClock(), random: SystemRandomSource(),
            rateLimiter: RateLimiter(ratePerSecond: 50, burst: 10, clock: SystemClock()))
        let script = DemoScript(sandbox: sandbox, client: client, retrier: retrier)

        print("klarna-reconciler \(ProductInfo.version) demo: Klarna sandbox on \(baseURL), client over \(CurlTransport.libcurlVersion.split(separator: " ").first ?? "libcurl")")
        try await script.run()
        transport.shutdown()
    }
}

/// The scripted flow. Each step says what the merchant's side does and shows what Klarna answered.
struct DemoScript {
    let sandbox: KlarnaSandbox
    let client: KlarnaClient
    let retrier: Retrier

    func run() async throws {
        let lines = [
            SandboxOrderLine(name: "Running shoes", quantity: 1, unitPrice: 19_900, totalAmount: 19_900, taxRate: 1_900, totalTaxAmount: 3_177),
            SandboxOrderLine(name: "Socks (3 pack)", quantity: 1, unitPrice: 5_000, totalAmount: 5_000, taxRate: 1_900, totalTaxAmount: 798),
        ]
        step(1, "The shop creates a payment: a KP session and an HPP session in front of it")
        let created = try sandbox.createSession(SessionSpec(
            orderTaxAmount: 3_975, purchaseCurrency: "EUR", purchaseCountry: "DE", locale: "de-DE", orderLines: lines,
            merchantReference: "shop-order-1001", schedule: [
                ScheduleStep(afterSeconds: 0.3, status: "IN_PROGRESS"), ScheduleStep(afterSeconds: 0.9, status: "COMPLETED"),
            ]))
        detail("kp_session_id  \(created.kpSessionId)")
        detail("hpp_session_id \(created.hppSessionId) (expires \(KlarnaJSON.formatDate(created.expiresAt)))")

        step(2, "Poll the HPP session until Klarna says it is final")
        var seen: [HPPSessionStatus] = []
        var hpp = try await client.readHPPSession(id: created.hppSessionId)
        while !hpp.status.isFinal {
            if seen.last != hpp.status { seen.append(hpp.status) }
            try await Task.sleep(for: .milliseconds(100))
            hpp = try await client.readHPPSession(id: created.hppSessionId)
        }
        seen.append(hpp.status)
        let token = try required(hpp.authorizationToken, "authorization token")
        detail(seen.map(\.rawValue).joined(separator: " → ") + "  authorization token …\(token.suffix(6)) (valid 60 minutes)")

        step(3, "Read what the consumer authorized and place the order with the token")
        let session = try await client.readPaymentSession(id: created.kpSessionId)
        detail("\(money(session.orderAmount, session.purchaseCurrency)), \(session.orderLines.count) lines, KP session \(session.status)")
        let placed = try await client.createOrder(authorizationToken: token, order: CreateOrderRequest(session: session))
        detail("order \(placed.orderID), fraud_status \(placed.fraudStatus)")
        detail("KP session is now \(try await client.readPaymentSession(id: created.kpSessionId).status)")

        step(4, "Capture the full amount; Klarna does it but the answer is lost on the way back")
        sandbox.addFault(SandboxFault(route: "om.create_capture", kind: .reset, afterEffect: true))
        let key = UUID().uuidString.lowercased()
        let capture = CaptureRequest(capturedAmount: session.orderAmount, reference: "shop-order-1001")
        let captured = try await retrier.run(onRetry: { retry in
            detail("attempt \(retry.attempt) failed (\(short(retry.error))); retrying in \(millis(retry.delay)) with the same Klarna-Idempotency-Key")
        }) { _ in
            try await client.createCapture(orderID: placed.orderID, request: capture, idempotencyKey: key)
        }
        detail("201 Created, Capture-Id \(captured.captureID)")
        let captures = sandbox.effects(kind: .captured).filter { $0.orderId == placed.orderID }
        detail("Klarna's ledger: \(captures.count) capture of \(money(captures.first?.amount ?? 0, "EUR")) (the retry was answered from the idempotency store)")

        step(5, "Klarna has an outage while we read the order: 503, 503, then 429 with rate-limit headers")
        sandbox.addFault(SandboxFault(route: "om.read_order", kind: .status, status: 503, count: 2))
        sandbox.addFault(SandboxFault(route: "om.read_order", kind: .rateLimit, resetSeconds: 1))
        let order = try await retrier.run(onRetry: { retry in
            detail("attempt \(retry.attempt): \(short(retry.error)); next try in \(millis(retry.delay))")
        }) { _ in try await client.readOrder(id: placed.orderID) }
        detail("order \(order.status), captured \(money(order.capturedAmount, "EUR")), remaining \(money(order.remainingAuthorizedAmount, "EUR"))")

        step(6, "A second payment comes back with fraud_status PENDING: it must not be captured yet")
        let pending = try sandbox.createSession(SessionSpec(orderAmount: 4_500, purchaseCurrency: "EUR", purchaseCountry: "DE", fraudStatus: "PENDING"))
        try sandbox.setHPPStatus(pending.hppSessionId, "COMPLETED")
        let pendingToken = try required(try await client.readHPPSession(id: pending.hppSessionId).authorizationToken, "authorization token")
        let pendingSession = try await client.readPaymentSession(id: pending.kpSessionId)
        let pendingOrder = try await client.createOrder(authorizationToken: pendingToken, order: CreateOrderRequest(session: pendingSession))
        detail("order \(pendingOrder.orderID), fraud_status \(pendingOrder.fraudStatus)")
        do {
            _ = try await client.createCapture(orderID: pendingOrder.orderID, request: CaptureRequest(capturedAmount: 4_500), idempotencyKey: UUID().uuidString)
            detail("UNEXPECTED: Klarna captured a pending order")
        } catch let error as KlarnaAPIError {
            detail("capture refused: HTTP \(error.status ?? 0) \(error.errorCode ?? "") — not retryable: \(error.retryDisposition == .doNotRetry)")
        }
        try sandbox.setFraudStatus(orderID: pendingOrder.orderID, "ACCEPTED")
        detail("Klarna accepts after review: fraud_status \(try await client.readOrder(id: pendingOrder.orderID).fraudStatus)")

        step(7, "A third consumer authorizes but the shop cannot deliver: release the authorization")
        let (released, releasedToken) = try await authorized(amount: 1_999)
        try await client.cancelAuthorization(authorizationToken: releasedToken)
        detail("authorization for KP session \(released.kpSessionId) released (204)")
        do {
            _ = try await client.createOrder(authorizationToken: releasedToken, order: CreateOrderRequest(session: try await client.readPaymentSession(id: released.kpSessionId)))
        } catch let error as KlarnaAPIError {
            detail("placing an order with it now: HTTP \(error.status ?? 0) \(error.errorMessages.joined())")
        }

        step(8, "What Klarna saw")
        let requests = sandbox.requests()
        let byRoute = Dictionary(grouping: requests, by: \.route).sorted { $0.key < $1.key }
        for (route, entries) in byRoute {
            let faults = entries.compactMap(\.fault).count
            let replays = entries.filter(\.replayed).count
            detail("\(route.padding(toLength: 28, withPad: " ", startingAt: 0)) \(entries.count) request\(entries.count == 1 ? "" : "s")" +
                (faults > 0 ? ", \(faults) with injected faults" : "") + (replays > 0 ? ", \(replays) idempotent replay" : ""))
        }
        let effects = sandbox.effects()
        detail("side effects: " + Dictionary(grouping: effects, by: \.kind).map { "\($0.value.count) \($0.key.rawValue)" }.sorted().joined(separator: ", "))
        let doubled = Dictionary(grouping: effects.filter { $0.kind == .captured || $0.kind == .orderPlaced }) { "\($0.kind) \($0.orderId ?? "")" }
            .filter { $0.value.count > 1 }
        guard doubled.isEmpty else {
            throw DemoFailure(description: "a side effect happened twice: \(doubled.keys.sorted().joined(separator: ", "))")
        }
        print("\nDone: every call went over real HTTP through libcurl; no order was placed or captured twice.")
    }

    private func authorized(amount: Int) async throws -> (CreatedSession, String) {
        let created = try sandbox.createSession(SessionSpec(orderAmount: amount, purchaseCurrency: "EUR", purchaseCountry: "DE"))
        try sandbox.setHPPStatus(created.hppSessionId, "COMPLETED")
        let token = try required(try await client.readHPPSession(id: created.hppSessionId).authorizationToken, "authorization token")
        return (created, token)
    }

    private func required<T>(_ value: T?, _ what: String) throws -> T {
        guard let value else { throw DemoFailure(description: "Klarna sandbox returned no \(what)") }
        return value
    }
}

struct DemoFailure: Error, CustomStringConvertible {
    let description: String
}

private func step(_ number: Int, _ text: String) { print("\n\(number). \(text)") }
private func detail(_ text: String) { print("   \(text)") }
private func millis(_ duration: Duration) -> String { "\(Int(duration.timeInterval * 1_000)) ms" }

private func money(_ minorUnits: Int, _ currency: String) -> String {
    String(format: "%d.%02d %@", minorUnits / 100, minorUnits % 100, currency)
}

private func short(_ error: any Error) -> String {
    guard let error = error as? KlarnaAPIError else { return "\(error)" }
    switch error.failure {
    case .http(let status): return "HTTP \(status) \(error.errorCode ?? "")" + (error.rateLimit.hint.map { ", reset in \(Int($0.timeInterval)) s" } ?? "")
    case .transport(let transport): return "\(transport.kind)"
    case .undecodableResponse(let status, _): return "unreadable HTTP \(status)"
    }
}
