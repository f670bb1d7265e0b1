import ArgumentParser
import Foundation
import ReconcilerCore
import ReconcilerStore

/// A request the daemon carries out as an intent (a refund, a charge), made from the command line: recorded as the
/// socket records it, then waited for until the daemon finished it or the wait ran out.
struct IntentRequest {
    let record: IngestRecord
    /// The intent's key, under which the request is recorded once.
    let key: String
    /// `refund`, `charge`: what the refusal says was refused.
    let what: String

    /// Records the request, says what became of it (`accepted`, or `repeated` with when it was first recorded), and
    /// waits up to `wait` seconds for the daemon; the intent as it then stands. Throws the failure exit when refused.
    func submit(
        to store: any IngestStore & WorkStore, wait: Int, accepted: String, repeated: (Date) -> String
    ) async throws -> Intent? {
        switch try await store.ingest(record, at: Date()) {
        case .accepted: print(accepted)
        case .repeated(let since): print(repeated(since))
        case .refused(_, let error, let detail):
            printError("klarna-reconciler: \(what) refused (\(error)): \(detail)")
            throw ExitCode.failure
        }
        let deadline = ContinuousClock.now + .seconds(wait)
        var intent = try await store.intent(key)
        while let current = intent, !current.isFinished, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(200))
            intent = try await store.intent(key)
        }
        return intent
    }

    /// What an intent still under way when the wait ran out says: its state, attempts and last error.
    static func underWay(_ intent: Intent) -> String {
        "not finished yet (\(intent.state.rawValue), \(intent.attempts) attempt(s)\(intent.lastError.map { ", last error: \($0)" } ?? "")): the daemon goes on"
    }
}
