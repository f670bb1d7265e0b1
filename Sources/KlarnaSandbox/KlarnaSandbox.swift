import Foundation
import HTTPServer
import ReconcilerCore
import Synchronization

/// A Klarna API simulator: HPP, KP, OM, Settlements and Klarna Network endpoints with Klarna's shapes, status codes
/// and error bodies, Basic auth, `Klarna-Idempotency-Key` semantics where Klarna documents them, a control API under
/// `/_sandbox/` for tests (scenarios, clock, faults, payouts), and a log of every request and every side effect.
public final class KlarnaSandbox: Sendable {
    public struct Configuration: Sendable {
        /// The primary merchant's credentials; its merchant id is `K100001`.
        public var username: String
        public var password: String
        /// Merchants served beside the primary one, each with its own resources, payouts and rate limit.
        public var otherMerchants: [SandboxMerchant]
        public var clock: any WallClock
        public var random: any RandomSource
        /// What the dispute webhooks are signed with (``KlarnaSandbox/webhooks(after:)``).
        public var webhookSigningKey: SigningKey

        /// A webhook signing key: its id (`Klarna-Signing-Key-Id`) and its secret.
        public struct SigningKey: Sendable {
            public var id: String
            public var secret: String

            public init(id: String, secret: String) {
                self.id = id
                self.secret = secret
            }
        }

        public init(
            username: String = "sandbox-merchant", password: String = "sandbox-secret", otherMerchants: [SandboxMerchant] = [],
            clock: any WallClock = AdjustableClock(), random: any RandomSource = SystemRandomSource(),
            webhookSigningKey: SigningKey = SigningKey(id: "sandbox-signing-key-1", secret: "sandbox-webhook-secret")
        ) {
            self.username = username
            self.password = password
            self.otherMerchants = otherMerchants
            self.clock = clock
            self.random = random
            self.webhookSigningKey = webhookSigningKey
        }

        /// The primary merchant's id, which Klarna's webhooks and payouts name for it.
        public static let primaryMerchantID = SettlementLedger.merchantID

        /// Every merchant served, the primary one first.
        public var merchants: [SandboxMerchant] {
            [SandboxMerchant(id: SettlementLedger.merchantID, username: username, password: password)] + otherMerchants
        }

        /// Why these merchants cannot be served together: an id twice, or the same credentials twice (a request could
        /// not say whose it is); `nil` when they can.
        public var merchantConflict: String? {
            var ids: Set<String> = []
            var credentials: Set<String> = []
            for merchant in merchants {
                if !ids.insert(merchant.id).inserted { return "merchant id \(merchant.id) is given twice" }
                if !credentials.insert(Self.authorization(merchant)).inserted {
                    return "merchant \(merchant.id) has the same username and password as another merchant"
                }
            }
            return nil
        }

        /// The `Authorization` header of `merchant`'s calls.
        static func authorization(_ merchant: SandboxMerchant) -> String {
            "Basic " + Data("\(merchant.username):\(merchant.password)".utf8).base64EncodedString()
        }
    }

    /// Operations whose `Klarna-Idempotency-Key` Klarna honours (the OM spec declares it; KP and HPP do not).
    static let idempotentRoutes: Set<String> = [
        "om.create_capture", "om.create_refund", "om.extend_authorization_time", "om.cancel_order",
        "om.release_remaining_authorization", "ct.create_order",
    ]
    static let idempotencyWindow: TimeInterval = 24 * 3_600

    /// How to serve the sandbox: bodies up to 8 MiB, since Klarna takes dispute evidence files of up to 7 MB.
    public static let serverConfiguration = HTTPServer.Configuration(maxBodyBytes: 8 << 20)

    let configuration: Configuration
    let state = Mutex(SandboxState())
    /// Answers a `hold_answer` fault holds right now (a simulation on a manual clock waits for them to be parked before
    /// it moves the clock).
    let answersHeld = AtomicCount()

    /// How many answers a `hold_answer` fault holds right now.
    public var heldAnswerCount: Int { answersHeld.value }
    /// The merchant ids served, the primary one first.
    let merchantIDs: [String]
    /// Merchant id by the `Authorization` header its calls carry.
    private let merchantsByAuthorization: [String: String]

    /// Traps when ``Configuration/merchantConflict`` names a conflict.
    public init(configuration: Configuration = Configuration()) {
        if let conflict = configuration.merchantConflict { preconditionFailure(conflict) }
        self.configuration = configuration
        merchantIDs = configuration.merchants.map(\.id)
        merchantsByAuthorization = Dictionary(uniqueKeysWithValues: configuration.merchants.map { (Configuration.authorization($0), $0.id) })
    }

    var now: Date { configuration.clock.now }

