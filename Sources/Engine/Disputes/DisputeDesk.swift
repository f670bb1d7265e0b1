import Foundation
import ReconcilerCore
import ReconcilerStore

/// One dispute as `disputes` prints it and the operators' socket answers it: what Klarna showed, and the operators'
/// actions on it (without files).
public struct DisputeView: Codable, Sendable, Equatable {
    public var dispute: TrackedDispute
    public var actions: [DisputeAction]
}

/// How an operator's dispute action ended, as far as the wait saw.
public enum DisputeActionAnswer: Sendable, Equatable {
    /// Not recorded: what is wrong.
    case refused(String)
    /// Recorded (or the same kind of action under way already: `existing`), and how it stands after the wait.
    case recorded(DisputeAction, existing: Bool)
}

extension OperatorDesk {
    /// `disputes`: nearest deadline first; `dueWithin` keeps those whose deadline falls before `now` plus it, `account`
    /// those of one account.
    public func disputes(openOnly: Bool, dueWithin: Duration?, account: AccountID?, now: Date) async throws -> [DisputeView] {
        let disputes = try await store.disputes(
            openOnly: openOnly, dueBefore: dueWithin.map { now.addingTimeInterval($0.timeInterval) }, account: account)
        let actions = Dictionary(grouping: try await store.disputeActions(disputeIDs: disputes.map(\.id)), by: \.disputeID)
        return disputes.map { DisputeView(dispute: $0, actions: actions[$0.id] ?? []) }
    }

    /// Records an operator's action on a dispute for the dispute service, rings it, and waits up to `wait` for the
    /// action to end. The daemon reads the dispute before sending, and decides there whether its state takes it.
    public func request(_ action: DisputeAction, now: Date, wait: Duration) async throws -> DisputeActionAnswer {
        let recorded: DisputeAction
        let existing: Bool
        do {
            switch try await store.request(action, at: now) {
            case .recorded(let new): (recorded, existing) = (new, false)
            case .existing(let old): (recorded, existing) = (old, true)
            }
        } catch let problem as DisputeActionProblem {
            return .refused(problem.reason)
        }
        disputeBells.ringAll()
        let deadline = ContinuousClock.now + wait
        var current = recorded
        while !current.isFinished, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
            current = try await store.disputeAction(recorded.id)?.redacted ?? current
        }
        return .recorded(current, existing: existing)
    }
}
