import Engine
import Foundation
import HTTPServer
import ReconcilerCore
import ReconcilerStore

/// What the sockets answer besides deliveries and operator commands: whether the daemon is alive and whether it
/// should be sent work (both from memory, never from the store, so a probe every second costs the commit path
/// nothing), and the metrics.
public struct ControlEndpoints: Sendable {
    public var health: @Sendable () async -> HealthReport
    public var readiness: Readiness
    /// The Prometheus text exposition, when metrics are served.
    public var metrics: (@Sendable () async -> String)?
    /// Under disk pressure the operators' requests that write are refused (`503 disk_full`); `nil`: not watched.
    public var disk: DiskGuard?

    public init(
        health: @escaping @Sendable () async -> HealthReport, readiness: Readiness, metrics: (@Sendable () async -> String)? = nil,
        disk: DiskGuard? = nil
    ) {
        self.health = health
        self.readiness = readiness
        self.metrics = metrics
        self.disk = disk
    }
}

/// The socket's routes (docs/operations.md, "Feeding the daemon: socket and spool"): each delivery maps to a ``Delivery``; answers are JSON.
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
            case ("POST", let path) where path.count == 4 && path[0] == "v1" && path[1] == "orders" && path[3] == "refunds":
                route = .refund(orderID: path[2])
            case ("POST", let path) where path.count == 4 && path[0] == "v1" && path[1] == "customer-tokens" && path[3] == "charges":
                route = .charge(token: path[2])
            case (_, let path)
            where path == ["v1", "health"] || path == ["v1", "ready"] || path == ["metrics"] || path == ["v1", "sessions"]
                || (path.count == 3 && path.starts(with: ["v1", "webhooks"])):
                // Refusals like any other (every refusal is recorded, docs/operations.md); the path only, never the query (tokens).
                let answer = await ingestor.refuse(
                    Rejection(405, "method_not_allowed", "\(request.method.prefix(20)) is not allowed on \(request.path.prefix(200))"),
                    source: "socket")
                return json(answer.status, ["error": answer.word, "detail": answer.detail])
            default:
                let answer = await ingestor.refuse(
                    Rejection(404, "not_found", "no route \(request.method.prefix(20)) \(shown(request.path))"), source: "socket")
                return json(answer.status, ["error": answer.word, "detail": answer.detail])
            }
            if let what = route.movesMoney, request.peerUID == nil {
                // Money moves: only over the unix socket, whose group is the permission; never a TCP port any local
                // process can reach (`ingest.listen`).
                let answer = await ingestor.refuse(
                    Rejection(403, "unix_socket_only", "\(what) are taken on the unix socket only, not over ingest.listen"), source: "socket")
                return json(answer.status, ["error": answer.word, "detail": answer.detail])
            }
            let delivery = Delivery(route: route, query: request.query, headers: request.headers, body: request.body)
            let answer = await ingestor.ingest(delivery, source: "socket")
            return answer.accepted
                ? json(202, ["status": answer.word, "detail": answer.detail])
                : json(answer.status, ["error": answer.word, "detail": answer.detail])
        }
    }

    /// A refused request's path as the refusal records and logs it: at most 200 characters, and a customer token in it
    /// (`/v1/customer-tokens/{token}/…`, a wrong method or a wrong tail) by its tail only, as everywhere.
    static func shown(_ path: String) -> String {
        var segments = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        if let index = segments.firstIndex(of: "customer-tokens"), index + 1 < segments.count, !segments[index + 1].isEmpty {
            segments[index + 1] = Redact.tail(segments[index + 1])
        }
        return String(segments.joined(separator: "/").prefix(200))
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

    static func json(_ status: Int, _ fields: [String: String]) -> ServerReply { encoded(status, fields) }

    /// `value` as JSON in the daemon's one convention (``OperatorJSON``), numbers as numbers.
    static func encoded<T: Encodable>(_ status: Int, _ value: T) -> ServerReply {
        let body = (try? OperatorJSON.encoder().encode(value)).map(Array.init) ?? Array(#"{"error":"internal"}"#.utf8)
        return .response(ServerResponse(status: status, headers: [("Content-Type", "application/json")], body: body + [0x0A]))
    }
}
