import Foundation
import KlarnaAPI
import Logging
import ReconcilerCore
import ReconcilerStore
import ServiceLifecycle

/// The outcome document, as written to the outbox and POSTed to `notify.url`.
public struct OutcomeDocument: Codable, Sendable, Equatable {
    public var id: Int64
    /// Stable per outcome: the notify `Idempotency-Key`, so a receiver can drop repeats.
    public var idempotencyKey: String
    public var at: Date
    public var outcome: String
    public var reason: String
    public var hppSessionId: String?
    public var kpSessionId: String?
    public var orderId: String?
    public var merchantReference: String?
    public var amount: Int?
    public var currency: String?
    public var fraudStatus: String?
    public var captureId: String?
    public var customerTokenId: String?
    public var klarnaReference: String?
    public var paymentRequestId: String?
    public var klarnaNetworkSessionToken: String?
    /// Settlement and refund outcomes: the payout, the finding's word, the refund, and the ledger's amount beside Klarna's.
    public var paymentReference: String?
    public var finding: String?
    public var refundId: String?
    public var expectedAmount: Int?
    /// Refund outcomes: the shop's reference of the refund.
    public var refundReference: String?
    /// Charge outcomes: the shop's reference of the charge.
    public var chargeReference: String?
    /// Outcomes of Klarna's refusals (a declined charge): Klarna's error code and correlation id.
    public var klarnaErrorCode: String?
    public var klarnaCorrelationId: String?
    /// Dispute outcomes: the dispute, its state and its deadline.
    public var disputeId: String?
    public var disputeState: String?
    public var deadline: Date?

    public init(_ stored: StoredOutcome) {
        let outcome = stored.outcome
        id = stored.id
        idempotencyKey = IdempotencyKey.uuidV5(
            namespace: IdempotencyKey.namespace,
            name:
                "outcome:\(stored.id):\(outcome.kind.rawValue):\(outcome.orderID ?? outcome.hppSessionID ?? outcome.paymentRequestID ?? outcome.disputeID ?? "")"
        ).uuidString.lowercased()
        at = stored.at
        self.outcome = outcome.kind.rawValue
        reason = outcome.reason
        hppSessionId = outcome.hppSessionID
        kpSessionId = outcome.kpSessionID
        orderId = outcome.orderID
        merchantReference = outcome.merchantReference
        amount = outcome.amount
        currency = outcome.currency
        fraudStatus = outcome.fraudStatus
        captureId = outcome.captureID
        customerTokenId = outcome.customerTokenID
        klarnaReference = outcome.klarnaReference
        paymentRequestId = outcome.paymentRequestID
        klarnaNetworkSessionToken = outcome.klarnaNetworkSessionToken
        paymentReference = outcome.paymentReference
        finding = outcome.finding?.rawValue
        refundId = outcome.refundID
        expectedAmount = outcome.expectedAmount
        refundReference = outcome.refundReference
        chargeReference = outcome.chargeReference
        klarnaErrorCode = outcome.klarnaErrorCode
        klarnaCorrelationId = outcome.klarnaCorrelationID
        disputeId = outcome.disputeID
        disputeState = outcome.disputeState
        deadline = outcome.deadline
    }

    /// The daemon's one JSON convention (``OperatorJSON``).
    public static let encoder = OperatorJSON.encoder()
}

/// Writes outcome files Maildir-style: `tmp/` → fsync → `rename` into `new/` → fsync of `new/` (once for a batch). A
/// reader never sees a partial file, and a crash between rename and bookkeeping rewrites the same name, so each
/// outcome is one file.
///
/// The writes run on a queue of their own: an fsync on a busy disk can take seconds, and Swift's cooperative pool has
/// one thread per core (two on a small host), which every task of the daemon shares.
public struct OutboxWriter: Sendable {
    public let directory: String
    private let queue = DispatchQueue(label: "klarna-reconciler.outbox")

    public init(directory: String) throws {
        self.directory = directory
        // cur/ is the consumers': they acknowledge an outcome by renaming it there (or deleting it).
        for sub in ["tmp", "new", "cur"] {
            try FileManager.default.createDirectory(atPath: "\(directory)/\(sub)", withIntermediateDirectories: true)
        }
    }

    /// Sorting names sorts by time, then by outcome id.
    public static func fileName(_ document: OutcomeDocument) -> String {
        let stamp = KlarnaJSON.formatDate(document.at).replacingOccurrences(of: ":", with: "").replacingOccurrences(of: "-", with: "")
        return "\(stamp)-\(String(format: "%012lld", document.id))-\(document.outcome).json"
    }

