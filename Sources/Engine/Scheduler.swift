import Foundation
import ReconcilerCore
import ReconcilerStore

/// Which work runs next. Due keys go out most urgent first (``Urgency``: deadlines, then payments in motion, then
/// hinted reads), by due time within a level. Routine reads go out only as fast as the rate budget has tokens that
/// nobody more urgent waits for, chosen by value (``PollValuation``), with every ``fairEvery``-th the one that has
/// waited longest, so polling fits the budget instead of queueing in front of side effects and nothing starves.
///
/// A due key above routine whose account's budget has a caller at least as urgent waiting already is held back until a
/// take finds no such caller (the dispatcher looks again at each of the account's tokens): in a worker slot it would
/// only wait for a token, and the slots are every account's.
///
/// A key is never handed out twice at once, and a wake for a running key runs it again afterwards. Nothing here
/// ticks; the dispatcher sleeps until ``nextDue(budget:)`` or until the doorbell rings.
public actor Scheduler {
    public struct Job: Sendable, Equatable {
        public let key: WorkKey
        /// Woken by a hint since its last run.
        public let hinted: Bool
        public let urgency: Urgency
        /// A routine read admitted with a token taken from the budget for it: the job's first call spends it.
        public let prepaid: Bool
        /// The account whose budget the job spends, when its plan names it (a routine read's always: its token came
        /// from that budget); a plan made again after the job keeps it.
        public var account: AccountID?

        public init(key: WorkKey, hinted: Bool, urgency: Urgency = .inMotion, prepaid: Bool = false, account: AccountID? = nil) {
            self.key = key
            self.hinted = hinted
            self.urgency = urgency
            self.prepaid = prepaid
            self.account = account
        }
    }

    /// One routine pick in this many goes to the read that has been due longest, whatever its value.
    public static let fairEvery = 8
    /// How long a ranking of due routine reads is used before values are computed again.
    static let rankingLifetime: TimeInterval = 1
    /// Due routine reads valued per take while a new ranking is made: more than this many are valued a slice at a
    /// time, the ranking made before serving meanwhile, so one take never holds the actor (and the urgent work behind
    /// it) for the whole set (20,000 reads take tens of milliseconds).
    static let rankSlice = 2_048

    private struct Waiting {
        var plan: WorkPlan
        var sequence: UInt64
    }

    private var waiting: [WorkKey: Waiting] = [:]
    /// Non-routine keys per level, and routine keys not due yet; stale entries are skipped lazily.
    private var queues: [Urgency: DueHeap] = Dictionary(uniqueKeysWithValues: Urgency.allCases.map { ($0, DueHeap()) })
    /// Routine keys that are due, with their account: they wait for its budget and are picked by value.
    private var ready: [WorkKey: AccountID] = [:]
    /// How many keys of `ready` each account has.
    private var readyCounts: [AccountID: Int] = [:]
    /// The running routine reads and their accounts.
    private var routineRunning: [WorkKey: AccountID] = [:]
    /// Due keys above routine held back because their account's budget had a caller as urgent waiting, by account and
    /// level: back in their queues at the first take that finds no such caller. Kept aside, not looked at again each
    /// take: a burst of deliveries beyond the budget holds back thousands, and every delivery rings for a take.
    private var heldBack: [AccountID: [Urgency: [DueHeap.Entry]]] = [:]
    /// Due routine keys by value, best last.
    private var ranking: [WorkKey] = []
    private var rankedAt: Date?
    /// Each account's due routine reads in the order they became due, with the sequence of the plan that made them
    /// due: the one due longest is the first still ready under that plan, found without a pass over every due read.
    private var readyOrder: [AccountID: (entries: [(key: WorkKey, sequence: UInt64)], head: Int)] = [:]
    /// A ranking being made a slice at a time: the reads to value, how many are valued, and their values.
    private var rankPass: (keys: [WorkKey], done: Int, scored: [(WorkKey, Double)], at: Date)?
    private var routinePicks = 0
    private var running: [WorkKey: Urgency] = [:]
    /// Keys woken or rescheduled while running: what to do once the worker is done.
    private var afterRun: [WorkKey: WorkPlan] = [:]
    /// Keys woken by a hint (a webhook, a capture request): the worker reads Klarna even if not due yet.
    private var hinted: Set<WorkKey> = []
    /// Running keys another daemon holds now: dropped when their worker is done.
    private var forgotten: Set<WorkKey> = []
    private var sequence: UInt64 = 0
    /// How long sessions take to end, learned from what the workers see; routine reads are valued by it.
    public private(set) var completionModel = CompletionModel()
    public nonisolated let doorbell = Doorbell()

    public init() {}

    public var runningCount: Int { running.count }
    public var scheduledCount: Int { waiting.count }
    /// Keys due at `now` or earlier that no worker has taken yet.
    public func backlog(now: Date) -> Int { waiting.values.count { $0.plan.due <= now } }

    /// Sets when `key` is due and how urgent it is, replacing any earlier plan.
    public func schedule(_ key: WorkKey, _ plan: WorkPlan) {
        forgotten.remove(key)
        if running[key] != nil {
            afterRun[key] = Self.merge(afterRun[key], plan)
        } else {
            put(key, plan)
        }
        doorbell.ring()
    }

    public func schedule(_ key: WorkKey, at due: Date, urgency: Urgency = .inMotion, poll: PollProfile? = nil) {
        schedule(key, WorkPlan(due: due, urgency: urgency, poll: poll))
    }

    /// Makes `key` due at `time` as a hinted read unless it is due earlier already (a webhook, a CLI request). The
    /// next run of the key is told it was hinted. `account`: whose budget it spends, when the waker knows (a key
    /// planned already keeps the account of its plan).
    public func wake(_ key: WorkKey, at time: Date, account: AccountID? = nil) {
        forgotten.remove(key)
        hinted.insert(key)
        let plan = WorkPlan(due: time, urgency: .hinted, account: account)
        if running[key] != nil {
            afterRun[key] = Self.merge(afterRun[key], plan)
        } else if let current = waiting[key]?.plan, current.due <= time, current.urgency >= .hinted {
            return
        } else {
            put(key, Self.merge(waiting[key]?.plan, plan) ?? plan)
        }
        doorbell.ring()
    }

    /// Hands out up to `capacity` keys due at `now`, marking them running: every due key above routine first, then
    /// as many routine reads as `budget` has spare tokens (all of them when there is no budget).
    public func take(now: Date, capacity: Int, budget: RateLimiter? = nil) -> [Job] {
        take(now: now, capacity: capacity) { _ in budget }
    }

    /// ``take(now:capacity:budget:)`` with one budget per account (`budgetOf`): each account's routine reads go out as
    /// fast as its own budget has spare tokens, so an account polling at its limit leaves the others' alone.
    public func take(now: Date, capacity: Int, budgetOf: (AccountID) -> RateLimiter?) -> [Job] {
        var jobs: [Job] = []
        releaseHeldBack(budgetOf: budgetOf)
        for level in Urgency.allCases.reversed() where level > .routine {
            while jobs.count < capacity, let top = validTop(level), top.due <= now {
                queues[level]!.pop()
                if let account = account(of: top.key), let budget = budgetOf(account), budget.waiting(atLeast: level) > 0 {
                    hold(top, level: level, of: account)
                    continue
                }
                jobs.append(hand(top.key, urgency: level, prepaid: false))
            }
        }
        guard jobs.count < capacity else { return jobs }
        promoteDueRoutine(now: now)
        for account in readyCounts.keys.sorted() where jobs.count < capacity {
            jobs += takeRoutine(of: account, now: now, room: capacity - jobs.count, budget: budgetOf(account))
        }
        return jobs
    }

    /// Up to `room` due routine reads of `account`, as its `budget` allows.
    private func takeRoutine(of account: AccountID, now: Date, room: Int, budget: RateLimiter?) -> [Job] {
        guard let budget else { return pickRoutine(now: now, count: room, of: account).map { hand($0, urgency: .routine, prepaid: false) } }
        let spare = budget.takeSpare(limit: room)
        if spare == 0 {
            // Everything goes to more urgent callers: one routine read at a time joins the budget's queue, where
            // it gets the fairness turn.
            guard budget.waiting > 0, !routineRunning.values.contains(account) else { return [] }
            return pickRoutine(now: now, count: 1, of: account).map { hand($0, urgency: .routine, prepaid: false) }
        }
        let picked = pickRoutine(now: now, count: spare, of: account)
        budget.refund(spare - picked.count)
        return picked.map { hand($0, urgency: .routine, prepaid: true) }
    }

    /// When to look again: the earliest due key, and for routine reads that are due already, the next token.
    public func nextDue(budget: RateLimiter? = nil) -> Date? {
        nextDue { _ in budget }
    }

    /// ``nextDue(budget:)`` with one budget per account.
    public func nextDue(budgetOf: (AccountID) -> RateLimiter?) -> Date? {
        var earliest = Urgency.allCases.compactMap { validTop($0)?.due }.min()
        // A key held back is due: it waits until the callers before it are served (at once when none waits now).
        for account in heldBack.keys {
            guard let budget = budgetOf(account) else { continue }
            let at = budget.nextGrant?.addingTimeInterval(0.001) ?? .distantPast
            earliest = min(earliest ?? at, at)
        }
        for account in readyCounts.keys {
            // Routine reads in `ready` are due already: they wait for a spare token. While others wait, the tokens
            // go to them first: look again just after the next is served.
            let at = budgetOf(account).map { $0.nextGrant?.addingTimeInterval(0.001) ?? $0.nextSpare } ?? .distantPast
            earliest = min(earliest ?? at, at)
        }
        return earliest
    }

    /// Drops `key` (another daemon holds it now): its plan, its hint, and what a running worker would do next.
    public func forget(_ key: WorkKey) {
        waiting.removeValue(forKey: key)
        unready(key)
        hinted.remove(key)
        afterRun.removeValue(forKey: key)
        if running[key] != nil { forgotten.insert(key) }
    }

    /// Whether `key` is planned or running.
    public func has(_ key: WorkKey) -> Bool { waiting[key] != nil || running[key] != nil }

    /// Those of `keys` the scheduler has neither waiting nor running.
    public func without(_ keys: some Sequence<WorkKey>) -> [WorkKey] { keys.filter { !has($0) } }

    /// A worker is done with `key`; `next` is what it wants next (`nil`: finished).
    public func finished(_ key: WorkKey, next: WorkPlan?) {
        running.removeValue(forKey: key)
        routineRunning.removeValue(forKey: key)
        if forgotten.remove(key) != nil {
            afterRun.removeValue(forKey: key)
            doorbell.ring()
            return
        }
        if let plan = Self.merge(next, afterRun.removeValue(forKey: key)) { put(key, plan) }
        doorbell.ring()
    }

    /// Learns from a session that ended (or was abandoned), for the value of routine reads.
    public func observe(_ ending: SessionEnding) {
        switch ending {
        case .ended(let age): completionModel.observeEnding(age: age)
        case .abandoned: completionModel.observeAbandoned()
        }
    }

    // MARK: Internals

    /// The account whose budget `key`'s calls spend, when its plan names it (a key woken by a delivery that named
    /// none is not held back: whose budget it spends is known once it runs).
    private func account(of key: WorkKey) -> AccountID? { waiting[key]?.plan.account }

    private func hand(_ key: WorkKey, urgency: Urgency, prepaid: Bool) -> Job {
        let account = urgency == .routine ? ready[key] ?? waiting[key]?.plan.account ?? .default : waiting[key]?.plan.account
        if urgency == .routine, let account { routineRunning[key] = account }
        waiting.removeValue(forKey: key)
        unready(key)
        running[key] = urgency
        return Job(key: key, hinted: hinted.remove(key) != nil, urgency: urgency, prepaid: prepaid, account: account)
    }

    private func put(_ key: WorkKey, _ plan: WorkPlan) {
        sequence += 1
        unready(key)
        waiting[key] = Waiting(plan: plan, sequence: sequence)
        queues[plan.urgency]!.push(DueHeap.Entry(due: plan.due, sequence: sequence, key: key))
    }

    /// Back in their queues: the keys held back whose account's budget has no caller as urgent waiting now.
    private func releaseHeldBack(budgetOf: (AccountID) -> RateLimiter?) {
        for (account, levels) in heldBack {
            let budget = budgetOf(account)
            for (level, entries) in levels where (budget?.waiting(atLeast: level) ?? 0) == 0 {
                for entry in entries { queues[level]!.push(entry) }
                heldBack[account]![level] = nil
            }
            if heldBack[account]!.isEmpty { heldBack[account] = nil }
        }
    }

    /// Keeps `entry` aside until its account's budget has no caller as urgent waiting.
    private func hold(_ entry: DueHeap.Entry, level: Urgency, of account: AccountID) {
        heldBack[account, default: [:]][level, default: []].append(entry)
        // Entries of keys planned again or forgotten meanwhile stay here while the budget stays taken (and the
        // dispatcher keeps looking at its tokens for them): dropped once a list is over twice the number of plans
        // there are, so the pass that drops them is paid for by as many holds.
        if let held = heldBack[account]?[level], held.count > 2 * waiting.count + 1_024 {
            heldBack[account]![level] = held.filter { waiting[$0.key]?.sequence == $0.sequence }
        }
    }

    /// The earliest entry of `level` after dropping stale ones (rescheduled, handed out, or moved to `ready`).
    private func validTop(_ level: Urgency) -> DueHeap.Entry? {
        while let top = queues[level]!.top {
            if let current = waiting[top.key], current.sequence == top.sequence, ready[top.key] == nil { return top }
            queues[level]!.pop()
        }
        return nil
    }

    private func promoteDueRoutine(now: Date) {
        while let top = validTop(.routine), top.due <= now {
            queues[.routine]!.pop()
            markReady(top.key)
            // A read never made or an expiry to confirm outranks everything ranked so far: rank again.
            if let poll = waiting[top.key]?.plan.poll, poll.lastReadAt == nil || poll.expiresAt.map(now.hasReached) == true {
                rankedAt = nil
            }
        }
    }

    /// Up to `count` due routine keys of `account`: by value, every ``fairEvery``-th the one due longest.
    private func pickRoutine(now: Date, count: Int, of account: AccountID) -> [WorkKey] {
        var picked: [WorkKey] = []
        while picked.count < count, readyCounts[account, default: 0] > 0 {
            routinePicks += 1
            let key: WorkKey
            if routinePicks % Self.fairEvery == 0 {
                key =
                    dueLongest(of: account)
                    ?? ready.lazy.filter { $0.value == account }.map(\.key).min {
                        (waiting[$0]?.plan.due ?? now) < (waiting[$1]?.plan.due ?? now)
                    }!
            } else {
                if rankedAt.map({ now.timeIntervalSince($0) >= Self.rankingLifetime }) ?? true { refreshRanking(now: now) }
                while let best = ranking.last, ready[best] == nil { ranking.removeLast() }
                // The ranking holds every account's keys: this account's best is the last of its own.
                guard let index = ranking.lastIndex(where: { ready[$0] == account }) else { rank(now: now); continue }
                key = ranking[index]
            }
            unready(key)
            picked.append(key)
        }
        return picked
    }

    /// `key`, which is due and waiting, joins the routine reads waiting for their account's budget.
    private func markReady(_ key: WorkKey) {
        guard ready[key] == nil else { return }
        let account = waiting[key]?.plan.account ?? .default
        ready[key] = account
        readyCounts[account, default: 0] += 1
        // In place: a copy of the list taken out of the dictionary would copy every entry at each append.
        readyOrder[account, default: (entries: [], head: 0)].entries.append((key, waiting[key]?.sequence ?? 0))
        // Entries of reads taken or planned again pile up behind the head: dropped once they outnumber the live ones.
        if let order = readyOrder[account], order.entries.count - order.head > 2 * readyCounts[account, default: 0] + 1_024 {
            let live = order.entries[order.head...].filter { isDueEntry($0, of: account) }
            readyOrder[account] = (entries: live, head: 0)
        }
    }

    private func isDueEntry(_ entry: (key: WorkKey, sequence: UInt64), of account: AccountID) -> Bool {
        ready[entry.key] == account && waiting[entry.key]?.sequence == entry.sequence
    }

    /// The due routine read of `account` that became due first (the caller takes it: it leaves `ready`); every ready
    /// read has its entry, so nil only if that ever failed (the caller then looks through every due read).
    private func dueLongest(of account: AccountID) -> WorkKey? {
        while let order = readyOrder[account], order.head < order.entries.count, !isDueEntry(order.entries[order.head], of: account) {
            readyOrder[account]?.head += 1
        }
        if let head = readyOrder[account]?.head, head >= 1_024 {
            readyOrder[account]?.entries.removeFirst(head)
            readyOrder[account]?.head = 0
        }
        guard let order = readyOrder[account], order.head < order.entries.count else { return nil }
        return order.entries[order.head].key
    }

    /// `key` no longer waits for a budget (handed out, rescheduled or forgotten).
    private func unready(_ key: WorkKey) {
        guard let account = ready.removeValue(forKey: key) else { return }
        let left = readyCounts[account, default: 1] - 1
        readyCounts[account] = left > 0 ? left : nil
    }

    /// A ranking that is out of date made again: at once when the set is small or none serves meanwhile (the first,
    /// or one an unread read asked for), else a slice further (``rankSlice``).
    private func refreshRanking(now: Date) {
        guard ready.count > Self.rankSlice, rankedAt != nil else { return rank(now: now) }
        var pass = rankPass ?? (keys: Array(ready.keys), done: 0, scored: [], at: now)
        let slice = pass.keys[pass.done..<min(pass.done + Self.rankSlice, pass.keys.count)]
        pass.scored += slice.map { ($0, value(of: $0, now: pass.at)) }
        pass.done += slice.count
        guard pass.done == pass.keys.count else {
            rankPass = pass
            return
        }
        rankPass = nil
        install(pass.scored, at: pass.at)
    }

    private func rank(now: Date) {
        rankPass = nil
        install(ready.keys.map { ($0, value(of: $0, now: now)) }, at: now)
    }

    private func install(_ scored: [(WorkKey, Double)], at now: Date) {
        ranking = scored.sorted { $0.1 < $1.1 }.map(\.0)
        rankedAt = now
    }

    /// What reading `key` now is worth; order rechecks and payment requests have no profile: worth a read when due.
    private func value(of key: WorkKey, now: Date) -> Double {
        waiting[key]?.plan.poll.map { PollValuation.value($0, now: now, model: completionModel) } ?? 1
    }

    private static func merge(_ first: WorkPlan?, _ second: WorkPlan?) -> WorkPlan? {
        guard let first else { return second }
        guard let second else { return first }
        let poll = first.poll ?? second.poll
        return WorkPlan(
            due: min(first.due, second.due), urgency: max(first.urgency, second.urgency), poll: poll, account: first.account ?? second.account)
    }
}

/// A min-heap of keys by due time (then by insertion), for the scheduler's queues.
struct DueHeap {
    struct Entry {
        let due: Date
        let sequence: UInt64
        let key: WorkKey

        func before(_ other: Entry) -> Bool { due != other.due ? due < other.due : sequence < other.sequence }
    }

    private var entries: [Entry] = []

    var top: Entry? { entries.first }

    mutating func push(_ entry: Entry) {
        entries.append(entry)
        var child = entries.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard entries[child].before(entries[parent]) else { return }
            entries.swapAt(child, parent)
            child = parent
        }
    }

    mutating func pop() {
        entries.swapAt(0, entries.count - 1)
        entries.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < entries.count, entries[left].before(entries[smallest]) { smallest = left }
            if right < entries.count, entries[right].before(entries[smallest]) { smallest = right }
            if smallest == parent { return }
            entries.swapAt(parent, smallest)
            parent = smallest
        }
    }
}
