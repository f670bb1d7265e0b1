import Foundation

/// An operator's action on a dispute (`klarna-reconciler dispute accept-loss|evidence|appeal`), recorded before it is
/// sent and sent by the daemon. Klarna declares no idempotency key for these calls, so every attempt starts with a
/// read of the dispute: what the read shows decides whether to send, and a wrong state (Klarna's 409) is reported,
/// never sent again.
public struct DisputeAction: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable, CaseIterable {
        /// `POST …/accept-loss`: INITIATED or PRE_ARBITRATION; the dispute closes LOST.
        case acceptLoss = "accept_loss"
        /// An attachment (`POST …/attachments`), then `POST …/represent` with it: INITIATED; the dispute moves to
        /// REPRESENTMENT.
        case evidence
        /// `POST …/appeal`: PRE_ARBITRATION; the dispute moves to ARBITRATION.
        case appeal

        /// The states Klarna takes it in (Klarna's Disputes API v4 reference).
        public var allowedIn: [DisputeState] {
            switch self {
            case .acceptLoss: [.initiated, .preArbitration]
            case .evidence: [.initiated]
            case .appeal: [.preArbitration]
            }
        }

        public var word: String { rawValue.replacingOccurrences(of: "_", with: "-") }
    }

    public enum State: String, Codable, Sendable, CaseIterable {
        /// Recorded; not sent yet.
        case requested
        /// Sent at least once without a clear answer; read before anything else.
        case sent
        /// Klarna took it: its answer, or a read of the dispute, says so.
        case done
        /// Not taken and never sent again: the dispute's state does not take it (Klarna's 409) or Klarna refused it.
        case refused
        /// No attempt got a clear answer and a read shows it was not taken.
        case failed
    }

    /// The store's row id.
    public var id: Int64
    public var disputeID: String
    /// The dispute's order, for the timeline.
    public var orderID: String?
    public var kind: Kind
    public var state: State
    /// The store's count of writes: a write expecting another count is refused (another daemon took the action).
    public var revision: Int
    public var attempts: Int
    public var requestedAt: Date
    public var requestedBy: String
    /// The last attempt's start.
    public var sentAt: Date?
    /// When the daemon looks at it next; nil once finished.
    public var nextAt: Date?
    /// Klarna answered the last attempt 409 (the dispute's state does not take it).
    public var conflict: Bool
    /// The last answer or error, for people.
    public var note: String?
    /// `evidence`: the file and its texts; `appeal`: the text.
    public var evidence: DisputeEvidence?
    public var information: String?

    public init(
        id: Int64 = 0, disputeID: String, orderID: String?, kind: Kind, requestedAt: Date, requestedBy: String,
        evidence: DisputeEvidence? = nil, information: String? = nil
    ) {
        self.id = id
        self.disputeID = disputeID
        self.orderID = orderID
        self.kind = kind
        state = .requested
        revision = 0
        attempts = 0
        self.requestedAt = requestedAt
        self.requestedBy = requestedBy
        nextAt = requestedAt
        conflict = false
        self.evidence = evidence
        self.information = information
    }

    public var isFinished: Bool { state == .done || state == .refused || state == .failed }

    /// The longest dispute id Klarna's read takes (`payment_dispute_id`, Klarna's Disputes API v4 reference).
    public static let maxDisputeIDLength = 100

    /// Whether `id` can name a dispute: 1–100 printable ASCII characters without spaces.
    public static func validDisputeID(_ id: String) -> Bool {
        (1...maxDisputeIDLength).contains(id.count) && id.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value < 0x7F }
    }

    /// What is wrong with an appeal's text, if anything: Klarna takes 1–10,000 characters.
    public static func informationProblem(_ text: String) -> String? {
        (1...10_000).contains(text.count) ? nil : "an appeal's text must be 1–10000 characters, not \(text.count)"
    }

    /// Without the file's bytes: what `show`, `disputes --json` and the operators' socket print.
    public var redacted: DisputeAction {
        var copy = self
        copy.evidence?.file = Data()
        return copy
    }
}