    /// The ``RequestHandler`` to serve with ``HTTPServer``.
    public func handle(_ request: ServerRequest) async -> ServerReply {
        if request.path.hasPrefix("/_sandbox/") { return .response(control(request).serverResponse) }
        guard let route = KlarnaRoute(method: request.method, path: request.path) else {
            let known = KlarnaRoute.pathExists(request.path)
            return .response(
                SandboxResponse.klarnaError(
                    known ? 405 : 404, known ? "METHOD_NOT_ALLOWED" : "NOT_FOUND",
                    known ? "Method \(request.method) is not allowed here" : "No such resource"
                ).serverResponse)
        }
        let key = request.header("Klarna-Idempotency-Key")
        let merchant = request.header("Authorization").flatMap { merchantsByAuthorization[$0] }
        let arrived = now
        // KP create-order has no idempotency: one that meets an earlier one for the same token is counted.
        let createOrderToken = route.name == "kp.create_order" ? route.parameters.first ?? "" : nil
        let (seq, fault, admitted) = state.withLock { state -> (Int, SandboxFault?, Bool) in
            releaseHeldRequests(in: &state, now: arrived)
            if let createOrderToken { state.createOrderArrived(token: createOrderToken) }
            let seq = state.requests.count + 1
            state.requests.append(
                SandboxRequestRecord(
                    seq: seq, at: arrived, method: request.method, path: request.path, route: route.name,
                    idempotencyKey: key, status: nil, fault: nil, replayed: false, merchant: merchant,
                    body: route.name == "ct.create_order" ? String(decoding: request.body, as: UTF8.self) : nil))
            // Klarna limits each merchant on its own; a call that is no merchant's spends no one's budget.
            var admitted = true
            if let merchant, state.rateLimits[merchant] != nil {
                admitted = state.rateLimits[merchant]!.takeSpare(limit: 1, now: arrived) == 1
            }
            return (seq, admitted ? takeFault(for: route.name, in: &state) : nil, admitted)
        }
        defer { if let createOrderToken { state.withLock { $0.createOrderAnswered(token: createOrderToken) } } }
        if !admitted { return finish(seq, fault: nil, reply: faultReply(SandboxFault(route: route.name, kind: .rateLimit), response: nil)) }
        let afterEffect = fault?.afterEffect ?? false
        if let fault, !afterEffect {
            switch fault.kind {
            case .delay: try? await Task.sleep(for: .milliseconds(fault.delayMs ?? 1_000))
            case .holdRequest, .holdAnswer: break  // around Klarna's work, below
            case .status, .rateLimit, .reset, .malformed: return finish(seq, fault: fault, reply: faultReply(fault, response: nil))
            }
        }
        var response: SandboxResponse
        var replayed = false
        if let merchant {
            if let fault, fault.kind == .holdRequest {
                (response, replayed) = await hold(
                    route, request, merchant: merchant, key: key, seq: seq, until: arrived.addingTimeInterval(Self.holdSeconds(fault)))
            } else {
                (response, replayed) = state.withLock { state in
                    execute(route, request: request, merchant: merchant, key: key, seq: seq, at: now, in: &state)
                }
            }
        } else {
            response = SandboxResponse.klarnaError(401, "UNAUTHORIZED", "Missing or invalid credentials")
        }
        if replayed { state.withLock { $0.requests[seq - 1].replayed = true } }
        if let fault, afterEffect || fault.kind == .holdAnswer {
            switch fault.kind {
            case .delay: try? await Task.sleep(for: .milliseconds(fault.delayMs ?? 1_000))
            case .holdAnswer:
                answersHeld.add(1)
                try? await configuration.clock.sleep(until: arrived.addingTimeInterval(Self.holdSeconds(fault)))
                answersHeld.add(-1)
            case .holdRequest: break  // held before Klarna's work, above
            case .status, .rateLimit, .reset, .malformed: return finish(seq, fault: fault, reply: faultReply(fault, response: response))
            }
        }
        return finish(seq, fault: fault, reply: .response(response.serverResponse))
    }

    static func holdSeconds(_ fault: SandboxFault) -> TimeInterval { fault.holdSeconds ?? 30 }

    /// A `hold_request` fault: Klarna acts on the request once `until` has come on the sandbox clock. Whatever Klarna
    /// call arrives first after that acts on it (``releaseHeldRequests(in:now:)``), so a read then sees its effect
    /// whether or not this task has woken yet.
    private func hold(
        _ route: KlarnaRoute, _ request: ServerRequest, merchant: String, key: String?, seq: Int, until: Date
    ) async -> (SandboxResponse, replayed: Bool) {
        state.withLock {
            $0.heldRequests[seq] = SandboxState.HeldRequest(
                route: route, request: request, merchant: merchant, idempotencyKey: key, releaseAt: until)
        }
        // A cancelled wait (the sandbox stopping) releases it early.
        try? await configuration.clock.sleep(until: until)
        return state.withLock { state in
            if state.heldRequests[seq]?.outcome == nil { release(seq, in: &state) }
            // Gone only when the sandbox was reset meanwhile: Klarna forgot everything, the token too.
            return state.heldRequests.removeValue(forKey: seq)?.outcome ?? (KlarnaAPIHandlers.invalidToken.response, replayed: false)
        }
    }

