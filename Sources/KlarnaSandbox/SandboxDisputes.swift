import Foundation

/// Klarna's Disputes API v4 as the sandbox plays it: a customer's
/// dispute of a captured order opens INITIATED with a response deadline Klarna sets (7 days for an unauthorized
/// purchase, 96 hours for a high-risk one, 21 days otherwise; a test may set its own); the merchant represents with
/// evidence or accepts the loss; Klarna decides; a preliminary loss may be appealed within 10 days; a missed deadline
/// is an automatic loss. Every change is a webhook (`payment.dispute.*`), signed like Klarna Network webhooks.
extension SandboxState {
    struct Dispute {
        let id: String
        /// Its order's merchant id.
        let merchant: String
        let orderID: String
        let captureID: String?
        let reason: String
        let amount: Int
        let currency: String
        /// `NONE` or `ON_DISPUTE_INITIATED` (Klarna spells the second inconsistently; this is the SDK's spelling).
        let holdPolicy: String
        let createdAt: Date
        var state = "INITIATED"
        var previousState: String?
        var representmentState = "EVIDENCE_REQUESTED"
        var representmentExpiresAt: Date
        var arbitrationExpiresAt: Date?
        var preliminaryOutcome: String?
        var outcome: String?
        var outcomeDetailed: String?
        var closedAt: Date?
        var updatedAt: Date
        /// Attachments uploaded for the evidence: id → (file name, content type, size in bytes).
        var attachments: [(id: String, name: String, type: String, size: Int)] = []
        /// What `represent` submitted: the attachments chosen (with their descriptions) and the text.
        var evidence: (attachments: [(id: String, description: String?)], information: String?)?
        var appeal: String?
    }

    /// A webhook Klarna would deliver, signed, for a test (or the demo) to hand to the daemon as a forwarder would.
    struct Webhook {
        let seq: Int
        let eventType: String
        let body: [UInt8]
    }

    static let disputeStates: Set<String> = ["INITIATED", "REPRESENTMENT", "PRE_ARBITRATION", "ARBITRATION", "CLOSED"]

    /// How long the merchant has to respond to a new dispute, by reason (Klarna's Disputes API v4 reference).
    static func responseWindow(reason: String) -> TimeInterval {
        switch reason {
        case "PURCHASE_UNAUTHORIZED": 7 * 86_400
        case "PURCHASE_HIGH_RISK": 96 * 3_600
        default: 21 * 86_400
        }
    }

    /// The appeal window after a preliminary loss (v4-ST: 10 days).
    static let appealWindow: TimeInterval = 10 * 86_400

    /// A customer disputes `amount` (default: everything captured and not refunded) of a captured order.
    mutating func openDispute(
        order orderID: String, reason: String, amount: Int?, holdPolicy: String?, respondWithin: TimeInterval?, at now: Date
    ) throws(Rejection) -> Dispute {
        guard let order = orders[orderID] else { throw Rejection(404, "RESOURCE_NOT_FOUND", "No order \(orderID)") }
        let disputable = order.capturedAmount - order.refundedAmount
        guard disputable > 0 else { throw Rejection(409, "RESOURCE_CONFLICT", "Order \(orderID) has nothing captured to dispute") }
        let amount = amount ?? disputable
        guard amount > 0, amount <= disputable else {
            throw Rejection(400, "VALIDATION_ERROR", "amount must be between 1 and \(disputable) (captured and not refunded)")
        }
        let policy = holdPolicy ?? "NONE"
        guard ["NONE", "ON_DISPUTE_INITIATED"].contains(policy) else {
            throw Rejection(400, "VALIDATION_ERROR", "hold_policy must be NONE or ON_DISPUTE_INITIATED")
        }
        nextDisputeNumber += 1
        let dispute = Dispute(
            id: "krn:network:eu1:test:payment:dispute:\(nextDisputeNumber)", merchant: order.merchant, orderID: orderID,
            captureID: order.captures.last?.id,
            reason: reason, amount: amount, currency: order.currency, holdPolicy: policy, createdAt: now,
            representmentExpiresAt: now.addingTimeInterval(respondWithin ?? Self.responseWindow(reason: reason)), updatedAt: now)
        disputes[dispute.id] = dispute
        disputeOrder.append(dispute.id)
        notify("payment.dispute.state-change.initiated", dispute)
        return dispute
    }