    /// What a batch of writes did: the files written, in order, and the failure that ended it early.
    public struct Written: Sendable {
        public var paths: [String]
        public var failure: (any Error)?
    }

    /// Writes `documents` in order on the writer's own queue and then syncs `new/` once for all of them. A failure ends
    /// the batch: the files before it count as written (synced), and the failure comes back with them. If `new/`
    /// cannot be synced, none counts.
    public func write(_ documents: [OutcomeDocument]) async -> Written {
        await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: writeNow(documents)) }
        }
    }

    /// Every file's data is written before the first fsync: that fsync then commits the file system's journal with
    /// all of them, and the others find little left to flush, so a batch costs about one flush instead of one a file.
    private func writeNow(_ documents: [OutcomeDocument]) -> Written {
        var written = Written(paths: [], failure: nil)
        var staged: [(fd: Int32, temporary: String, final: String)] = []
        for document in documents {
            let name = Self.fileName(document)
            let temporary = "\(directory)/tmp/\(name)"
            do {
                let data = try OutcomeDocument.encoder.encode(document) + Data("\n".utf8)
                staged.append((try Self.create(temporary, with: data), temporary, "\(directory)/new/\(name)"))
            } catch {
                written.failure = error
                break
            }
        }
        var failed = false
        for file in staged {
            defer { close(file.fd) }
            guard !failed else { continue }
            if fsync(file.fd) != 0 {
                written.failure = OutboxError(path: file.temporary, errno: errno, action: "fsync")
            } else if rename(file.temporary, file.final) != 0 {
                written.failure = OutboxError(path: file.final, errno: errno, action: "rename into")
            } else {
                written.paths.append(file.final)
                continue
            }
            failed = true
        }
        guard !written.paths.isEmpty else { return written }
        do {
            try Self.syncDirectory("\(directory)/new")
        } catch {
            return Written(paths: [], failure: error)
        }
        return written
    }

    /// `path` created (or emptied) with `data` in it, not yet synced; its descriptor, which the caller closes.
    private static func create(_ path: String, with data: Data) throws -> Int32 {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o640)
        guard fd >= 0 else { throw OutboxError(path: path, errno: errno, action: "create") }
        let count = data.withUnsafeBytes { Foundation.write(fd, $0.baseAddress, $0.count) }
        guard count == data.count else {
            let error = OutboxError(path: path, errno: errno, action: "write")
            close(fd)
            throw error
        }
        return fd
    }

    static func syncDirectory(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw OutboxError(path: path, errno: errno, action: "open") }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw OutboxError(path: path, errno: errno, action: "fsync") }
    }
}

public struct OutboxError: Error, CustomStringConvertible {
    public let path: String
    public let errno: Int32
    public let action: String
    public var description: String {
        // A full or failing disk: how much its directory has left.
        let space = [ENOSPC, EDQUOT, EIO].contains(errno) ? "; \(freeSpaceNote(at: path))" : ""
        return "cannot \(action) \(path): \(String(cString: strerror(errno)))\(space)"
    }
}

/// POSTs outcome documents to `notify.url` with an `Idempotency-Key`.
public struct OutcomeNotifier: Sendable {
    public let url: String
    public let transport: any HTTPTransport
    public let retry: RetryPolicy
    public let timeout: Duration

    public init(url: String, transport: any HTTPTransport, retry: RetryPolicy, timeout: Duration) {
        self.url = url
        self.transport = transport
        self.retry = retry
        self.timeout = timeout
    }

    /// `nil` on a 2xx; else what went wrong.
    func send(_ document: OutcomeDocument) async throws -> String? {
        let body = Array(try OutcomeDocument.encoder.encode(document))
        let request = HTTPRequest(
            method: "POST", url: url,
            headers: HTTPHeaders([("Content-Type", "application/json"), ("Idempotency-Key", document.idempotencyKey)]),
            body: body, timeout: timeout, freshConnection: true)
        do {
            let response = try await transport.execute(request)
            return response.succeeded ? nil : "HTTP \(response.status)"
        } catch let error as TransportError {
            return error.description
        }
    }
}

/// Delivers recorded outcomes: first the outbox file, then (if configured) the notification. Wakes when the
/// reconciler records an outcome, and every few seconds for notification retries.
public struct OutcomeDeliveryService: Service {
    let store: any OutcomeQueue
    let writer: OutboxWriter
    let notifier: OutcomeNotifier?
    let clock: any WallClock
    let random: any RandomSource
    let bell: Doorbell
    let logger: Logger