    /// Acts on every held request whose hold is over at `now`, oldest first.
    private func releaseHeldRequests(in state: inout SandboxState, now: Date) {
        for (seq, held) in state.heldRequests.sorted(by: { $0.key < $1.key }) where held.outcome == nil && held.releaseAt <= now {
            release(seq, in: &state)
        }
    }

    private func release(_ seq: Int, in state: inout SandboxState) {
        guard let held = state.heldRequests[seq] else { return }
        let outcome = execute(
            held.route, request: held.request, merchant: held.merchant, key: held.idempotencyKey, seq: seq, at: min(now, held.releaseAt),
            in: &state)
        state.heldRequests[seq]?.outcome = outcome
    }

    private func finish(_ seq: Int, fault: SandboxFault?, reply: ServerReply) -> ServerReply {
        state.withLock { state in
            if case .response(let response) = reply { state.requests[seq - 1].status = response.status }
            state.requests[seq - 1].fault = fault.map { $0.kind.rawValue + (($0.afterEffect ?? false) ? " after effect" : "") }
        }
        return reply
    }

    /// Runs one Klarna call by `merchant`, honouring `Klarna-Idempotency-Key` on the routes where Klarna does. A
    /// resource of another merchant is answered as one that does not exist.
    private func execute(
        _ route: KlarnaRoute, request: ServerRequest, merchant: String, key: String?, seq: Int, at now: Date, in state: inout SandboxState
    ) -> (SandboxResponse, replayed: Bool) {
        // Keys are the merchant's own: another merchant's same key is another request.
        var storeKey: SandboxState.IdempotencyKey?
        if let key, !key.isEmpty, Self.idempotentRoutes.contains(route.name) { storeKey = SandboxState.IdempotencyKey(merchant: merchant, key: key) }
        if let storeKey, let stored = state.idempotency[storeKey], now.timeIntervalSince(stored.at) < Self.idempotencyWindow {
            return (stored.response, true)
        }
        let response: SandboxResponse
        if let owner = state.owner(of: route), owner != merchant {
            response = KlarnaAPIHandlers.notFound(route)
        } else {
            var context = KlarnaCallContext(request: request, merchant: merchant, idempotencyKey: key, seq: seq, now: now)
            response = KlarnaAPIHandlers.handle(route, context: &context, state: &state)
        }
        if let storeKey { state.idempotency[storeKey] = SandboxState.StoredReply(at: now, response: response) }
        return (response, false)
    }

    private func takeFault(for route: String, in state: inout SandboxState) -> SandboxFault? {
        for (index, entry) in state.faults.enumerated() where Self.fault(entry.fault, covers: route) {
            if let probability = entry.fault.probability, configuration.random.nextUnit() >= probability { continue }
            var fault = entry.fault
            if let skip = fault.skip, skip > 0 {
                state.faults[index].fault.skip = skip - 1
                continue
            }
            if let count = fault.count {
                if count <= 1 {
                    state.faults.remove(at: index)
                } else {
                    fault.count = count - 1
                    state.faults[index].fault = fault
                }
            }
            return entry.fault
        }
        return nil
    }

    /// `*` covers every Klarna route, `settlements.*` every route of one API (an outage), any other name that route.
    private static func fault(_ fault: SandboxFault, covers route: String) -> Bool {
        if fault.route == "*" || fault.route == route { return true }
        return fault.route.hasSuffix(".*") && route.hasPrefix(String(fault.route.dropLast()))
    }

    private func faultReply(_ fault: SandboxFault, response: SandboxResponse?) -> ServerReply {
        switch fault.kind {
        case .reset:
            return .reset
        case .malformed:
            var broken = response ?? SandboxResponse(status: 200)
            if !(200..<300).contains(broken.status) { broken.status = 200 }
            broken.headers = [("Content-Type", "application/json")] + broken.headers.filter { $0.name != "Content-Type" }
            broken.body = Array(#"{"order_id": "truncated-in-the-midd"#.utf8)
            return .response(broken.serverResponse)
        case .rateLimit:
            var limited = SandboxResponse.klarnaError(429, "TOO_MANY_REQUESTS", "Rate limit exceeded")
            limited.headers += [
                ("X-Ratelimit-Limit", "50, 50;w=1"), ("X-Ratelimit-Remaining", "0"),
                ("X-Ratelimit-Reset", String(fault.resetSeconds ?? 1)),
            ]
            if let retryAfter = fault.retryAfterSeconds { limited.headers.append(("Retry-After", String(retryAfter))) }
            return .response(limited.serverResponse)
        case .status, .delay, .holdRequest, .holdAnswer:
            let status = fault.status ?? 503
            let code = fault.errorCode ?? (status >= 500 ? (status == 500 ? "INTERNAL_SERVER_ERROR" : "TEMPORARILY_UNAVAILABLE") : "BAD_REQUEST")
            return .response(SandboxResponse.klarnaError(status, code, "Injected fault").serverResponse)
        }
    }
}

/// A count several tasks change.
final class AtomicCount: Sendable {
    private let count = Mutex(0)
    var value: Int { count.withLock { $0 } }
    func add(_ delta: Int) { count.withLock { $0 += delta } }
}
