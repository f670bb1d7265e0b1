import Foundation
import KlarnaAPI
import KlarnaSandbox
import ReconcilerCore
import Testing
import TestSupport

/// Each failure class over real sockets: what the error carries and whether it may be retried.
@Suite struct FailureTests {
    @Test func serverErrorCarriesKlarnasWordsAndIsRetryableOnlyWhereRepeatingIsSafe() async throws {
        try await SandboxHarness.with { h in
            let (created, token) = try await h.authorizedSession()
            let session = try await h.client.readPaymentSession(id: created.kpSessionId)
            h.sandbox.addFault(SandboxFault(route: "*", kind: .status, status: 503, count: 2))

            let read = await #expect(throws: KlarnaAPIError.self) { try await h.client.readHPPSession(id: created.hppSessionId) }
            #expect(read?.status == 503)
            #expect(read?.errorCode == "TEMPORARILY_UNAVAILABLE")
            #expect(read?.errorMessages == ["Injected fault"])
            #expect(read?.correlationID != nil && read?.correlationIDHeader != nil)
            #expect(read?.retryDisposition == .retry(notBefore: nil))
            #expect(read?.outcomeUnknown == false)

            // A 5xx on create-order may have placed the order: unsafe to repeat blindly.
            let place = await #expect(throws: KlarnaAPIError.self) {
                try await h.client.createOrder(authorizationToken: token, order: CreateOrderRequest(session: session))
            }
            #expect(place?.status == 503)
            #expect(place?.retryDisposition == .doNotRetry)
            #expect(place?.outcomeUnknown == true)
        }
    }

    @Test func rateLimitCarriesTheHeadersAndSaysWhenToComeBack() async throws {
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder()
            h.sandbox.addFault(SandboxFault(route: "om.create_capture", kind: .rateLimit, resetSeconds: 2, retryAfterSeconds: 3))
            let error = await #expect(throws: KlarnaAPIError.self) {
                try await h.client.createCapture(orderID: orderID, request: CaptureRequest(capturedAmount: 100), idempotencyKey: "k")
            }
            #expect(error?.status == 429)
            #expect(error?.errorCode == "TOO_MANY_REQUESTS")
            #expect(error?.rateLimit.limit == "50, 50;w=1")
            #expect(error?.rateLimit.remaining == 0)
            #expect(error?.rateLimit.reset == .seconds(2))
            #expect(error?.rateLimit.retryAfter == .seconds(3))
            #expect(error?.retryDisposition == .retry(notBefore: .seconds(3)))
            #expect(h.sandbox.effects(kind: .captured).isEmpty)
        }
    }

    @Test func rateLimitWithoutRetryAfterFallsBackToTheReset() async throws {
        try await SandboxHarness.with { h in
            let (created, token) = try await h.authorizedSession()
            let session = try await h.client.readPaymentSession(id: created.kpSessionId)
            h.sandbox.addFault(SandboxFault(route: "kp.create_order", kind: .rateLimit, resetSeconds: 4))
            let error = await #expect(throws: KlarnaAPIError.self) {
                try await h.client.createOrder(authorizationToken: token, order: CreateOrderRequest(session: session))
            }
            // Even the unsafe create-order may be retried after a 429: Klarna refused it before doing anything.
            #expect(error?.retryDisposition == .retry(notBefore: .seconds(4)))
            #expect(error?.outcomeUnknown == false)
        }
    }

    @Test func timeoutIsReportedAsSentAndAmbiguousForWrites() async throws {
        // The setup runs on the harness's patient client (a short timeout once cut off its own HPP read on loaded
        // cores); only the two delayed calls run on a client that gives up after 4 s.
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder()
            try await h.withImpatientClient(timeout: .seconds(4)) { impatient in
                h.sandbox.addFault(SandboxFault(route: "om.read_order", kind: .delay, delayMs: 10_000))
                let read = await #expect(throws: KlarnaAPIError.self) { try await impatient.readOrder(id: orderID) }
                guard case .transport(let transport)? = read?.failure else { Issue.record("expected a transport failure"); return }
                #expect(transport.kind == .timeout)
                #expect(transport.requestMayHaveBeenSent)
                #expect(read?.retryDisposition == .retry(notBefore: nil))

                h.sandbox.addFault(SandboxFault(route: "om.cancel_order", kind: .delay, delayMs: 10_000))
                let cancel = await #expect(throws: KlarnaAPIError.self) { try await impatient.cancelOrder(orderID: orderID, idempotencyKey: "t") }
                #expect(cancel?.outcomeUnknown == true)
                #expect(cancel?.retryDisposition == .retry(notBefore: nil))
            }
        }
    }

    @Test func connectionResetIsATransportFailure() async throws {
        try await SandboxHarness.with { h in
            let created = try h.sandbox.createSession()
            h.sandbox.addFault(SandboxFault(route: "hpp.read_session", kind: .reset))
            let error = await #expect(throws: KlarnaAPIError.self) { try await h.client.readHPPSession(id: created.hppSessionId) }
            guard case .transport(let transport)? = error?.failure else { Issue.record("expected a transport failure"); return }
            #expect(transport.kind == .connectionReset)
            #expect(error?.retryDisposition == .retry(notBefore: nil))
            // The next call works on a fresh connection.
            #expect(try await h.client.readHPPSession(id: created.hppSessionId).status == .waiting)
            #expect(h.sandbox.requests(route: "hpp.read_session").map(\.status) == [nil, 200])
        }
    }

    @Test func resetAfterTheEffectLeavesTheOutcomeUnknown() async throws {
        try await SandboxHarness.with { h in
            let (created, token) = try await h.authorizedSession()
            let session = try await h.client.readPaymentSession(id: created.kpSessionId)
            h.sandbox.addFault(SandboxFault(route: "kp.create_order", kind: .reset, afterEffect: true))
            let error = await #expect(throws: KlarnaAPIError.self) {
                try await h.client.createOrder(authorizationToken: token, order: CreateOrderRequest(session: session))
            }
            #expect(error?.outcomeUnknown == true)
            #expect(error?.retryDisposition == .doNotRetry)
            // The order exists although the answer was lost; reading the KP session tells.
            #expect(h.sandbox.effects(kind: .orderPlaced).count == 1)
            #expect(try await h.client.readPaymentSession(id: created.kpSessionId).status == .complete)
        }
    }

    @Test func malformedJSONIsAnUndecodableResponse() async throws {
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder()
            h.sandbox.addFault(SandboxFault(route: "om.read_order", kind: .malformed))
            let error = await #expect(throws: KlarnaAPIError.self) { try await h.client.readOrder(id: orderID) }
            guard case .undecodableResponse(let status, let detail)? = error?.failure else { Issue.record("expected undecodable"); return }
            #expect(status == 200)
            #expect(detail == "not JSON")
            #expect(error?.retryDisposition == .retry(notBefore: nil))
            #expect(error?.correlationIDHeader != nil)
        }
    }

    @Test func wrongCredentialsGive401AndThePasswordAppearsNowhere() async throws {
        let wrong = BasicCredentials(username: "sandbox-merchant", password: "not-the-Pa55word-xyz")
        try await SandboxHarness.with(credentials: wrong) { h in
            let created = try h.sandbox.createSession()
            let error = await #expect(throws: KlarnaAPIError.self) { try await h.client.readHPPSession(id: created.hppSessionId) }
            #expect(error?.status == 401)
            #expect(error?.retryDisposition == .doNotRetry)
            let everything = "\(error!) \(String(reflecting: error!)) \(h.client.configuration) \(wrong) " + h.logs.all.joined()
            #expect(!everything.contains("not-the-Pa55word-xyz"))
            #expect(!h.logs.all.isEmpty)
        }
    }

    @Test func unknownResourcesGive404WithKlarnasErrorCode() async throws {
        try await SandboxHarness.with { h in
            let order = await #expect(throws: KlarnaAPIError.self) { try await h.client.readOrder(id: "no-such-order") }
            #expect(order?.status == 404)
            #expect(order?.errorCode == "NO_SUCH_ORDER")
            let hpp = await #expect(throws: KlarnaAPIError.self) { try await h.client.readHPPSession(id: "no-such-session") }
            #expect(hpp?.errorMessages == ["HPP session has expired or could not be found by provided id."])
            #expect(hpp?.retryDisposition == .doNotRetry)
        }
    }

    @Test func orderDataNotMatchingTheSessionGives409() async throws {
        try await SandboxHarness.with { h in
            let (created, token) = try await h.authorizedSession()
            var order = try CreateOrderRequest(session: try await h.client.readPaymentSession(id: created.kpSessionId))
            order.orderAmount += 1
            let error = await #expect(throws: KlarnaAPIError.self) { try await h.client.createOrder(authorizationToken: token, order: order) }
            #expect(error?.status == 409)
            #expect(error?.errorCode == "BAD_VALUE")
            #expect(error?.errorMessages.first?.contains("order_amount") == true)
            #expect(error?.retryDisposition == .doNotRetry)
            #expect(h.sandbox.effects(kind: .orderPlaced).isEmpty)
        }
    }

    @Test func anExpiredAuthorizationTokenCannotPlaceAnOrder() async throws {
        let clock = ManualClock()
        try await SandboxHarness.with(clock: clock) { h in
            let (created, token) = try await h.authorizedSession()
            let session = try await h.client.readPaymentSession(id: created.kpSessionId)
            clock.advance(by: .seconds(61 * 60))
            let error = await #expect(throws: KlarnaAPIError.self) {
                try await h.client.createOrder(authorizationToken: token, order: CreateOrderRequest(session: session))
            }
            #expect(error?.status == 404)
            #expect(error?.errorMessages == ["Invalid authorization token"])
        }
    }

    @Test func hppSessionIsGoneAfterItsExpiry() async throws {
        let clock = ManualClock()
        try await SandboxHarness.with(clock: clock) { h in
            let created = try h.sandbox.createSession()
            clock.advance(by: .seconds(47 * 3_600))
            let error = await #expect(throws: KlarnaAPIError.self) { try await h.client.readHPPSession(id: created.hppSessionId) }
            #expect(error?.status == 404)
        }
    }

    @Test func refusedConnectionIsSafeToRetryEvenForUnsafeCalls() async throws {
        let refusing = try RefusingPort()
        defer { withExtendedLifetime(refusing) {} }
        let client = KlarnaClient(
            configuration: KlarnaConfiguration(baseURL: "http://127.0.0.1:\(refusing.port)", credentials: SandboxHarness.credentials),
            transport: CurlTransport(), logger: LogLines().logger())
        let error = await #expect(throws: KlarnaAPIError.self) {
            try await client.createOrder(
                authorizationToken: "t", order: CreateOrderRequest(purchaseCountry: "SE", purchaseCurrency: "SEK", orderAmount: 1, orderLines: []))
        }
        guard case .transport(let transport)? = error?.failure else { Issue.record("expected a transport failure"); return }
        #expect(transport.kind == .connectFailed)
        #expect(!transport.requestMayHaveBeenSent)
        #expect(error?.outcomeUnknown == false)
        #expect(error?.retryDisposition == .retry(notBefore: nil))
    }

    @Test func anEmptyIdFailsLocallyAsAKlarnaAPIError() async throws {
        try await SandboxHarness.with { h in
            let error = await #expect(throws: KlarnaAPIError.self) { try await h.client.readOrder(id: "") }
            guard case .transport(let transport)? = error?.failure else { Issue.record("expected a transport failure"); return }
            #expect(transport.kind == .invalidRequest)
            #expect(error?.retryDisposition == .doNotRetry)
            await #expect(throws: KlarnaAPIError.self) {
                try await h.client.createCapture(orderID: "", request: CaptureRequest(capturedAmount: 1), idempotencyKey: "k")
            }
            #expect(h.sandbox.requests().isEmpty)
        }
    }

    @Test func anOversizedResponseIsCutOffAndNotRetried() async throws {
        try await SandboxHarness.with { h in
            let orderID = try await h.placedOrder()
            let small = KlarnaClient(
                configuration: h.client.configuration,
                transport: CurlTransport(configuration: .init(maxResponseBytes: 64)), logger: h.logs.logger())
            let error = await #expect(throws: KlarnaAPIError.self) { try await small.readOrder(id: orderID) }
            guard case .transport(let transport)? = error?.failure else { Issue.record("expected a transport failure"); return }
            #expect(transport.kind == .responseTooLarge)
            #expect(error?.retryDisposition == .doNotRetry)
        }
    }

    @Test func aCancelledCallerSendsNothing() async throws {
        try await SandboxHarness.with { h in
            let created = try h.sandbox.createSession()
            let client = h.client
            let result = await Task { () async throws -> HPPSession in
                withUnsafeCurrentTask { $0?.cancel() }
                return try await client.readHPPSession(id: created.hppSessionId)
            }.result
            #expect(throws: CancellationError.self) { try result.get() }
            #expect(h.sandbox.requests().isEmpty)
        }
    }

    @Test func cancellingACallInFlightEndsItAtOnce() async throws {
        try await SandboxHarness.with { h in
            let created = try h.sandbox.createSession()
            // The answer would take 10 s; a cancelled call must end long before (5 s leaves room for loaded CI cores:
            // one full run here took 2.02 s).
            h.sandbox.addFault(SandboxFault(route: "hpp.read_session", kind: .delay, delayMs: 10_000))
            let client = h.client
            let call = Task { try await client.readHPPSession(id: created.hppSessionId) }
            try await waitUntil { !h.sandbox.requests().isEmpty }
            let cancelled = ContinuousClock.now
            call.cancel()
            await #expect(throws: CancellationError.self) { try await call.value }
            #expect(ContinuousClock.now - cancelled < .seconds(5))
            // The transport still works for the next caller.
            h.sandbox.clearFaults()
            #expect(try await client.readHPPSession(id: created.hppSessionId).status == .waiting)
        }
    }

    @Test func everyTransientFailureOfAReadIsClassifiedRetryableAndTheNextCallGetsThrough() async throws {
        try await SandboxHarness.with { h in
            let created = try h.sandbox.createSession()
            // Only the delayed read runs on a client that waits 1 s: on loaded CI cores the others, and the reads
            // that follow each fault, may take longer than that without anything being wrong.
            try await h.withImpatientClient(timeout: .seconds(1)) { impatient in
                let faults: [SandboxFault] = [
                    SandboxFault(route: "hpp.read_session", kind: .status, status: 502),
                    SandboxFault(route: "hpp.read_session", kind: .rateLimit, resetSeconds: 0),
                    SandboxFault(route: "hpp.read_session", kind: .delay, delayMs: 2_000),
                    SandboxFault(route: "hpp.read_session", kind: .malformed),
                    SandboxFault(route: "hpp.read_session", kind: .reset),
                ]
                for fault in faults {
                    h.sandbox.addFault(fault)
                    do {
                        _ = try await (fault.kind == .delay ? impatient : h.client).readHPPSession(id: created.hppSessionId)
                        // A GET whose reused connection is reset before any answer is re-sent by libcurl itself
                        // (harmless for a read), so a reset may not surface at all.
                        #expect(fault.kind == .reset, "\(fault.kind) did not surface")
                    } catch let error as KlarnaAPIError {
                        if case .retry = error.retryDisposition {} else { Issue.record("\(fault.kind) is not retryable: \(error)") }
                        #expect(!error.outcomeUnknown, "a read never has an unknown outcome")
                    }
                    #expect(try await h.client.readHPPSession(id: created.hppSessionId).status == .waiting)
                }
            }
        }
    }
}

#if canImport(Glibc)
    import Glibc
#endif

/// A loopback TCP port that refuses connections: bound (so no parallel test can take it) but never listening.
final class RefusingPort {
    let port: Int
    private let fd: Int32

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(fd, raw, length) == 0 && getsockname(fd, raw, &length) == 0
            }
        }
        guard fd >= 0, bound else {
            close(fd)
            throw SocketSetupFailed()
        }
        self.fd = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(fd) }
}

struct SocketSetupFailed: Error {}
