import Engine
import Foundation
import HTTPServer
import ReconcilerCore
import ReconcilerStore

/// The operators' socket (`control.socket`, group `klarna-operators`): what `status`, `list`, `show`, `settlements`,
/// `hold`, `release`, `retry`, `cancel` and `release-remaining` do, as HTTP routes for the command line and a shop
/// backend.
/// Who asked is the connecting process's uid (`SO_PEERCRED`), never something the request claims. The monitoring
/// routes (`/v1/health`, `/v1/ready`, `/metrics`) answer here too.
/// Routes: `GET /v2/status`, `GET /v2/payments[?state=S&account=A&limit=N]`, `GET /v2/payments/{id}`,
/// `GET /v2/payments/{id}/settlements`, `GET /v2/settlements[?since=DATE&payout=REF&account=A]`,
/// `POST /v2/payments/{id}/{action}`, `GET /v2/disputes[?open=true&due_within_days=N&account=A]`,
/// `POST /v2/disputes/{id}/{accept-loss|appeal}`, `GET /v2/customer-tokens[?limit=N]`, `GET /v2/customer-tokens/{token}`,
/// `POST /v2/customer-tokens/{token}/cancel` (body `{"account": …}`, optional).
public enum ControlHTTP {
    /// The header the command line sends so the timeline says "via the command line" rather than "via the control
    /// socket"; the uid comes from the socket either way.
    public static let clientHeader = "Klarna-Reconciler-Client"

    /// The routes' versions: `/v2` answers in ``OperatorJSON`` (snake_case); `/v1` answers the same documents with the
    /// types' own camelCase keys, kept for clients written against it and deprecated.
    public enum Version: String, Sendable, CaseIterable {
        case v1, v2

        func encoder() -> JSONEncoder {
            switch self {
            case .v1:
                let encoder = JSONEncoder()
                encoder.dateEncodingStrategy = .iso8601
                encoder.outputFormatting = [.sortedKeys]
                return encoder
            case .v2:
                return OperatorJSON.encoder()
            }
        }
    }

    /// - Parameter reports: what the settlement routes read (the daemon's store).
    /// - Parameter tokens: what the customer-token routes ask; nil: those routes are not served.
    public static func handler(
        desk: OperatorDesk, control: ControlEndpoints, reports: any SettlementReports, tokens: TokenDesk? = nil, wait: Duration = .seconds(5)
    ) -> @Sendable (ServerRequest) async -> ServerReply {
        { request in
            if let answer = await IngestHTTP.monitoring(control, request) { return answer }
            let parts = request.path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
            guard let version = parts.first.flatMap(Version.init(rawValue:)) else {
                return IngestHTTP.json(
                    404, ["error": "not_found", "detail": "no route \(request.method) \(request.path.prefix(200)); the routes are under /v2"])
            }
            let route = Array(parts.dropFirst())
            if request.method == "POST", let refusal = control.disk?.refusal {
                // Every operator request is written to the store before the engine acts on it.
                return IngestHTTP.json(503, ["error": refusal.error, "detail": refusal.detail])
            }
            func reply<T: Encodable>(_ value: T, status: Int = 200) -> ServerReply { Self.reply(value, status: status, version: version) }
            do {
                switch (request.method, route) {
                case ("GET", ["status"]):
                    return reply(try await desk.status(now: Date()))
                case ("GET", ["payments"]):
                    let limit = request.query["limit"].flatMap(Int.init) ?? 100
                    let account: AccountID?
                    do { account = try Self.account(in: request) } catch { return Self.badAccount }
                    return reply(
                        try await desk.listing(
                            state: request.query["state"].flatMap { $0.isEmpty ? nil : $0 }, account: account, limit: min(max(1, limit), 10_000)))
                case ("GET", let path) where path.count == 2 && path[0] == "payments":
                    guard let id = paymentID(path[1]) else { return badID }
                    guard let story = try await desk.story(id) else { return unknownPayment(id) }
                    return reply(story)
                case ("GET", ["settlements"]):
                    return try await payouts(reports, request, version: version)
                case ("GET", let path) where path.count == 3 && path[0] == "payments" && path[2] == "settlements":
                    guard let id = paymentID(path[1]) else { return badID }
                    guard let story = try await desk.story(id) else { return unknownPayment(id) }
                    return reply(try await reports.settlementLines(orderIDs: story.orders.map(\.orderID)))
                case ("POST", let path) where path.count == 3 && path[0] == "payments":
                    return try await operate(desk, request, id: path[1], action: path[2], wait: wait, version: version)
                case ("GET", ["disputes"]):
                    return try await disputes(desk, request, version: version)
                case ("POST", let path) where path.count == 3 && path[0] == "disputes":
                    return try await disputeAction(desk, request, id: path[1], action: path[2], wait: wait, version: version)
                case (_, let path) where path.first == "customer-tokens" && tokens != nil:
                    return try await customerTokens(tokens!, request, path: Array(path.dropFirst()), wait: wait, version: version)
                default:
                    return IngestHTTP.json(404, ["error": "not_found", "detail": "no route \(request.method) \(request.path.prefix(200))"])
                }
            } catch {
                return IngestHTTP.json(503, ["error": "store_unavailable", "detail": "\(error)"])
            }
        }
    }