/// A file of evidence and what is said with it.
public struct DisputeEvidence: Codable, Sendable, Equatable {
    public var fileName: String
    public var contentType: String
    public var size: Int
    /// The bytes (kept in the store until the action ends, dropped by the write that ends it; never printed).
    public var file: Data
    /// The attachment's description (≤ 1,000 characters) and the evidence's text (≤ 5,000).
    public var description: String?
    public var additionalInformation: String?
    /// Klarna's id of the uploaded file, once an upload was answered.
    public var attachmentID: String?

    public init(fileName: String, contentType: String, file: Data, description: String?, additionalInformation: String?) {
        self.fileName = fileName
        self.contentType = contentType
        size = file.count
        self.file = file
        self.description = description
        self.additionalInformation = additionalInformation
    }

    /// Klarna's limit per file (Klarna's Disputes API v4 reference: "7 MB"; the smaller reading, so nothing Klarna refuses passes).
    public static let maxSize = 7_000_000

    /// Why a file of `size` bytes is refused.
    public static func tooLarge(_ name: String, size: Int) -> String { "\(name) is \(size) bytes; Klarna takes at most \(maxSize) (7 MB)" }

    /// The types Klarna takes, by file name extension, with the bytes each starts with.
    static let types: [(extensions: [String], contentType: String, magic: [UInt8])] = [
        (["pdf"], "application/pdf", Array("%PDF".utf8)),
        (["jpg", "jpeg"], "image/jpeg", [0xFF, 0xD8, 0xFF]),
        (["png"], "image/png", [0x89, 0x50, 0x4E, 0x47]),
        (["docx"], "application/vnd.openxmlformats-officedocument.wordprocessingml.document", [0x50, 0x4B, 0x03, 0x04]),
    ]

    /// Checks a file against Klarna's limits before anything is recorded: its type by name and by content, its size,
    /// and the texts' lengths. Returns the evidence, or what is wrong with it.
    public static func checked(
        fileName: String, file: Data, description: String?, additionalInformation: String?
    ) -> Result<DisputeEvidence, DisputeActionProblem> {
        let name = (fileName as NSString).lastPathComponent
        guard (1...1_000).contains(name.count) else { return .failure(.init("the file name must be 1–1000 characters")) }
        let suffix = (name as NSString).pathExtension.lowercased()
        guard let type = types.first(where: { $0.extensions.contains(suffix) }) else {
            return .failure(.init("Klarna takes PDF, JPEG, PNG or DOCX files (by extension), not \(name)"))
        }
        guard !file.isEmpty else { return .failure(.init("\(name) is empty")) }
        guard file.count <= maxSize else { return .failure(.init(tooLarge(name, size: file.count))) }
        guard file.starts(with: type.magic) else { return .failure(.init("\(name) does not look like a \(suffix.uppercased()) file")) }
        if let description, description.count > 1_000 { return .failure(.init("the description is at most 1000 characters")) }
        if let additionalInformation, additionalInformation.count > 5_000 {
            return .failure(.init("the additional information is at most 5000 characters"))
        }
        return .success(
            DisputeEvidence(
                fileName: name, contentType: type.contentType, file: file, description: description, additionalInformation: additionalInformation))
    }
}

/// Why an operator's action is not recorded: bad input, an unknown dispute, or one that does not take it now.
public struct DisputeActionProblem: Error, Sendable, Equatable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}

/// What the daemon does with a dispute action, decided from a fresh read of the dispute.
public enum DisputeActionStep: Sendable, Equatable {
    /// Make the call.
    case send
    /// Klarna took it (the read shows its effect).
    case done(String)
    /// Not taken, and never sent again.
    case refuse(String)
    /// Out of attempts, and the read shows it was not taken.
    case fail(String)
    /// An earlier attempt may still reach Klarna: read again then.
    case wait(until: Date)
}

/// How a call for a dispute action ended.
public enum DisputeCallResult: Sendable, Equatable {
    /// Klarna's 2xx.
    case taken
    /// 409: the dispute's state does not take it (or changed meanwhile).
    case conflict(String)
    /// Another 4xx: Klarna refused it for a reason sending again does not change.
    case refused(status: Int, String)
    /// No clear answer (5xx, 429, a timeout, a reset): read before any retry. `retryAfter`: Klarna's hint.
    case unclear(String, retryAfter: Duration?)
}

