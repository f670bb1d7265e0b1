import Foundation

/// One rate budget spent by urgency: a token bucket (`ratePerSecond` tokens per second, at most `burst` saved up)
/// and the callers waiting for a token, served most urgent first and in arrival order within a level.
///
/// Nothing is reserved ahead: a token goes to whoever is most urgent at the moment it exists, so a side effect that
/// arrives behind any number of waiting reads takes the next token. Two rules keep the order from starving anyone:
/// after ``fairEvery`` − 1 grants in a row that passed over an older, less urgent waiter, the next token goes to the
/// oldest waiter (so the less urgent get at least one token in ``fairEvery`` however busy the rest is, and delay the
/// more urgent by one token interval at most); and a pause (a 429) holds everyone. ``Urgency/background`` work is
/// outside the fairness rule: it gets a token only while nobody more urgent waits, however long it has waited.
///
/// The last ``reserve`` tokens are kept for ``Urgency/hinted`` and above: a renewal burst or the routine reads take a
/// token only while more than that many are there, so a live payment's call finds one at once instead of waiting a
/// token interval behind them (and its fairness turn). Over time nobody gets fewer tokens: the bucket just holds the
/// reserve unspent.
public struct RateBudget: Sendable, Equatable {
    public struct Ticket: Hashable, Sendable {
        public let id: UInt64
        public let urgency: Urgency
    }

    public static let fairEvery = 10
    /// The tokens an account's budget keeps for live payments (``reserve``), when its burst allows.
    public static let liveReserve: Double = 2
    /// The levels that leave the reserve alone.
    public static let belowReserve: Urgency = .renewal
    /// A token less than this far away counts as there: `Date` keeps about a tenth of a microsecond, so a token
    /// computed to arrive "now" may be a hair short when the time comes.
    private static let slack: TimeInterval = 1e-6

    public private(set) var ratePerSecond: Double
    public private(set) var burst: Double
    /// Tokens only ``Urgency/hinted`` and above take: the reserve asked for, within `burst - 1` so that everyone
    /// can be served. A burst cut and raised again (a daemon's share while others come and go) brings it back.
    public var reserve: Double { min(askedReserve, burst - 1) }
    private let askedReserve: Double
    private var tokens: Double
    private var updatedAt: Date
    private var pausedUntil: Date?
    /// Waiting tickets per urgency level (index = raw value), oldest first.
    private var queues: [[Ticket]] = Array(repeating: [], count: Urgency.allCases.count)
    private var issued: UInt64 = 0
    private var passedOver = 0

    public init(ratePerSecond: Double, burst: Double, reserve: Double = 0, now: Date) {
        precondition(ratePerSecond > 0 && burst >= 1 && reserve >= 0)
        self.ratePerSecond = ratePerSecond
        self.burst = burst
        self.askedReserve = reserve
        self.tokens = burst
        self.updatedAt = now
    }

    public var waiting: Int { queues.reduce(0) { $0 + $1.count } }

    /// Callers waiting at `urgency` or above: a caller of `urgency` that came now would be served after them.
    public func waiting(atLeast urgency: Urgency) -> Int { queues[urgency.rawValue...].reduce(0) { $0 + $1.count } }

    /// Joins the queue at `urgency`; ``grant(now:)`` says when the ticket is served.
    public mutating func request(_ urgency: Urgency) -> Ticket {
        issued += 1
        let ticket = Ticket(id: issued, urgency: urgency)
        queues[urgency.rawValue].append(ticket)
        return ticket
    }

    /// Leaves the queue (a cancelled caller). `false` if the ticket was served already or never existed.
    public mutating func withdraw(_ ticket: Ticket) -> Bool {
        guard let index = queues[ticket.urgency.rawValue].firstIndex(of: ticket) else { return false }
        queues[ticket.urgency.rawValue].remove(at: index)
        return true
    }

    /// Hands the tokens there are now to waiting tickets, in order; returns the tickets served.
    public mutating func grant(now: Date) -> [Ticket] {
        refill(now: now)
        var served: [Ticket] = []
        while isOpen(now: now), let ticket = next() {
            tokens -= 1
            served.append(ticket)
        }
        return served
    }

