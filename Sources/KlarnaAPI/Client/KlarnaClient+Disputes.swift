import Foundation

/// Klarna's Disputes API v4: list and read disputes, and the merchant's three answers. Same
/// host and credentials as OM. Klarna declares no idempotency key for the answers: after an unclear failure, read the
/// dispute before anything else (the daemon's dispute actions do).
extension KlarnaClient {
    /// The largest `size` this client asks for (Klarna documents no maximum; the sandbox takes 100).
    public static let disputesPageSize = 100

    /// A walk through more pages than this fails instead of going on.
    static let disputesMaxPages = 10_000

    /// One page of disputes updated at or after `updatedSince`, after the cursor `startingAfter`.
    public func disputes(
        updatedSince: Date?, startingAfter: String? = nil, size: Int = KlarnaClient.disputesPageSize
    ) async throws
        -> DisputePage
    {
        var query: [(String, String)] = []
        if let updatedSince { query.append(("updated_at_start", KlarnaJSON.formatDate(updatedSince))) }
        query.append(("size", String(min(max(size, 1), Self.disputesPageSize))))
        if let startingAfter { query.append(("starting_after", startingAfter)) }
        let answer = try await send(
            .listDisputes, "GET", "/v4/payment/disputes", resource: updatedSince.map { "updated_at_start=\(KlarnaJSON.formatDate($0))" } ?? "all",
            query: query)
        struct Body: Decodable {
            struct Pagination: Decodable {
                let lastItem: String?
                enum CodingKeys: String, CodingKey { case lastItem = "last_item" }
            }
            let disputes: [JSONValue]
            let pagination: Pagination?
        }
        let body = try decode(Body.self, answer)
        // A dispute this client cannot read (no id, no state) is logged and left out: one would otherwise hold up
        // every other dispute of the list.
        var disputes: [PaymentDispute] = []
        for item in body.disputes {
            do {
                disputes.append(try PaymentDispute(json: item))
            } catch {
                logger.warning(
                    "a dispute in Klarna's list cannot be read and is left out: \(error)", metadata: ["request.id": .string(answer.requestID)])
            }
        }
        return DisputePage(disputes: disputes, lastItem: body.pagination?.lastItem)
    }

    /// Every dispute updated at or after `updatedSince`, page after page; `beforeEachPage` runs before each request
    /// (the caller's rate budget). A cursor that repeats fails the walk rather than looping.
    public func allDisputes(
        updatedSince: Date?, pageSize: Int = KlarnaClient.disputesPageSize, beforeEachPage: () async throws -> Void = {}
    )
        async throws -> [PaymentDispute]
    {
        var all: [PaymentDispute] = []
        var cursor: String?
        var seen: Set<String> = []
        for _ in 0..<Self.disputesMaxPages {
            try await beforeEachPage()
            let page = try await disputes(updatedSince: updatedSince, startingAfter: cursor, size: pageSize)
            all += page.disputes
            guard let next = page.lastItem, !page.disputes.isEmpty else { return all }
            guard seen.insert(next).inserted else {
                throw KlarnaAPIError(
                    operation: .listDisputes, failure: .undecodableResponse(status: 200, detail: "the cursor \(next) came twice"),
                    requestID: "-")
            }
            cursor = next
        }
        throw KlarnaAPIError(
            operation: .listDisputes, failure: .undecodableResponse(status: 200, detail: "no last page after \(Self.disputesMaxPages) pages"),
            requestID: "-")
    }

    public func readDispute(id: String) async throws -> PaymentDispute {
        let answer = try await send(.readDispute, "GET", "/v4/payment/disputes/\(segment(id))", resource: id)
        do {
            return try PaymentDispute(json: try decode(JSONValue.self, answer))
        } catch let error as KlarnaAPIError {
            throw error
        } catch {
            throw KlarnaAPIError(
                operation: .readDispute, failure: .undecodableResponse(status: answer.http.status, detail: "\(error)"),
                requestID: answer.requestID, correlationIDHeader: answer.http.headers["Klarna-Correlation-Id"])
        }
    }

    /// Accepts the loss (INITIATED or PRE_ARBITRATION; 409 otherwise). Irreversible.
    public func acceptDisputeLoss(id: String) async throws {
        _ = try await send(.acceptDisputeLoss, "POST", "/v4/payment/disputes/\(segment(id))/accept-loss", resource: id)
    }

    /// Uploads one file of evidence (multipart `file`); returns Klarna's attachment id.
    public func addDisputeAttachment(id: String, fileName: String, contentType: String, file: Data) async throws -> String {
        let boundary = "klarna-reconciler-" + UUID().uuidString.lowercased()
        // The name goes in a quoted parameter: quotes, backslashes and line breaks would end it early.
        let safeName = String(fileName.unicodeScalars.filter { $0.value >= 0x20 && $0 != "\"" && $0 != "\\" }.map(Character.init))
        var body = Array("--\(boundary)\r\nContent-Disposition: form-data; name=\"file\"; filename=\"\(safeName)\"\r\n".utf8)
        body += Array("Content-Type: \(contentType)\r\n\r\n".utf8)
        body += Array(file)
        body += Array("\r\n--\(boundary)--\r\n".utf8)
        let answer = try await send(
            .addDisputeAttachment, "POST", "/v4/payment/disputes/\(segment(id))/attachments", resource: id, body: body,
            contentType: "multipart/form-data; boundary=\(boundary)")
        struct Body: Decodable {
            let attachmentID: String
            enum CodingKeys: String, CodingKey { case attachmentID = "payment_dispute_attachment_id" }
        }
        return try decode(Body.self, answer).attachmentID
    }

    /// Submits evidence (INITIATED; 409 otherwise): the attachment with its description and the text.
    public func representDispute(id: String, attachmentID: String, description: String?, additionalInformation: String?) async throws {
        struct Attachment: Encodable {
            let attachmentID: String
            let description: String?
            enum CodingKeys: String, CodingKey { case attachmentID = "payment_dispute_attachment_id", description }
        }
        struct Body: Encodable {
            let attachments: [Attachment]
            let additionalInformation: String?
            enum CodingKeys: String, CodingKey { case attachments, additionalInformation = "additional_information" }
        }
        let body = Body(
            attachments: [Attachment(attachmentID: attachmentID, description: description)], additionalInformation: additionalInformation)
        _ = try await send(
            .representDispute, "POST", "/v4/payment/disputes/\(segment(id))/represent", resource: id,
            body: Array(try KlarnaJSON.encoder().encode(body)))
    }

    /// Appeals a preliminary loss (PRE_ARBITRATION; 409 otherwise).
    public func appealDispute(id: String, additionalInformation: String) async throws {
        struct Body: Encodable {
            let additionalInformation: String
            enum CodingKeys: String, CodingKey { case additionalInformation = "additional_information" }
        }
        _ = try await send(
            .appealDispute, "POST", "/v4/payment/disputes/\(segment(id))/appeal", resource: id,
            body: Array(try KlarnaJSON.encoder().encode(Body(additionalInformation: additionalInformation))))
    }
}
