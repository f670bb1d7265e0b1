import Testing
import Foundation
import HTTPServer
import KlarnaAPI
import KlarnaSandbox
import Logging
import ReconcilerCore
import Synchronization
import TestSupport

/// A sandbox served over a real loopback socket and a real libcurl client pointed at it.
struct SandboxHarness {
    let sandbox: KlarnaSandbox
    let baseURL: String
    let transport: CurlTransport
    let client: KlarnaClient
    let logs: LogLines

    static let credentials = BasicCredentials(username: "sandbox-merchant", password: "s3cret-Pa55word")

    /// Runs `body` with a fresh sandbox and client; the server stops when `body` returns.
    static func with<T: Sendable>(
        clock: any WallClock = AdjustableClock(),
        credentials: BasicCredentials = credentials,
        requestTimeout: Duration = .seconds(30),
        _ body: (SandboxHarness) async throws -> T
    ) async throws -> T {
        let sandbox = KlarnaSandbox(
            configuration: .init(
                username: Self.credentials.username, password: Self.credentials.password, clock: clock))
        let server = try await HTTPServer.bind(
            .tcp(host: "127.0.0.1", port: 0), configuration: KlarnaSandbox.serverConfiguration, logger: Logger(label: "test.sandbox")
        ) {
            await sandbox.handle($0)
        }
        let serving = Task { try await server.run() }
        defer { serving.cancel() }
        let baseURL = "http://127.0.0.1:\(server.port!)"
        let transport = CurlTransport(
            configuration: .init(
                connectTimeout: .seconds(2), requestTimeout: requestTimeout, userAgent: KlarnaClient.userAgent(libcurl: CurlTransport.libcurlVersion))
        )
        let logs = LogLines()
        let client = KlarnaClient(
            configuration: KlarnaConfiguration(baseURL: baseURL, credentials: credentials), transport: transport,
            logger: logs.logger())
        return try await body(SandboxHarness(sandbox: sandbox, baseURL: baseURL, transport: transport, client: client, logs: logs))
    }

    /// Runs `body` with a second client of the same sandbox that gives up after `timeout`: for the one call a test
    /// delays on purpose. The harness's own client is patient (30 s), since on loaded cores an in-process sandbox may
    /// answer late without anything being wrong.
    func withImpatientClient<T>(timeout: Duration, _ body: (KlarnaClient) async throws -> T) async throws -> T {
        let transport = CurlTransport(configuration: .init(connectTimeout: .seconds(2), requestTimeout: timeout))
        defer { transport.shutdown() }
        return try await body(
            KlarnaClient(
                configuration: KlarnaConfiguration(baseURL: baseURL, credentials: Self.credentials), transport: transport, logger: logs.logger()))
    }

    /// A completed HPP session in the default mode: the consumer authorized, the token is waiting to be used.
    func authorizedSession(_ spec: SessionSpec = SessionSpec(orderAmount: 20_000)) async throws -> (CreatedSession, String) {
        let created = try sandbox.createSession(spec)
        try sandbox.setHPPStatus(created.hppSessionId, "COMPLETED")
        let hpp = try await client.readHPPSession(id: created.hppSessionId)
        return (created, try #require(hpp.authorizationToken))
    }

    /// A placed order with `fraud` status.
    func placedOrder(amount: Int = 20_000, fraud: String = "ACCEPTED") async throws -> String {
        let (created, token) = try await authorizedSession(SessionSpec(orderAmount: amount, fraudStatus: fraud))
        let session = try await client.readPaymentSession(id: created.kpSessionId)
        return try await client.createOrder(authorizationToken: token, order: CreateOrderRequest(session: session)).orderID
    }
}
