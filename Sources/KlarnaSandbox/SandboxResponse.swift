import Foundation
import HTTPServer

/// A response the sandbox builds; kept as a value so idempotent replays can return it again byte for byte.
struct SandboxResponse: Sendable {
    var status: Int
    var headers: [(name: String, value: String)] = []
    var body: [UInt8] = []
    /// Sent as `Klarna-Correlation-Id`; an error body quotes the same value as `correlation_id`, as Klarna's do.
    var correlationID = UUID().uuidString.lowercased()

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true)))
        }
        return encoder
    }()

    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }()

    static func json<T: Encodable>(_ status: Int, _ value: T, headers: [(name: String, value: String)] = []) -> SandboxResponse {
        let body = (try? encoder.encode(value)).map(Array.init) ?? Array("{}".utf8)
        return SandboxResponse(status: status, headers: [("Content-Type", "application/json")] + headers, body: body)
    }

    /// Klarna's legacy error body: `{correlation_id, error_code, error_messages}`.
    static func klarnaError(_ status: Int, _ code: String, _ message: String) -> SandboxResponse {
        struct Body: Encodable {
            let correlationId: String
            let errorCode: String
            let errorMessages: [String]
        }
        let id = UUID().uuidString.lowercased()
        var response = json(status, Body(correlationId: id, errorCode: code, errorMessages: [message]))
        response.correlationID = id
        return response
    }

    static func noContent() -> SandboxResponse { SandboxResponse(status: 204) }

    var serverResponse: ServerResponse {
        ServerResponse(status: status, headers: headers + [("Klarna-Correlation-Id", correlationID)], body: body)
    }
}
