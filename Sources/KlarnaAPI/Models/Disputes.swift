import Foundation

/// A dispute as Klarna's Disputes API v4 answers it (Klarna's Disputes API v4 reference), read leniently: only the id and the
/// state are required; dates come in several ISO 8601 shapes (with or without seconds, fractions or a zone); states,
/// reasons and outcomes are open words. `raw` is the JSON as Klarna sent it, kept with the dispute.
public struct PaymentDispute: Sendable, Equatable {
    public var paymentDisputeID: String
    public var state: String
    public var previousState: String?
    public var disputeReason: String?
    public var orderID: String?
    public var captureID: String?
    public var amount: Int?
    public var currency: String?
    public var holdPolicy: String?
    /// `state_context.representment.expires_at` (or the top-level `representment.expires_at`).
    public var responseExpiresAt: Date?
    /// `state_context.arbitration_expires_at`.
    public var arbitrationExpiresAt: Date?
    public var outcome: String?
    public var outcomeDetailed: String?
    /// The attachment ids of the merchant's evidence, wherever the answer shows it.
    public var evidenceAttachmentIDs: [String]
    public var createdAt: Date?
    public var updatedAt: Date?
    public var raw: String

    /// Reads one dispute from its JSON object.
    public init(json value: JSONValue) throws {
        guard case .object(let object) = value else { throw DisputeDecodingError("a dispute must be a JSON object") }
        guard case .string(let id)? = object["payment_dispute_id"], !id.isEmpty else {
            throw DisputeDecodingError("payment_dispute_id is missing")
        }
        guard case .string(let state)? = object["state"], !state.isEmpty else { throw DisputeDecodingError("state is missing in \(id)") }
        paymentDisputeID = id
        self.state = state
        previousState = Self.text(object["previous_state"])
        disputeReason = Self.text(object["dispute_reason"])
        orderID = Self.text(object["order_id"])
        captureID = Self.text(object["capture_id"]) ?? Self.text(object["payment_capture_id"])
        let details = Self.object(object["dispute_details"])
        amount = Self.int(details["dispute_amount"])
        currency = Self.text(details["currency"])
        holdPolicy = Self.text(Self.object(Self.object(object["configuration"])["options"])["hold_policy"])
        let context = Self.object(object["state_context"])
        let representment = Self.object(object["representment"])
        responseExpiresAt =
            Self.date(Self.object(context["representment"])["expires_at"]) ?? Self.date(representment["expires_at"])
            ?? Self.date(context["evidence_response_deadline_at"])
        arbitrationExpiresAt = Self.date(context["arbitration_expires_at"])
        outcome = Self.text(context["dispute_outcome"])
        outcomeDetailed = Self.text(context["dispute_outcome_detailed"])
        var evidence: [String] = []
        for holder in [Self.object(context["partner_evidence"]), Self.object(representment["partner_evidence"])] {
            guard case .array(let attachments)? = holder["attachments"] else { continue }
            for attachment in attachments {
                if let id = Self.text(Self.object(attachment)["payment_dispute_attachment_id"]), !evidence.contains(id) { evidence.append(id) }
            }
        }
        evidenceAttachmentIDs = evidence
        createdAt = Self.date(object["created_at"])
        updatedAt = Self.date(object["updated_at"])
        raw = String(decoding: (try? KlarnaJSON.encoder().encode(value)) ?? Data(), as: UTF8.self)
    }

    /// A v4 date-time as Klarna writes it: ISO 8601 with or without fractions, and (documented) without seconds or a zone
    /// (read as UTC).
    public static func parseDate(_ text: String) -> Date? {
        if let date = KlarnaJSON.parseDate(text) { return date }
        for suffix in ["Z", ":00Z"] {
            if let date = KlarnaJSON.parseDate(text + suffix) { return date }
        }
        return nil
    }

    static func text(_ value: JSONValue?) -> String? {
        if case .string(let text)? = value, !text.isEmpty { return text }
        return nil
    }

    static func int(_ value: JSONValue?) -> Int? {
        switch value {
        case .int(let number)?: number
        case .double(let number)? where number == number.rounded(): Int(exactly: number)
        default: nil
        }
    }

    static func object(_ value: JSONValue?) -> [String: JSONValue] {
        if case .object(let object)? = value { return object }
        return [:]
    }

    static func date(_ value: JSONValue?) -> Date? { text(value).flatMap(parseDate) }
}

/// A dispute answer that is not a dispute.
public struct DisputeDecodingError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// One page of `GET /v4/payment/disputes`.
public struct DisputePage: Sendable {
    public var disputes: [PaymentDispute]
    /// `pagination.last_item`: the cursor for the next page; nil on the last one.
    public var lastItem: String?
}
