import Foundation
import HTTPServer

/// The Disputes API v4 endpoints (`/v4/payment/disputes…`, Klarna's Disputes API v4 reference), with Klarna Network's error body.
enum DisputeHandlers {
    static func handle(_ route: KlarnaRoute, _ context: KlarnaCallContext, _ state: inout SandboxState) -> SandboxResponse {
        state.catchUpDisputes(now: context.now)
        do {
            return try dispatch(route, context, &state)
        } catch {
            return answer(error)
        }
    }

    /// Klarna's refusal in Klarna Network's error body.
    static func answer(_ rejection: Rejection) -> SandboxResponse {
        networkError(rejection.response.status, rejection.code, rejection.message)
    }

    private static func dispatch(_ route: KlarnaRoute, _ context: KlarnaCallContext, _ state: inout SandboxState) throws(Rejection) -> SandboxResponse
    {
        let id = route.parameters.first ?? ""
        let now = context.now
        switch route.name {
        case "disputes.list":
            return try list(context.request.query, merchant: context.merchant, state)
        case "disputes.read":
            return raw(200, SandboxDisputeJSON.object(try state.disputeNamed(id)).compactMapValues { $0 })
        case "disputes.accept_loss":
            try state.acceptLoss(id, at: now)
            return raw(202, ["state": "CLOSED"])
        case "disputes.add_attachment":
            let file = try attachment(context.request)
            let attachment = try state.addAttachment(id, name: file.name, type: file.type, size: file.size, at: now)
            return raw(201, ["payment_dispute_attachment_id": attachment])
        case "disputes.represent":
            struct Body: Decodable {
                struct Attachment: Decodable {
                    let paymentDisputeAttachmentId: String
                    let description: String?
                }
                let attachments: [Attachment]
                let additionalInformation: String?
                let partnerProposedRefundAmount: Int?
            }
            let body = try decode(Body.self, context.request.body)
            let chosen = body.attachments.map { (id: $0.paymentDisputeAttachmentId, description: $0.description) }
            let dispute = try state.represent(
                id, attachments: chosen, information: body.additionalInformation, proposedRefund: body.partnerProposedRefundAmount, at: now)
            return raw(
                201,
                [
                    "state": dispute.state, "created_at": SandboxDisputeJSON.date(now), "additional_information": body.additionalInformation as Any,
                    "attachments": chosen.map { ["payment_dispute_attachment_id": $0.id, "description": $0.description as Any] },
                ])
        case "disputes.appeal":
            struct Body: Decodable {
                let additionalInformation: String
                let attachments: [String]?
            }
            let body = try decode(Body.self, context.request.body)
            let dispute = try state.appeal(id, information: body.additionalInformation, attachments: body.attachments, at: now)
            return raw(
                201, ["state": dispute.state, "created_at": SandboxDisputeJSON.date(now), "additional_information": body.additionalInformation])
        default:
            throw Rejection(404, "RESOURCE_NOT_FOUND", "No such resource")
        }
    }

    /// `GET /v4/payment/disputes`: filtered by `order_ids`, `state` (comma-separated), `updated_at_start` (inclusive)
    /// and `updated_at_end` (exclusive); oldest first; `size` (1–100, default 20) per page, the next page after
    /// `starting_after` (the last item of the page before; `last_item` is null on the last page). Only `merchant`'s
    /// disputes.
    private static func list(_ query: [String: String], merchant: String, _ state: SandboxState) throws(Rejection) -> SandboxResponse {
        func set(_ name: String) -> Set<String>? { query[name].map { Set($0.split(separator: ",").map(String.init)) } }
        func date(_ name: String) throws(Rejection) -> Date? {
            guard let text = query[name] else { return nil }
            guard let date = SandboxDisputeJSON.parse(text) else { throw Rejection(400, "VALIDATION_ERROR", "\(name) is not a date-time") }
            return date
        }
        let known: Set<String> = ["order_ids", "state", "updated_at_start", "updated_at_end", "size", "starting_after"]
        if let unknown = query.keys.sorted().first(where: { !known.contains($0) }) {
            // Klarna has more filters (reason, created_at_*, closed_at_*, sort_by, …); answering everything for one
            // the sandbox does not apply would mislead.
            throw Rejection(400, "VALIDATION_ERROR", "the sandbox does not filter by \(unknown)")
        }
        let orders = set("order_ids"), states = set("state")
        let start = try date("updated_at_start"), end = try date("updated_at_end")
        let size = Int(query["size"] ?? "20") ?? 0
        guard (1...100).contains(size) else { throw Rejection(400, "VALIDATION_ERROR", "size must be 1 to 100") }
        var matching = state.disputeOrder.compactMap { state.disputes[$0] }.filter { dispute in
            dispute.merchant == merchant && (orders?.contains(dispute.orderID) ?? true) && (states?.contains(dispute.state) ?? true)
                && (start.map { dispute.updatedAt >= $0 } ?? true) && (end.map { dispute.updatedAt < $0 } ?? true)
        }
        let total = matching.count
        if let after = query["starting_after"] {
            // By the dispute's place among all (oldest first), so that a cursor holds while the list's rows change.
            guard state.disputes[after]?.merchant == merchant, let position = state.disputeOrder.firstIndex(of: after) else {
                throw Rejection(400, "VALIDATION_ERROR", "starting_after names no dispute")
            }
            let later = Set(state.disputeOrder[(position + 1)...])
            matching = matching.filter { later.contains($0.id) }
        }
        let page = Array(matching.prefix(size))
        let more = matching.count > size
        return raw(
            200,
            [
                "disputes": page.map { SandboxDisputeJSON.object($0).compactMapValues { $0 } },
                "pagination": [
                    "count": page.count, "total": total, "first_item": page.first?.id as Any, "last_item": (more ? page.last?.id : nil) as Any,
                ],
            ])
    }