    public init(
        store: any OutcomeQueue, writer: OutboxWriter, notifier: OutcomeNotifier?, clock: any WallClock,
        random: any RandomSource = SystemRandomSource(), bell: Doorbell, logger: Logger
    ) {
        self.store = store
        self.writer = writer
        self.notifier = notifier
        self.clock = clock
        self.random = random
        self.bell = bell
        self.logger = logger
    }

    public func run() async throws {
        let stopping = Live(false)
        await withGracefulShutdownHandler {
            while !stopping.value, !Task.isCancelled {
                let busy = await deliverBatch()
                if !busy { await bell.wait(timeout: .seconds(5), clock: clock) }
            }
        } onGracefulShutdown: {
            stopping.replace(with: true)
            bell.ring()
        }
        // Outcomes recorded while the workers drained.
        await deliverBatch()
    }

    /// Delivers what is due; `true` when more may be waiting.
    @discardableResult
    public func deliverBatch(limit: Int = 200) async -> Bool {
        let pending: [StoredOutcome]
        do {
            pending = try await store.undeliveredOutcomes(now: clock.now, limit: limit)
        } catch {
            logger.error("cannot read outcomes to deliver: \(error)")
            return false
        }
        // Every outbox file first, then one mark for all of them (a crash in between writes them again, under the
        // same names). Without notify.url an outcome is delivered once written, and so is one written while notify.url
        // was configured and not notified since.
        let unwritten = pending.filter { !$0.outboxWritten }
        let documents = unwritten.map(OutcomeDocument.init)
        let files = await writer.write(documents)
        let written = unwritten.prefix(files.paths.count).map(\.id)
        for (document, path) in zip(documents, files.paths) {
            logger.debug("outcome written to \(path)", metadata: Self.metadata(document))
        }
        if let failure = files.failure, let document = documents.dropFirst(files.paths.count).first {
            // Disk full or unwritable outbox: the outcome stays recorded and is written once it can be.
            logger.error("cannot write outcome \(document.id) to the outbox: \(failure)", metadata: Self.metadata(document))
        }
        let settled = notifier == nil ? pending.filter { $0.outboxWritten && !$0.notified }.map(\.id) : []
        do {
            try await store.markOutboxWritten(written + settled, notified: notifier == nil)
        } catch {
            logger.error("cannot record \(written.count + settled.count) outcome(s) as written to the outbox: \(error)")
            return false
        }
        var progressed = !written.isEmpty
        guard let notifier else { return files.failure == nil && progressed && pending.count == limit }
        // Those with their file, also when a later one could not be written: notify.url may be all a shop reads.
        let hasFile = Set(written).union(pending.filter(\.outboxWritten).map(\.id))
        for stored in pending where !stored.notified && hasFile.contains(stored.id) {
            let document = OutcomeDocument(stored)
            let metadata = Self.metadata(document)
            do {
                if let failure = try await notifier.send(document) {
                    let attempt = stored.notifyAttempts + 1
                    switch notifier.retry.decide(afterAttempt: attempt, elapsed: .zero, disposition: .retry(notBefore: nil), random: random) {
                    case .retry(let delay):
                        try await store.notifyFailed(stored.id, nextAt: clock.now.addingTimeInterval(delay.timeInterval))
                        logger.warning(
                            "notify.url refused outcome \(stored.id) (\(failure)); retry \(attempt) in \(TrackedSession.seconds(delay))",
                            metadata: metadata)
                    case .giveUp(let reason):
                        try await store.notifyFailed(stored.id, nextAt: nil)
                        logger.error(
                            "gave up notifying outcome \(stored.id) (\(failure), \(reason)); it stays in the outbox",
                            metadata: metadata.merging([MessageID.metadataKey: .string(MessageID.notifyGaveUp.rawValue)]) { $1 })
                    }
                } else {
                    try await store.markNotified(stored.id)
                    progressed = true
                }
            } catch {
                logger.error("cannot record notification of outcome \(stored.id): \(error)", metadata: metadata)
            }
        }
        return files.failure == nil && progressed && pending.count == limit
    }

    private static func metadata(_ document: OutcomeDocument) -> Logger.Metadata {
        var metadata: Logger.Metadata = ["outcome_id": .stringConvertible(document.id), "outcome": .string(document.outcome)]
        if let order = document.orderId { metadata["order_id"] = .string(order) }
        if let hpp = document.hppSessionId { metadata["hpp_session_id"] = .string(hpp) }
        return metadata
    }
}
