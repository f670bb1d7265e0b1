import Foundation
import Testing
@testable import ReconcilerCore

@Suite("Takeover of another daemon's work")
struct TakeoverTests {
    let leaseEnded = Date(timeIntervalSince1970: 1_800_000_000)
    let longestCall = Duration.seconds(31)

    func intent(_ state: Intent.State, kind: Intent.Kind = .placeOrder) -> Intent {
        var intent = Intent(key: "k-\(state)", kind: kind, subject: "s", now: leaseEnded)
        intent.state = state
        return intent
    }

    @Test("A sent intent waits until the old holder's lease plus the longest call have passed")
    func sentWaits() {
        let takeover = Takeover(from: "host-a 41", leaseEnded: leaseEnded)
        let settled = leaseEnded.addingTimeInterval(31)
        #expect(takeover.callsSettled(longestCall: longestCall) == settled)
        #expect(takeover.wait(intents: [intent(.sent)], longestCall: longestCall, now: leaseEnded) == settled)
        #expect(takeover.wait(intents: [intent(.confirmed), intent(.sent)], longestCall: longestCall, now: settled.addingTimeInterval(-0.001)) == settled)
        #expect(takeover.wait(intents: [intent(.sent)], longestCall: longestCall, now: settled) == nil)
    }

    @Test("Without a sent intent nothing can be in flight: the work goes on at once")
    func nothingInFlight() {
        let takeover = Takeover(from: "host-a 41", leaseEnded: leaseEnded)
        for state in [Intent.State.intended, .ambiguous, .confirmed, .failed] {
            #expect(takeover.wait(intents: [intent(state)], longestCall: longestCall, now: leaseEnded) == nil)
        }
        #expect(takeover.wait(intents: [], longestCall: longestCall, now: leaseEnded) == nil)
    }
}