    /// The `file` part of a `multipart/form-data` upload: its file name (or the `filename` field), type and size.
    private static func attachment(_ request: ServerRequest) throws(Rejection) -> (name: String, type: String, size: Int) {
        guard let contentType = request.header("Content-Type"), contentType.lowercased().hasPrefix("multipart/form-data"),
            let boundary = contentType.split(separator: ";").lazy.map({ $0.trimmingCharacters(in: .whitespaces) })
                .first(where: { $0.hasPrefix("boundary=") })?.dropFirst(9).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
        else { throw Rejection(400, "INVALID_CONTENT_TYPE", "multipart/form-data with a boundary is required") }
        let parts = Multipart.parts(request.body, boundary: boundary)
        guard let file = parts.first(where: { $0.name == "file" }) else { throw Rejection(400, "VALIDATION_ERROR", "the file part is required") }
        let name = parts.first { $0.name == "filename" }.map { String(decoding: $0.body, as: UTF8.self) } ?? file.filename ?? ""
        guard (1...1_000).contains(name.count) else { throw Rejection(400, "VALIDATION_ERROR", "a file name of 1 to 1000 characters is required") }
        return (name, file.type ?? "application/octet-stream", file.body.count)
    }

    private static func decode<T: Decodable>(_ type: T.Type, _ body: [UInt8]) throws(Rejection) -> T {
        do {
            return try SandboxResponse.decoder.decode(type, from: Data(body))
        } catch {
            throw Rejection(400, "VALIDATION_ERROR", "The body is not what this operation takes: \(error)")
        }
    }

    static func raw(_ status: Int, _ object: [String: Any]) -> SandboxResponse {
        SandboxResponse(status: status, headers: [("Content-Type", "application/json")], body: SandboxDisputeJSON.body(object))
    }

    /// Klarna Network's error body: `{error_id, error_type, error_code, error_message}`.
    static func networkError(_ status: Int, _ code: String, _ message: String) -> SandboxResponse {
        raw(
            status,
            [
                "error_id": UUID().uuidString.lowercased(), "error_type": status >= 500 ? "SERVER_ERROR" : "INPUT_ERROR", "error_code": code,
                "error_message": message,
            ])
    }
}

/// A minimal `multipart/form-data` reader: each part's name, file name, content type and bytes.
enum Multipart {
    struct Part {
        var name: String?
        var filename: String?
        var type: String?
        var body: [UInt8]
    }

    /// The parts of `body`; none when `boundary` is not 1–70 characters (RFC 2046). A delimiter counts at the start of
    /// the body or after CRLF only, so a file's bytes may hold the boundary.
    static func parts(_ body: [UInt8], boundary: String) -> [Part] {
        guard (1...70).contains(boundary.utf8.count) else { return [] }
        let delimiter = Array("\r\n--\(boundary)".utf8)
        let first = Array(delimiter.dropFirst(2))
        guard body.count >= first.count, Array(body[0..<first.count]) == first else { return [] }
        var parts: [Part] = []
        var contentStart = first.count
        while true {
            // "--" after the delimiter ends the body.
            if body.count >= contentStart + 2, body[contentStart] == UInt8(ascii: "-"), body[contentStart + 1] == UInt8(ascii: "-") { break }
            guard let next = find(delimiter, in: body, from: contentStart),
                let headersEnd = find(Array("\r\n\r\n".utf8), in: body, from: contentStart),
                headersEnd < next
            else { break }
            let headers = String(decoding: body[contentStart..<headersEnd], as: UTF8.self)
            var part = Part(body: Array(body[(headersEnd + 4)..<max(headersEnd + 4, next)]))
            for line in headers.split(separator: "\r\n") {
                let lower = line.lowercased()
                if lower.hasPrefix("content-type:") {
                    part.type = line.dropFirst("content-type:".count).trimmingCharacters(in: .whitespaces).lowercased()
                } else if lower.hasPrefix("content-disposition:") {
                    part.name = parameter("name", line)
                    part.filename = parameter("filename", line)
                }
            }
            parts.append(part)
            contentStart = next + delimiter.count
        }
        return parts
    }

    private static func parameter(_ name: String, _ line: Substring) -> String? {
        for item in line.split(separator: ";").map({ $0.trimmingCharacters(in: .whitespaces) }) where item.hasPrefix("\(name)=") {
            return String(item.dropFirst(name.count + 1)).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
        }
        return nil
    }

    /// Where `needle` (which starts with CR) occurs in `haystack` from `from`, compared in place.
    private static func find(_ needle: [UInt8], in haystack: [UInt8], from: Int) -> Int? {
        guard !needle.isEmpty, from >= 0, haystack.count >= needle.count else { return nil }
        var index = from
        let last = haystack.count - needle.count
        while index <= last {
            if haystack[index] == needle[0] {
                var matched = 1
                while matched < needle.count, haystack[index + matched] == needle[matched] { matched += 1 }
                if matched == needle.count { return index }
            }
            index += 1
        }
        return nil
    }
}
