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

/// `--wait S`: how long a command that records an intent waits for the daemon's answer.
struct WaitOption: ParsableArguments {
    @Option(help: "Seconds to wait for the daemon's answer (0: do not wait).") var wait: Int = 30

    func validate() throws {
        guard wait >= 0 else { throw ValidationError("--wait must be 0 or more seconds") }
    }
}

/// Refuses a customer token that cannot be one (`TOKEN` of `charge`, `token show`, `token cancel`).
func validateToken(_ token: String) throws {
    guard validID(token) else { throw ValidationError("TOKEN must be 1–255 printable ASCII characters without spaces") }
}

/// `--account ID`: the account a command that creates work is for (``Settings/commandAccount(_:)``).
struct AccountOption: ParsableArguments {
    @Option(help: "The Klarna account (an id of accounts:); by default the only one, else the one named default.") var account: AccountID?
}
