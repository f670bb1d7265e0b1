import Engine
import Foundation
import HTTPServer
import ReconcilerCore
import ReconcilerStore

/// What the socket answers besides deliveries: whether the daemon is alive and whether it should be sent work
/// (both from memory, never from the store, so a probe every second costs the commit path nothing), and the
/// operator commands for a shop backend.
public struct ControlEndpoints: Sendable {
    public var health: @Sendable () async -> HealthReport
    public var readiness: Readiness
    /// The Prometheus text exposition, when metrics are served.
    public var metrics: (@Sendable () async -> String)?
    public var desk: OperatorDesk?
    /// How long a payment route waits for the engine's answer before it answers 202 (queued).
    public var deskWait: Duration

    public init(
        health: @escaping @Sendable () async -> HealthReport, readiness: Readiness, metrics: (@Sendable () async -> String)? = nil,
        desk: OperatorDesk? = nil, deskWait: Duration = .seconds(5)
    ) {
        self.health = health
        self.readiness = readiness
        self.metrics = metrics
        self.desk = desk
        self.deskWait = deskWait
    }
}

/// The socket's routes (DESIGN §3): each delivery maps to a ``Delivery``; answers are JSON.
public enum IngestHTTP {
    public static func handler(_ ingestor: Ingestor, control: ControlEndpoints) -> @Sendable (ServerRequest) async -> ServerReply {
        { (request: ServerRequest) async -> ServerReply in
            if let answer = await monitoring(control, request) { return answer }
            let parts = request.path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
            let route: Delivery.Route
            switch (request.method, parts) {
            case ("POST", ["v1", "webhooks", "hpp-status"]): route = .hppStatus
            case ("POST", ["v1", "webhooks", "kp-authorization"]): route = .kpAuthorization
            case ("POST", ["v1", "webhooks", "om-notification"]): route = .omNotification
            case ("POST", ["v1", "webhooks", "klarna"]): route = .klarnaNetwork
            case ("POST", ["v1", "sessions"]): route = .track
            case ("POST", let path) where path.count == 4 && path[0] == "v1" && path[1] == "orders" && path[3] == "capture":
                route = .capture(orderID: path[2])
            case ("POST", let path) where path.count == 4 && path[0] == "v1" && path[1] == "payments":
                return await operate(control, request, id: path[2], action: path[3])
            case (_, let path) where path == ["v1", "health"] || path == ["v1", "ready"] || path == ["metrics"] || path == ["v1", "sessions"] || (path.count == 3 && path.starts(with: ["v1", "webhooks"])):
                return json(405, ["error": "method_not_allowed", "detail": "\(request.method) is not allowed on \(request.path)"])
            default:
                return json(404, ["error": "not_found", "detail": "no route \(request.method) \(request.path.prefix(200))"])
            }
            let delivery = Delivery(route: route, query: request.query, headers: request.headers, body: request.body)
            let answer = await ingestor.ingest(delivery, source: "socket")
            return answer.accepted
                ? json(202, ["status": answer.word, "detail": answer.detail])
                : json(answer.status, ["error": answer.word, "detail": answer.detail])
        }
    }

    /// Only what a monitoring system reads, for `metrics.listen`: `/metrics`, `/v1/health`, `/v1/ready`.
    public static func monitoringHandler(control: ControlEndpoints) -> @Sendable (ServerRequest) async -> ServerReply {
        { request in
            await monitoring(control, request)
                ?? json(404, ["error": "not_found", "detail": "this port serves GET /metrics, /v1/health and /v1/ready only"])
        }
    }

    /// `GET /v1/health`, `GET /v1/ready`, `GET /metrics`; `nil` for anything else.
    static func monitoring(_ control: ControlEndpoints, _ request: ServerRequest) async -> ServerReply? {
        guard request.method == "GET" else { return nil }
        switch request.path {
        case "/v1/health":
            let report = await control.health()
            return encoded(report.status == "ok" ? 200 : 503, report)
        case "/v1/ready":
            let report = control.readiness.report()
            return encoded(report.ready ? 200 : 503, report)
        case "/metrics":
            guard let metrics = control.metrics else { return nil }
            let body = Array(await metrics().utf8)
            return .response(ServerResponse(status: 200, headers: [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")], body: body))
        default:
            return nil
        }
    }

    /// `POST /v1/payments/{id}/{hold|release|retry|cancel|release-remaining}`, body `{"order_id": …}` for a retry
    /// that records a lost order id. 200 once the engine applied it; 404/409 with the reason when it does not apply;
    /// 202 when the engine did not answer within the wait (the request stays queued).
    static func operate(_ control: ControlEndpoints, _ request: ServerRequest, id: String, action word: String) async -> ServerReply {
        guard let desk = control.desk else { return json(404, ["error": "not_found", "detail": "operator routes are not enabled here"]) }
        guard let action = OperatorAction.allCases.first(where: { $0.word == word }) else {
            return json(404, ["error": "not_found", "detail": "no operator action \(word.prefix(40)); one of \(OperatorAction.allCases.map(\.word).joined(separator: ", "))"])
        }
        let decodedID = id.removingPercentEncoding ?? id
        guard (1...255).contains(decodedID.count), decodedID.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            return json(400, ["error": "bad_id", "detail": "the payment id must be 1–255 printable ASCII characters"])
        }
        var orderID: String?
        if !request.body.isEmpty {
            guard let body = try? JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any] else {
                return json(400, ["error": "malformed", "detail": "the body must be a JSON object (or empty)"])
            }
            if let value = body["order_id"] {
                guard let text = value as? String, (1...255).contains(text.count) else { return json(400, ["error": "malformed", "detail": "order_id must be a string of 1–255 characters"]) }
                orderID = text
            }
        }
        let requester = OperatorDesk.requester(uid: request.peerUID, via: request.peerUID == nil ? "the loopback TCP port" : "the socket")
        do {
            switch try await desk.request(action, id: decodedID, orderID: orderID, by: requester, now: Date(), wait: control.deskWait) {
            case .refused(let refusal):
                return json(refusal.status, ["error": refusal.status == 404 ? "unknown_payment" : "refused", "detail": refusal.status == 404 ? "nothing tracked matches \(decodedID)" : refusal.reason])
            case .queued(let requests):
                return encoded(202, OperatorReply(status: "queued", requests: requests.map(OperatorReply.Part.init)))
            case .answered(let requests, _):
                if let refused = requests.first(where: { $0.state == .refused }) {
                    return json(409, ["error": "refused", "detail": refused.note ?? "refused"])
                }
                return encoded(200, OperatorReply(status: "done", requests: requests.map(OperatorReply.Part.init)))
            }
        } catch {
            return json(503, ["error": "store_unavailable", "detail": "\(error)"])
        }
    }

    struct OperatorReply: Encodable {
        struct Part: Encodable {
            let id: Int64
            let target: String
            let state: String
            let note: String?

            init(_ request: OperatorRequest) {
                id = request.id
                target = request.key.description
                state = request.state.rawValue
                note = request.note
            }
        }

        let status: String
        let requests: [Part]
    }

    static func json(_ status: Int, _ fields: [String: String]) -> ServerReply { encoded(status, fields) }

    /// `value` as JSON with snake_case keys, numbers as numbers.
    static func encoded<T: Encodable>(_ status: Int, _ value: T) -> ServerReply {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.keyEncodingStrategy = .convertToSnakeCase
        let body = (try? encoder.encode(value)).map(Array.init) ?? Array(#"{"error":"internal"}"#.utf8)
        return .response(ServerResponse(status: status, headers: [("Content-Type", "application/json")], body: body + [0x0A]))
    }
}