    /// The customer-token routes: the list, one token with Klarna's status, and its cancellation (200 with the intent
    /// once Klarna answered, 202 while under way, 200 `repeat` when asked before).
    static func customerTokens(
        _ tokens: TokenDesk, _ request: ServerRequest, path: [String], wait: Duration, version: Version
    ) async throws
        -> ServerReply
    {
        switch (request.method, path) {
        case ("GET", []):
            let limit = request.query["limit"].flatMap(Int.init) ?? 100
            return reply(try await tokens.tokens(limit: min(max(1, limit), 10_000)), version: version)
        case ("GET", let path) where path.count == 1:
            guard let token = paymentID(path[0]) else { return badID }
            guard let view = try await tokens.token(token) else {
                return IngestHTTP.json(
                    404, ["error": "unknown_token", "detail": "this daemon neither created nor charged customer token \(Redact.tail(token))"])
            }
            return reply(view, version: version)
        case ("POST", let path) where path.count == 2 && path[1] == "cancel":
            guard let token = paymentID(path[0]) else { return badID }
            var account = AccountID.default
            if !request.body.isEmpty {
                guard let body = try? JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any] else { return badAccount }
                if let named = body["account"] {
                    guard let id = (named as? String).flatMap(AccountID.init(rawValue:)) else { return badAccount }
                    account = id
                }
            }
            let requester = OperatorDesk.requester(uid: request.peerUID, via: request.header(clientHeader) ?? "the control socket")
            switch try await tokens.cancel(token, account: account, by: requester, wait: wait) {
            case .repeated(let intent): return reply(["status": "repeat", "state": intent.state.rawValue], version: version)
            case .recorded(let intent): return reply(intent, status: intent.isFinished ? 200 : 202, version: version)
            }
        default:
            return IngestHTTP.json(404, ["error": "not_found", "detail": "no route \(request.method) \(request.path.prefix(200))"])
        }
    }

    /// `POST /v2/payments/{id}/{hold|release|retry|cancel|release-remaining}`, body `{"order_id": …}` for a retry
    /// that records a lost order id. 200 once the engine applied it; 404/409 with the reason when it does not apply;
    /// 202 when the engine did not answer within the wait (the request stays queued).
    static func operate(
        _ desk: OperatorDesk, _ request: ServerRequest, id raw: String, action word: String, wait: Duration, version: Version
    ) async throws -> ServerReply {
        guard let action = OperatorAction.allCases.first(where: { $0.word == word }) else {
            return IngestHTTP.json(
                404,
                [
                    "error": "not_found",
                    "detail": "no operator action \(word.prefix(40)); one of \(OperatorAction.allCases.map(\.word).joined(separator: ", "))",
                ])
        }
        guard let id = paymentID(raw) else { return badID }
        var orderID: String?
        if !request.body.isEmpty {
            guard let body = try? JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any] else {
                return IngestHTTP.json(400, ["error": "malformed", "detail": "the body must be a JSON object (or empty)"])
            }
            if let value = body["order_id"] {
                guard let text = value as? String, (1...255).contains(text.count) else {
                    return IngestHTTP.json(400, ["error": "malformed", "detail": "order_id must be a string of 1–255 characters"])
                }
                orderID = text
            }
        }
        // `?wait=S` (0–60): how long to wait for the engine's answer.
        let wait = request.query["wait"].flatMap(Int.init).map { Duration.seconds(min(max(0, $0), 60)) } ?? wait
        let via =
            request.peerUID == nil
            ? "the loopback TCP port" : request.header(clientHeader) == "command-line" ? "the command line" : "the control socket"
        let requester = OperatorDesk.requester(uid: request.peerUID, via: via)
        switch try await desk.request(action, id: id, orderID: orderID, by: requester, now: Date(), wait: wait) {
        case .refused(let refusal):
            if refusal.status == 404 { return unknownPayment(id) }
            return IngestHTTP.json(refusal.status, ["error": refusal.status == 400 ? "malformed" : "refused", "detail": refusal.reason])
        case .queued(let requests):
            return reply(OperatorReply(status: .queued, requests: requests.map(OperatorReply.Part.init), payment: nil), status: 202, version: version)
        case .answered(let requests, let payment):
            let refused = requests.contains { $0.state == .refused }
            let orders = payment.orders.filter { order in requests.contains { $0.key == .order(order.orderID) } }
                .map {
                    OperatorReply.OrderState(orderID: $0.orderID, state: $0.outcome?.rawValue ?? $0.phase.rawValue, activeIntent: $0.activeIntent)
                }
            return reply(
                OperatorReply(status: refused ? .refused : .done, requests: requests.map(OperatorReply.Part.init), payment: orders),
                status: refused ? 409 : 200, version: version)
        }
    }

    /// `GET /v2/disputes?open=true&due_within_days=N`: as `disputes` prints them (``DisputeView``), nearest deadline first.
    static func disputes(_ desk: OperatorDesk, _ request: ServerRequest, version: Version) async throws -> ServerReply {
        let open = request.query["open"].map { ["1", "true", "yes"].contains($0.lowercased()) } ?? false
        let account: AccountID?
        do { account = try Self.account(in: request) } catch { return Self.badAccount }
        var within: Duration?
        if let text = request.query["due_within_days"], !text.isEmpty {
            guard let days = Int(text), (0...3_650).contains(days) else {
                return IngestHTTP.json(400, ["error": "malformed", "detail": "due_within_days must be whole days from 0 to 3650"])
            }
            within = .seconds(days * 86_400)
        }
        return reply(try await desk.disputes(openOnly: open, dueWithin: within, account: account, now: Date()), version: version)
    }

    /// `POST /v2/disputes/{id}/{accept-loss|appeal}` (an appeal's body: `{"information": TEXT}`): 200 once the daemon
    /// ended the action (`done`; 409 `refused` or `failed` with the reason), 202 while it is under way. Evidence takes a
    /// file and comes from the command line (`dispute evidence`), which records it in the store itself.
    static func disputeAction(
        _ desk: OperatorDesk, _ request: ServerRequest, id raw: String, action word: String, wait: Duration, version: Version
    ) async throws -> ServerReply {
        guard let id = paymentID(raw), DisputeAction.validDisputeID(id) else {
            return IngestHTTP.json(
                400, ["error": "bad_id", "detail": "a dispute id is 1–\(DisputeAction.maxDisputeIDLength) printable ASCII characters"])
        }
        guard let kind = DisputeAction.Kind.allCases.first(where: { $0.word == word }), kind != .evidence else {
            return IngestHTTP.json(
                404, ["error": "not_found", "detail": "no dispute action \(word.prefix(40)); accept-loss or appeal (evidence: the command line)"])
        }
        var information: String?
        if kind == .appeal {
            guard let body = try? JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any], let text = body["information"] as? String,
                DisputeAction.informationProblem(text) == nil
            else {
                return IngestHTTP.json(
                    400, ["error": "malformed", "detail": "an appeal's body is {\"information\": TEXT} with 1–10000 characters"])
            }
            information = text
        }
        let wait = request.query["wait"].flatMap(Int.init).map { Duration.seconds(min(max(0, $0), 60)) } ?? wait
        let via =
            request.peerUID == nil
            ? "the loopback TCP port" : request.header(clientHeader) == "command-line" ? "the command line" : "the control socket"
        let action = DisputeAction(
            disputeID: id, orderID: nil, kind: kind, requestedAt: Date(), requestedBy: OperatorDesk.requester(uid: request.peerUID, via: via),
            information: information)
        switch try await desk.request(action, now: Date(), wait: wait) {
        case .refused(let reason):
            return IngestHTTP.json(404, ["error": "unknown_dispute", "detail": reason])
        case .recorded(let found, existing: true) where found.kind != kind:
            return IngestHTTP.json(
                409,
                [
                    "error": "another_action_under_way",
                    "detail":
                        "\(found.kind.word) of dispute \(id) is under way (\(found.state.rawValue)): one answer at a time; ask again once it has ended",
                ])
        case .recorded(let action, _):
            let status = action.state == .done ? 200 : action.isFinished ? 409 : 202
            return reply(action, status: status, version: version)
        }
    }

    /// `GET /v2/settlements?since=DATE&payout=REF`: the recorded payouts as `settlements` prints them (``PayoutReport``),
    /// oldest first; `since` as `settlements --since` takes it.
    static func payouts(_ reports: any SettlementReports, _ request: ServerRequest, version: Version) async throws -> ServerReply {
        var since: Date?
        if let text = request.query["since"], !text.isEmpty {
            do {
                since = try PayoutSince.read(text)
            } catch {
                return IngestHTTP.json(
                    400, ["error": "malformed", "detail": "since must be \(PayoutSince.expected), not \(text.prefix(60)): \(error)"])
            }
        }
        let payout = request.query["payout"].flatMap { $0.isEmpty ? nil : $0 }
        let account: AccountID?
        do { account = try Self.account(in: request) } catch { return Self.badAccount }
        return reply(try await reports.payouts(since: since, paymentReference: payout, account: account).map(\.report), version: version)
    }

    /// A query's `account` that is no account id.
    struct BadAccount: Error {}

    static let badAccount = IngestHTTP.json(400, ["error": "bad_account", "detail": "account must be an account id: \(AccountID.rule)"])

    /// The account a query names (`account=ID`); nil when it names none (every account's).
    static func account(in request: ServerRequest) throws(BadAccount) -> AccountID? {
        guard let named = request.query["account"], !named.isEmpty else { return nil }
        guard let account = AccountID(rawValue: named) else { throw BadAccount() }
        return account
    }

    /// What an operator route answers: each request with the daemon's note, and how the orders it touched stand.
    public struct OperatorReply: Codable, Sendable {
        public struct Part: Codable, Sendable {
            public let id: Int64
            public let target: String
            public let state: OperatorRequest.State
            public let note: String?

            init(_ request: OperatorRequest) {
                id = request.id
                target = request.key.description
                state = request.state
                note = request.note
            }
        }

        public struct OrderState: Codable, Sendable {
            public let orderID: String
            /// Its outcome, or its phase while open.
            public let state: String
            public let activeIntent: String?
        }

        public enum Status: String, Codable, Sendable {
            /// Applied.
            case done
            /// One part was refused (its note says why).
            case refused
            /// Recorded; the engine did not answer within the wait and applies it when it gets to it.
            case queued
        }

        public let status: Status
        public let requests: [Part]
        public let payment: [OrderState]?
    }

    static let badID = IngestHTTP.json(400, ["error": "bad_id", "detail": "the payment id must be 1–255 printable ASCII characters"])

    static func unknownPayment(_ id: String) -> ServerReply {
        IngestHTTP.json(404, ["error": "unknown_payment", "detail": "nothing tracked matches \(id)"])
    }

    static func paymentID(_ raw: String) -> String? {
        let id = raw.removingPercentEncoding ?? raw
        guard (1...255).contains(id.count), id.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else { return nil }
        return id
    }

    static func reply<T: Encodable>(_ value: T, status: Int = 200, version: Version) -> ServerReply {
        let body = (try? version.encoder().encode(value)).map(Array.init) ?? Array(#"{"error":"internal"}"#.utf8)
        return .response(ServerResponse(status: status, headers: [("Content-Type", "application/json")], body: body + [0x0A]))
    }
}
