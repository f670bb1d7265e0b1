import Foundation
import HTTPServer
import ReconcilerStore

/// The socket's routes (DESIGN §3): each maps to a ``Delivery``; answers are JSON.
public enum IngestHTTP {
    public static func handler(_ ingestor: Ingestor, store: any ReconcilerStore) -> @Sendable (ServerRequest) async -> ServerReply {
        { (request: ServerRequest) async -> ServerReply in
            let parts = request.path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
            let route: Delivery.Route
            switch (request.method, parts) {
            case ("GET", ["v1", "health"]):
                return await health(store)
            case ("POST", ["v1", "webhooks", "hpp-status"]): route = .hppStatus
            case ("POST", ["v1", "webhooks", "kp-authorization"]): route = .kpAuthorization
            case ("POST", ["v1", "webhooks", "om-notification"]): route = .omNotification
            case ("POST", ["v1", "webhooks", "klarna"]): route = .klarnaNetwork
            case ("POST", ["v1", "sessions"]): route = .track
            case ("POST", let path) where path.count == 4 && path[0] == "v1" && path[1] == "orders" && path[3] == "capture":
                route = .capture(orderID: path[2])
            case (_, let path) where path == ["v1", "health"] || path == ["v1", "sessions"] || (path.count == 3 && path.starts(with: ["v1", "webhooks"])):
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

    static func health(_ store: any ReconcilerStore) async -> ServerReply {
        do {
            let summary = try await store.summary(now: Date())
            return json(200, ["status": "ok", "backlog": "\(summary.backlog)", "undelivered_outcomes": "\(summary.undeliveredOutcomes)"])
        } catch {
            return json(503, ["error": "store_unavailable", "detail": "\(error)"])
        }
    }

    static func json(_ status: Int, _ fields: [String: String]) -> ServerReply {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let body = (try? encoder.encode(fields)).map(Array.init) ?? Array(#"{"error":"internal"}"#.utf8)
        return .response(ServerResponse(status: status, headers: [("Content-Type", "application/json")], body: body + [0x0A]))
    }
}
