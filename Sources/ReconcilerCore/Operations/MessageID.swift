/// Stable journald `MESSAGE_ID`s for the events an operator acts on. They never change once released; the
/// catalog with an explanation and what to do for each is `systemd/klarna-reconciler.catalog` (a test keeps the two
/// in step), and `journalctl MESSAGE_ID=<id>` finds every occurrence.
public enum MessageID: String, CaseIterable, Sendable {
    // Lifecycle
    case ready = "21199f01ebbb4d12afa73318723b18bd"
    case stopping = "4c3d1577626144c8857abcf4bd918401"
    case stopped = "15449adacebe49899d18f50f26d082aa"
    case startFailed = "e6fa2459ccab463ba7311a02679e55d7"
    case reloaded = "b1c4643d50414a01a4e5c70fee0922d6"
    case reloadFailed = "9f1e22999b814e8982b935e3d3dd82b1"
    case stalled = "4e4fa84365d246ac819b403468492521"

    // Outcomes: one per kind, so `journalctl MESSAGE_ID=…` lists e.g. every payment that needs attention.
    case orderPlaced = "330cdbf28ca54aa9b7ec300b9783c8d4"
    case captured = "7475a21047544b1aab3887d36a69d2e4"
    case customerTokenCreated = "aee193fe8e4b4a45807bcd9998077ddd"
    case cancelled = "4c70113991fa4cb19020e8f187d70783"
    case rejected = "bfb378f12d514455b578bb52ad08319e"
    case expired = "fa33e710d7a243b1ae7eeb4f4b70d707"
    case needsAttention = "59cc60d117ae4d989ca0a18d4c2c0a69"
    case paymentRequestCompleted = "f77ad6fa34df41e2b1cc4ee6b5a796c6"
    case refunded = "c1a52f1496b74298b8716373f03af543"
    case refundFailed = "167fe5cde2f945faa1e2ae133688aa2a"
    case chargePlaced = "5b0e7d1c9a4f4e27b36c18d2f0a94c51"
    case chargeDeclined = "e3a92f40c1d84b6f9a7025be61c3d8f4"
    case chargeFailed = "8c14d6e2b7f04a9385e1f0c2a6d7b913"
    case customerTokenCancelled = "a7d3e95b0c1f4e6a8b2d7c4f19e0a536"
    case settlementOrphan = "dc06efe0539a40be95b5b7a7f9bb5714"
    case settlementMismatch = "29b0c382ac764f879cf6db339ef5c458"
    case settlementDrift = "78a9e002cc9248488baef0e786b1be6b"
    case settlementReversal = "f694b539e3e2457784ec92f2cbb04edb"
    case payoutMismatch = "b5cf199007474dcdb31dadb156c74b0a"
    case captureUnsettled = "9fc0941f0bea431f8123b7b2308e9032"
    case disputeOpened = "0f0be8f7600d448c89dce28038523a15"
    case disputeChanged = "8dc7a5330a98487caea0177df7efabd9"
    case disputeDeadline = "c65b735d0e8445c8b1a74b4e08429603"
    case disputeWon = "8da679814429419ab370ff635601343e"
    case disputeLost = "4ca0d06466c94d1e82ab63f4100c4c36"
    case disputeActionFailed = "ad1a1d2ac6dc4a4388670add970c8f52"

    // Settlements
    /// A payout was fetched, matched against the ledger and recorded.
    case payoutReconciled = "6619ca06a13043258a7fdec9c2bf2223"
    /// A sync with the Settlements API failed; it is tried again (nothing recorded is lost).
    case settlementSyncFailed = "4a0e44d2646c476d809a25c1745b1e51"

    // Disputes
    /// A sync with the Disputes API failed; it is tried again (nothing recorded is lost).
    case disputeSyncFailed = "23c7f21d6dc14e8898acab2068664dbd"

    // Side effects and the reads around them
    case sideEffectSent = "3d40b9d33395479291e6d1de71267291"
    case sideEffectRetry = "4335e799af0b4062a45eeb207fdbee81"
    case sideEffectUnclear = "28d9736596f441d8a45554ecca44ff1b"
    case authorizationExpiring = "95176c90598e47af89a8de6f97dbc529"
    case klarnaReadFailed = "47569188c34641c4afdb57fc027e973e"

