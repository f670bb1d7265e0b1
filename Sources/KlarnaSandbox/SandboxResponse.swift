import Foundation
import HTTPServer

/// A response the sandbox builds; kept as a value so idempotent replays can return it again byte for byte.
struct SandboxResponse: Sendable {
    var status: Int
    var headers: [(name: String, value: String)] = []
    var body: [UInt8] = []

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
        return json(status, Body(correlationId: UUID().uuidString.lowercased(), errorCode: code, errorMessages: [message]))
    }

    static func noContent() -> SandboxResponse { SandboxResponse(status: 204) }

    var serverResponse: ServerResponse {
        ServerResponse(status: status, headers: headers + [("Klarna-Correlation-Id", UUID().uuidString.lowercased())], body: body)
    }
}