    /// Deadlines that passed close their disputes: a missed response is a loss, an appeal window that ran out makes the
    /// preliminary loss final.
    mutating func catchUpDisputes(now: Date) {
        for id in disputeOrder {
            guard var dispute = disputes[id] else { continue }
            if dispute.state == "INITIATED", now >= dispute.representmentExpiresAt {
                dispute.representmentState = "EVIDENCE_REQUEST_EXPIRED"
                close(&dispute, "LOST", "partner_did_not_reply_to_dispute_request", at: dispute.representmentExpiresAt)
            } else if dispute.state == "PRE_ARBITRATION", let until = dispute.arbitrationExpiresAt, now >= until {
                close(&dispute, "LOST", "partner_did_not_appeal_preliminary_decision", at: until)
            }
            disputes[id] = dispute
        }
    }

    /// Klarna extends the response deadline (`payment.dispute.updated.representment-deadline-extended`).
    mutating func extendDispute(_ id: String, until: Date, at now: Date) throws(Rejection) {
        var dispute = try openDisputeNamed(id)
        guard dispute.state == "INITIATED" else { throw Rejection(409, "RESOURCE_CONFLICT", "Only an INITIATED dispute has a response deadline") }
        guard until > dispute.representmentExpiresAt else { throw Rejection(400, "VALIDATION_ERROR", "An extension must end later") }
        let previous = dispute.representmentExpiresAt
        dispute.representmentExpiresAt = until
        dispute.updatedAt = now
        disputes[id] = dispute
        notify(
            "payment.dispute.updated.representment-deadline-extended", dispute,
            update: (["evidence_response_deadline_at": until], ["evidence_response_deadline_at": previous]))
    }

    /// Klarna decides on the evidence (REPRESENTMENT: won closes, lost opens the appeal window) or on the appeal
    /// (ARBITRATION: final).
    mutating func decideDispute(_ id: String, outcome: String, at now: Date) throws(Rejection) {
        var dispute = try openDisputeNamed(id)
        guard ["WON", "LOST"].contains(outcome) else { throw Rejection(400, "VALIDATION_ERROR", "outcome must be WON or LOST") }
        switch (dispute.state, outcome) {
        case ("REPRESENTMENT", "WON"), ("ARBITRATION", _):
            close(&dispute, outcome, outcome == "WON" ? "partner_provided_sufficient_evidence" : "insufficient_proof_of_delivery", at: now)
        case ("REPRESENTMENT", _):
            move(&dispute, to: "PRE_ARBITRATION", at: now)
            dispute.preliminaryOutcome = "LOST"
            dispute.arbitrationExpiresAt = now.addingTimeInterval(Self.appealWindow)
            notify("payment.dispute.state-change.pre-arbitration", dispute)
        default:
            throw Rejection(409, "RESOURCE_CONFLICT", "Klarna decides in REPRESENTMENT or ARBITRATION, not \(dispute.state)")
        }
        disputes[id] = dispute
    }

    // MARK: What the merchant may do (the API's state rules, Klarna's Disputes API v4 reference)

    mutating func acceptLoss(_ id: String, at now: Date) throws(Rejection) {
        var dispute = try disputeNamed(id)
        guard ["INITIATED", "PRE_ARBITRATION"].contains(dispute.state) else {
            throw Rejection(409, "RESOURCE_CONFLICT", "The loss can be accepted in INITIATED or PRE_ARBITRATION, not \(dispute.state)")
        }
        if dispute.state == "INITIATED" { dispute.representmentState = "EVIDENCE_WAIVED" }
        close(&dispute, "LOST", "partner_accepted_the_loss", at: now)
        disputes[id] = dispute
    }

    /// Klarna's accepted evidence files and their limit (Klarna's Disputes API v4 reference).
    static let attachmentTypes: [String: String] = [
        "application/pdf": "pdf", "image/jpeg": "jpg", "image/png": "png",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    ]
    static let attachmentLimit = 7 * 1_024 * 1_024