public enum DisputeActionRules {
    /// Whether `read` shows `action`'s effect.
    static func reached(_ action: DisputeAction, _ read: DisputeObservation) -> Bool {
        switch action.kind {
        case .acceptLoss: read.closedAs == "LOST"
        // Its own attachment; or, asked for anew once Klarna took evidence and the dispute moved on, the evidence
        // there: asking again is done, as an accept-loss asked again is once the dispute is lost.
        case .evidence:
            action.evidence?.attachmentID.map { read.evidenceAttachmentIDs.contains($0) }
                ?? (action.attempts == 0 && !read.evidenceAttachmentIDs.isEmpty && !action.kind.allowedIn.contains(read.state))
        // ARBITRATION, or closed from it (Klarna decided on the appeal since): never after Klarna's 409.
        case .appeal:
            action.attempts > 0 && !action.conflict
                && (read.state == .arbitration || (read.state == .closed && read.previousState == .arbitration))
        }
    }

    /// What to do with `action` now that a read of its dispute shows `read`. `longestCall`: the longest a call
    /// lasts, after which an attempt that got no answer can no longer take effect.
    public static func next(
        _ action: DisputeAction, read: DisputeObservation, maxAttempts: Int, longestCall: Duration, now: Date
    ) -> DisputeActionStep {
        let verb = action.kind.word
        if reached(action, read) {
            let how = action.attempts > 0 ? "Klarna took the \(verb)" : "the dispute shows it already"
            return .done("\(how): the dispute is \(read.state.rawValue)\(read.closedAs.map { " \($0)" } ?? "")")
        }
        guard action.kind.allowedIn.contains(read.state) else {
            let allowed = action.kind.allowedIn.map(\.rawValue).joined(separator: " or ")
            let klarna = action.conflict ? "Klarna answered 409; " : ""
            return .refuse(
                "\(klarna)\(verb) is taken in \(allowed), and the dispute is \(read.state.rawValue)\(read.closedAs.map { " \($0)" } ?? "")")
        }
        if action.conflict {
            // Klarna said the state was wrong, the read says it is right: a concurrent change. Reported, never retried.
            return .refuse("Klarna answered 409 (\(action.note ?? "conflict")) while the dispute reads \(read.state.rawValue)")
        }
        if let sentAt = action.sentAt, action.state == .sent {
            let latestEnd = sentAt.addingTimeInterval(longestCall.timeInterval)
            if now < latestEnd { return .wait(until: latestEnd) }
            if action.attempts >= maxAttempts {
                return .fail(
                    "no clear answer after \(action.attempts) attempts (\(action.note ?? "no detail")), and the dispute still reads \(read.state.rawValue)"
                )
            }
        }
        return .send
    }

    /// `action` after an attempt ended with `result` at `now`; `retry`: the backoff for unclear answers.
    public static func afterCall(
        _ action: DisputeAction, result: DisputeCallResult, retry: RetryPolicy, random: any RandomSource, now: Date
    ) -> DisputeAction {
        var next = action
        switch result {
        case .taken:
            next.state = .done
            next.nextAt = nil
            next.note = "Klarna took the \(action.kind.word)"
        case .conflict(let message):
            next.conflict = true
            next.note = message
            // Read at once: the read tells whether the dispute is where the action wanted it.
            next.nextAt = now
        case .refused(let status, let message):
            next.state = .refused
            next.nextAt = nil
            next.note = "Klarna refused it (\(status)): \(message)"
        case .unclear(let message, let hint):
            next.state = .sent
            next.note = message
            let delay: Duration =
                switch retry.decide(
                    afterAttempt: max(1, action.attempts), elapsed: .zero, disposition: .retry(notBefore: hint), random: random)
                {
                case .retry(let after): after
                case .giveUp: retry.maxDelay
                }
            next.nextAt = now.addingTimeInterval(delay.timeInterval)
        }
        return next
    }
}