    // Operators
    /// An operator's hold, release, retry, cancel or release-remaining was applied or refused.
    case operatorAction = "24fecf1329174f8d89555274d7427166"

    // Input, output and storage
    case deliveryRefused = "addba77736b64da8a3ee942cc2731565"
    case notifyGaveUp = "1cc34329043949f8871f33fa4c9f5dc7"
    /// A directory the daemon writes fell below `disk.min_free_mb`: nothing new is taken until space returns.
    case diskFull = "ba3eb9894ff04a4994991dec615740f3"
    /// Every directory has room again: deliveries and side effects resume.
    case diskSpaceBack = "3e28934fdc1c4c9e83a2f4ab297e419e"
    /// Klarna answered a side effect and the store could not record it yet: the line carries the ids, kept until
    /// the store takes them.
    case answerUnrecorded = "d25851bdf3d0493993e21333cb6f8379"
    /// The daemon is starting and its store cannot be opened or written (a full disk): it waits, it does not exit.
    case storeWaiting = "951a10fa31644052bfe09fc43dd3c9fa"

    /// The metadata key a log line carries its id under; the journald handler writes it as `MESSAGE_ID`.
    public static let metadataKey = "message_id"

    /// The id of an outcome's log line.
    public init(outcome: OutcomeKind) {
        self =
            switch outcome {
            case .orderPlaced: .orderPlaced
            case .captured: .captured
            case .customerTokenCreated: .customerTokenCreated
            case .cancelled: .cancelled
            case .rejected: .rejected
            case .expired: .expired
            case .needsAttention: .needsAttention
            case .paymentRequestCompleted: .paymentRequestCompleted
            case .refunded: .refunded
            case .refundFailed: .refundFailed
            case .chargePlaced: .chargePlaced
            case .chargeDeclined: .chargeDeclined
            case .chargeFailed: .chargeFailed
            case .customerTokenCancelled: .customerTokenCancelled
            case .settlementOrphan: .settlementOrphan
            case .settlementMismatch: .settlementMismatch
            case .settlementDrift: .settlementDrift
            case .settlementReversal: .settlementReversal
            case .payoutMismatch: .payoutMismatch
            case .captureUnsettled: .captureUnsettled
            case .disputeOpened: .disputeOpened
            case .disputeChanged: .disputeChanged
            case .disputeDeadline: .disputeDeadline
            case .disputeWon: .disputeWon
            case .disputeLost: .disputeLost
            case .disputeActionFailed: .disputeActionFailed
            }
    }

    /// The id of a timeline event's log line, for the events an operator acts on; routine events have none (an
    /// outcome's line carries the outcome's id).
    public init?(event kind: EventKind) {
        switch kind {
        case .attempt: self = .sideEffectSent
        case .retry: self = .sideEffectRetry
        case .ambiguous: self = .sideEffectUnclear
        case .authorizationExpiring: self = .authorizationExpiring
        case .readFailed: self = .klarnaReadFailed
        case .operatorAction, .operatorRefused: self = .operatorAction
        case .tracked, .webhook, .status, .staleStatus, .notFound, .authorized, .modeMismatch, .settling, .resolved, .refused, .failed, .done,
            .orderPlaced, .orderLinked, .orderStatus, .customerTokenCreated, .captureRequested, .captureRefused, .captured,
            .authorizationExtended, .tokenExpired, .cancelled, .rejected, .expired, .needsAttention, .paymentRequestCompleted,
            .settlementOrphan, .settlementMismatch, .settlementDrift, .settlementReversal, .payoutMismatch, .captureUnsettled,
            .operatorRequest, .refundRequested, .refunded, .refundFailed, .chargeRequested, .chargePlaced, .chargeDeclined, .chargeFailed,
            .customerTokenCancelled,
            .disputeOpened, .disputeChanged, .disputeDeadline, .disputeWon,
            .disputeLost:
            return nil
        }
    }
}