    mutating func addAttachment(_ id: String, name: String, type: String, size: Int, at now: Date) throws(Rejection) -> String {
        var dispute = try disputeNamed(id)
        guard dispute.state == "INITIATED" else { throw Rejection(409, "RESOURCE_CONFLICT", "Evidence was submitted already") }
        guard let extensionName = Self.attachmentTypes[type] else {
            throw Rejection(400, "VALIDATION_ERROR", "Unsupported file type \(type); PDF, JPEG, PNG or DOCX")
        }
        guard (1...Self.attachmentLimit).contains(size) else { throw Rejection(400, "VALIDATION_ERROR", "A file must be 1 byte to 7 MB") }
        let lower = name.lowercased()
        guard lower.hasSuffix(".\(extensionName)") || (extensionName == "jpg" && lower.hasSuffix(".jpeg")) else {
            throw Rejection(400, "VALIDATION_ERROR", "The file name's extension must match its type (\(extensionName))")
        }
        let attachment = "krn:network:eu1:test:payment:dispute-attachment:\(dispute.attachments.count + 1)-\(id.split(separator: ":").last ?? "")"
        dispute.attachments.append((attachment, name, type, size))
        dispute.updatedAt = now
        disputes[id] = dispute
        return attachment
    }

    mutating func represent(
        _ id: String, attachments: [(id: String, description: String?)], information: String?, proposedRefund: Int?, at now: Date
    ) throws(Rejection) -> Dispute {
        var dispute = try disputeNamed(id)
        guard dispute.state == "INITIATED" else { throw Rejection(409, "RESOURCE_CONFLICT", "Evidence is taken in INITIATED, not \(dispute.state)") }
        guard (1...10).contains(attachments.count), attachments.allSatisfy({ chosen in dispute.attachments.contains { $0.id == chosen.id } }) else {
            throw Rejection(400, "VALIDATION_ERROR", "1 to 10 attachments of this dispute are required")
        }
        guard attachments.allSatisfy({ ($0.description?.count ?? 0) <= 1_000 }) else {
            throw Rejection(400, "VALIDATION_ERROR", "an attachment's description is at most 1000 characters")
        }
        guard (information?.count ?? 0) <= 5_000 else {
            throw Rejection(400, "VALIDATION_ERROR", "additional_information is at most 5000 characters")
        }
        if let proposedRefund, !(1..<dispute.amount).contains(proposedRefund) {
            throw Rejection(400, "VALIDATION_ERROR", "partner_proposed_refund_amount must be less than the disputed amount (\(dispute.amount))")
        }
        dispute.evidence = (attachments, information)
        dispute.representmentState = "EVIDENCE_RECEIVED"
        move(&dispute, to: "REPRESENTMENT", at: now)
        disputes[id] = dispute
        notify("payment.dispute.state-change.representment", dispute)
        return dispute
    }

    mutating func appeal(_ id: String, information: String, attachments: [String]?, at now: Date) throws(Rejection) -> Dispute {
        var dispute = try disputeNamed(id)
        guard dispute.state == "PRE_ARBITRATION" else {
            throw Rejection(409, "RESOURCE_CONFLICT", "An appeal is taken in PRE_ARBITRATION, not \(dispute.state)")
        }
        if let attachments {
            guard (1...10).contains(attachments.count), attachments.allSatisfy({ chosen in dispute.attachments.contains { $0.id == chosen } }) else {
                throw Rejection(400, "VALIDATION_ERROR", "an appeal's attachments are 1 to 10 of this dispute's")
            }
        }
        guard (1...10_000).contains(information.count) else {
            throw Rejection(400, "VALIDATION_ERROR", "additional_information must be 1 to 10000 characters")
        }
        dispute.appeal = information
        move(&dispute, to: "ARBITRATION", at: now)
        disputes[id] = dispute
        notify("payment.dispute.state-change.arbitration", dispute)
        return dispute
    }

    // MARK: Internals

    func disputeNamed(_ id: String) throws(Rejection) -> Dispute {
        guard let dispute = disputes[id] else { throw Self.noSuchDispute(id) }
        return dispute
    }

    static func noSuchDispute(_ id: String) -> Rejection { Rejection(404, "RESOURCE_NOT_FOUND", "No dispute \(id)") }

    private func openDisputeNamed(_ id: String) throws(Rejection) -> Dispute {
        let dispute = try disputeNamed(id)
        guard dispute.state != "CLOSED" else { throw Rejection(409, "RESOURCE_CONFLICT", "Dispute \(id) is closed") }
        return dispute
    }

    private mutating func move(_ dispute: inout Dispute, to state: String, at now: Date) {
        dispute.previousState = dispute.state
        dispute.state = state
        dispute.updatedAt = now
    }

    private mutating func close(_ dispute: inout Dispute, _ outcome: String, _ detailed: String, at now: Date) {
        move(&dispute, to: "CLOSED", at: now)
        dispute.outcome = outcome
        dispute.outcomeDetailed = detailed
        dispute.closedAt = now
        notify("payment.dispute.state-change.closed", dispute)
    }