    /// When the next waiting ticket can be served (the most urgent one's level decides whether the reserve is
    /// there for it); `nil` when nobody waits.
    public func nextGrant(now: Date) -> Date? {
        guard let level = queues.lastIndex(where: { !$0.isEmpty }) else { return nil }
        return when(tokens: needed(by: Urgency(rawValue: level)!), now: now)
    }

    /// When a read that runs only on spare tokens could take one (``takeSpare(limit:now:)``): once a token beyond
    /// the reserve exists.
    public func nextSpare(now: Date) -> Date { when(tokens: needed(by: .routine), now: now) }

    /// When the bucket holds `count` tokens (now, if it does). "Now" only when they are all there, not within the
    /// slack ``has(_:)`` allows: a pump sleeping until the exact time, on a clock that landed a hair short of it, is
    /// then told to wait a moment more, never that its token is there while it sleeps.
    private func when(tokens count: Double, now: Date) -> Date {
        var copy = self
        copy.refill(now: now)
        if let pausedUntil = copy.pausedUntil, pausedUntil > now {
            return pausedUntil.addingTimeInterval(count / ratePerSecond)
        }
        if copy.tokens >= count { return now }
        return now.addingTimeInterval(max(Self.slack, (count - copy.tokens) / ratePerSecond))
    }

    /// The tokens that must be there for a caller at `urgency` to take one.
    private func needed(by urgency: Urgency) -> Double { urgency <= Self.belowReserve ? 1 + reserve : 1 }

    /// Takes up to `limit` tokens that nobody is waiting for, for reads that run only when the budget has room (routine
    /// polls). Background work waiting does not count: it comes after those reads too.
    public mutating func takeSpare(limit: Int, now: Date) -> Int {
        refill(now: now)
        let waitingAhead = waiting - queues[Urgency.background.rawValue].count
        guard waitingAhead == 0, isOpen(now: now), limit > 0 else { return 0 }
        let count = min(limit, max(0, Int((tokens - reserve + Self.slack * ratePerSecond).rounded(.down))))
        tokens -= Double(count)
        return count
    }

    /// Gives back tokens taken by ``takeSpare(limit:now:)`` that were not used.
    public mutating func refund(_ count: Int, now: Date) {
        refill(now: now)
        tokens = min(burst, tokens + Double(count))
    }

    /// Empties the budget until `until`; nobody is served before then.
    public mutating func pause(until: Date, now: Date) {
        refill(now: now)
        if let current = pausedUntil, current >= until { return }
        pausedUntil = until
        tokens = 0
    }

    /// Changes the rate live (configuration reload) without forgetting who waits.
    public mutating func reconfigure(ratePerSecond: Double, burst: Double, now: Date) {
        precondition(ratePerSecond > 0 && burst >= 1)
        refill(now: now)
        self.ratePerSecond = ratePerSecond
        self.burst = burst
        tokens = min(tokens, burst)
    }

    private func has(_ count: Double) -> Bool { tokens >= count - Self.slack * ratePerSecond }

    private func isOpen(now: Date) -> Bool { pausedUntil.map { now >= $0 } ?? true }

    /// The ticket the token there is goes to, taken from its queue: the most urgent, unless the fairness turn of
    /// the oldest (background work aside) has come and the tokens there are leave it the reserve; `nil` when
    /// nobody waits or the tokens there are not for the one whose turn it is.
    private mutating func next() -> Ticket? {
        guard let level = queues.lastIndex(where: { !$0.isEmpty }) else { return nil }
        let oldest =
            queues.indices.filter { $0 != Urgency.background.rawValue && !queues[$0].isEmpty }
            .min { queues[$0][0].id < queues[$1][0].id } ?? level
        if oldest != level, passedOver + 1 >= Self.fairEvery, has(needed(by: Urgency(rawValue: oldest)!)) {
            passedOver = 0
            return queues[oldest].removeFirst()
        }
        guard has(needed(by: Urgency(rawValue: level)!)) else { return nil }
        passedOver = oldest != level ? passedOver + 1 : 0
        return queues[level].removeFirst()
    }

    private mutating func refill(now: Date) {
        var from = updatedAt
        if let pausedUntil {
            if now < pausedUntil { updatedAt = now; return }
            from = max(from, pausedUntil)
            self.pausedUntil = nil
        }
        let elapsed = max(0, now.timeIntervalSince(from))
        tokens = min(burst, tokens + elapsed * ratePerSecond)
        updatedAt = now
    }
}
