import Foundation
import ReconcilerCore
import ReconcilerStore

/// Which work is due when. A min-heap ordered by due time (stale entries are skipped lazily), plus the set of keys a
/// worker holds: a key is never handed out twice at once, and a wake for a running key runs it again afterwards.
/// Nothing here ticks; the dispatcher sleeps until ``nextDue`` or until the doorbell rings.
public actor Scheduler {
    private struct Entry {
        let due: Date
        let sequence: UInt64
        let key: WorkKey

        func before(_ other: Entry) -> Bool { due != other.due ? due < other.due : sequence < other.sequence }
    }

    private var heap: [Entry] = []
    private var dueByKey: [WorkKey: Date] = [:]
    private var running: Set<WorkKey> = []
    /// Keys woken or rescheduled while running: when to run them once the worker is done.
    private var afterRun: [WorkKey: Date] = [:]
    /// Keys woken by a hint (a webhook, a capture request): the worker reads Klarna even if not due yet.
    private var hinted: Set<WorkKey> = []
    private var sequence: UInt64 = 0
    public nonisolated let doorbell = Doorbell()

    public init() {}

    public var runningCount: Int { running.count }
    public var scheduledCount: Int { dueByKey.count }
    /// Keys due at `now` or earlier that no worker has taken yet.
    public func backlog(now: Date) -> Int { dueByKey.values.count { $0 <= now } }

    /// Sets when `key` is due, replacing any earlier plan.
    public func schedule(_ key: WorkKey, at due: Date) {
        if running.contains(key) {
            afterRun[key] = min(afterRun[key] ?? due, due)
        } else {
            push(key, due)
        }
        doorbell.ring()
    }

    /// Makes `key` due at `time` unless it is due earlier already (a hint, a CLI request). The next run of the key
    /// is told it was hinted.
    public func wake(_ key: WorkKey, at time: Date) {
        hinted.insert(key)
        if running.contains(key) {
            afterRun[key] = min(afterRun[key] ?? time, time)
        } else if let due = dueByKey[key], due <= time {
            return
        } else {
            push(key, time)
        }
        doorbell.ring()
    }

    public struct Job: Sendable, Equatable {
        public let key: WorkKey
        /// Woken by a hint since its last run.
        public let hinted: Bool
    }

    /// Hands out up to `capacity` keys due at `now`, marking them running.
    public func take(now: Date, capacity: Int) -> [Job] {
        var jobs: [Job] = []
        while jobs.count < capacity, let top = validTop(), top.due <= now {
            popTop()
            dueByKey[top.key] = nil
            running.insert(top.key)
            jobs.append(Job(key: top.key, hinted: hinted.remove(top.key) != nil))
        }
        return jobs
    }

    /// When the earliest waiting key is due.
    public func nextDue() -> Date? { validTop()?.due }

    /// A worker is done with `key`; `next` is when it wants to run again (`nil`: finished).
    public func finished(_ key: WorkKey, next: Date?) {
        running.remove(key)
        let woken = afterRun.removeValue(forKey: key)
        if let due = [next, woken].compactMap({ $0 }).min() { push(key, due) }
        doorbell.ring()
    }

    private func push(_ key: WorkKey, _ due: Date) {
        sequence += 1
        dueByKey[key] = due
        heap.append(Entry(due: due, sequence: sequence, key: key))
        siftUp(heap.count - 1)
    }

    /// The top entry after dropping stale ones (rescheduled or already handed out).
    private func validTop() -> Entry? {
        while let top = heap.first {
            if dueByKey[top.key] == top.due, !running.contains(top.key) { return top }
            popTop()
        }
        return nil
    }

    private func popTop() {
        heap.swapAt(0, heap.count - 1)
        heap.removeLast()
        if !heap.isEmpty { siftDown(0) }
    }

    private func siftUp(_ index: Int) {
        var child = index
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].before(heap[parent]) else { return }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private func siftDown(_ index: Int) {
        var parent = index
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < heap.count, heap[left].before(heap[smallest]) { smallest = left }
            if right < heap.count, heap[right].before(heap[smallest]) { smallest = right }
            if smallest == parent { return }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
    }
}