    /// Queues the webhook for `dispute` as it stands. `update`: the changed fields and what they were, for an update
    /// event.
    private mutating func notify(_ eventType: String, _ dispute: Dispute, update: (changed: [String: Date], previous: [String: Date])? = nil) {
        nextWebhookSeq += 1
        let payload: [String: Any?]
        if let update {
            payload = [
                "payment_dispute_id": dispute.id, "order_id": dispute.orderID, "state": dispute.state,
                "updated_at": SandboxDisputeJSON.date(dispute.updatedAt), "currency": dispute.currency,
                "updated_fields": update.changed.mapValues(SandboxDisputeJSON.date),
                "previous_fields": update.previous.mapValues(SandboxDisputeJSON.date),
            ]
        } else {
            payload = SandboxDisputeJSON.object(dispute)
        }
        // The account the event is about is the order's merchant (`subject_account_id` in Klarna Network's
        // envelope; `merchant_id` in SDK4's samples).
        let envelope: [String: Any] = [
            "metadata": [
                "event_type": eventType, "event_id": "sandbox-dispute-event-\(nextWebhookSeq)", "event_version": "v1",
                "occurred_at": SandboxDisputeJSON.date(dispute.updatedAt), "live": false, "merchant_id": dispute.merchant,
                "subject_account_id": dispute.merchant,
            ],
            "payload": payload.compactMapValues { $0 },
        ]
        let body = (try? JSONSerialization.data(withJSONObject: envelope, options: [.sortedKeys, .withoutEscapingSlashes])).map(Array.init) ?? []
        webhooks.append(Webhook(seq: nextWebhookSeq, eventType: eventType, body: body))
    }
}

/// A dispute as Klarna's v4 API and webhooks show it (Klarna's Disputes API v4 reference).
enum SandboxDisputeJSON {
    static func date(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }

    /// A date-time with or without fractional seconds.
    static func parse(_ text: String) -> Date? {
        (try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true))) ?? (try? Date(text, strategy: .iso8601))
    }

    static func object(_ dispute: SandboxState.Dispute) -> [String: Any?] {
        var representment: [String: Any?] = [
            "state": dispute.representmentState, "expires_at": date(dispute.representmentExpiresAt),
            "request": ["requested_at": date(dispute.createdAt)],
        ]
        if let evidence = dispute.evidence {
            representment["partner_evidence"] = [
                "additional_information": evidence.information as Any,
                "attachments": evidence.attachments.map { chosen in
                    [
                        "payment_dispute_attachment_id": chosen.id, "description": chosen.description as Any,
                        "filename": dispute.attachments.first { $0.id == chosen.id }?.name as Any,
                    ]
                },
            ]
        }
        var context: [String: Any?] = [:]
        switch dispute.state {
        case "INITIATED": context["representment"] = representment.compactMapValues { $0 }
        case "REPRESENTMENT": context["partner_evidence"] = representment["partner_evidence"] ?? nil
        case "PRE_ARBITRATION": context["arbitration_expires_at"] = dispute.arbitrationExpiresAt.map(date)
        case "CLOSED":
            context["dispute_outcome"] = dispute.outcome
            context["dispute_outcome_detailed"] = dispute.outcomeDetailed
            context["closed_at"] = dispute.closedAt.map(date)
        default: break
        }
        var object: [String: Any?] = [
            "payment_dispute_id": dispute.id, "state": dispute.state, "previous_state": dispute.previousState,
            "dispute_reason": dispute.reason, "order_id": dispute.orderID,
            "payment_transaction_id": "krn:payment:eu1:transaction:\(dispute.orderID)", "capture_id": dispute.captureID,
            "dispute_details": ["dispute_amount": dispute.amount, "currency": dispute.currency, "created_by": "CUSTOMER"],
            "created_at": date(dispute.createdAt), "updated_at": date(dispute.updatedAt),
            "state_context": context.compactMapValues { $0 }, "representment": representment.compactMapValues { $0 },
            "configuration": ["base_framework": "FRAMEWORK_2026", "options": ["hold_policy": dispute.holdPolicy]],
        ]
        if let preliminary = dispute.preliminaryOutcome {
            object["arbitration"] = ["preliminary_outcome": preliminary]
        }
        return object
    }

    static func body(_ value: Any) -> [UInt8] {
        (try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .withoutEscapingSlashes])).map(Array.init) ?? []
    }
}
