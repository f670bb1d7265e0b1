import ReconcilerCore

/// What a step of one key reads before it acts (``WorkStore/stepInputs(for:)``): whether the key is held and what
/// operators asked of it, the key's unit, and that unit's intents.
public struct StepInputs: Sendable, Equatable {
    public var controls: OperatorControls
    /// Whether the unit was read with the rest: `session`, `order` or `paymentRequest` then holds what the store has
    /// (nil: none). False: left to its own read, by a store of one process (which has no round trip to save) or when
    /// its row could not be read (a newer daemon's), so that a held key stays held without reading it and a step
    /// fails where it did before.
    public var unitRead: Bool
    /// The key's unit, of its kind, when ``unitRead``.
    public var session: TrackedSession?
    public var order: TrackedOrder?
    public var paymentRequest: TrackedPaymentRequest?
    /// An order's intents (its captures, extensions, cancellation and refunds), oldest first: only the order's own
    /// steps change them (a delivery only adds a refund). Nil: not read with the rest, by a store of one process
    /// (which answers ``WorkStore/intents(subject:)`` at no round trip when asked), for a session, or when one of them
    /// could not be read (the step then reads them, and fails, as it would have).
    public var intents: [Intent]?
    /// A session's place-order and customer-token intents: those of every session of its KP session, which share
    /// them (each names the session that made it). Another session's step may write one after this read, so a step
    /// that writes one says which version it read (``Change/intentRead``) and its commit fails if it moved. Nil: not
    /// read with the rest (a store of one process, an order's or payment request's step, or one of them could not be
    /// read), left to ``WorkStore/intent(_:)``.
    public var sessionIntents: [Intent]?

    public init(
        controls: OperatorControls, unitRead: Bool = false, session: TrackedSession? = nil, order: TrackedOrder? = nil,
        paymentRequest: TrackedPaymentRequest? = nil, intents: [Intent]? = nil, sessionIntents: [Intent]? = nil
    ) {
        self.controls = controls
        self.unitRead = unitRead
        self.session = session
        self.order = order
        self.paymentRequest = paymentRequest
        self.intents = intents
        self.sessionIntents = sessionIntents
    }
}

extension WorkKey {
    /// The subject of the intents of this key's unit: a session's HPP session id, an order's id. A payment request's
    /// steps record none; a customer token's step its own intent alone (read by its key).
    public var intentSubject: String? {
        switch self {
        case .session(let id), .order(let id): id
        case .paymentRequest, .customerToken: nil
        }
    }

    /// The order whose intents a step of this key reads with the rest (``StepInputs/intents``).
    public var orderID: String? {
        if case .order(let id) = self { id } else { nil }
    }
}

extension WorkStore {
    /// As a store of one process reads them: the hold and requests; the unit and its intents are left to the reads
    /// that ask for them, which cost it no round trip.
    public func stepInputs(for key: WorkKey) async throws -> StepInputs {
        StepInputs(controls: try await operatorControls(for: key))
    }
}
