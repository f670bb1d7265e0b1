import Foundation
import Testing
@testable import ReconcilerCore

/// A random source that returns a fixed value, so expected delays are exact.
struct FixedRandom: RandomSource {
    let value: Double
    func nextUnit() -> Double { value }
}

struct TestFailure: RetryClassifiable {
    let retryDisposition: RetryDisposition
}

@Suite struct RetryPolicyTests {
    let policy = RetryPolicy(initialDelay: .seconds(1), multiplier: 2, maxDelay: .seconds(30), maxAttempts: 6)

    @Test func ceilingGrowsExponentiallyAndIsCapped() {
        let ceilings = (1...7).map { policy.backoffCeiling(afterAttempt: $0) }
        #expect(ceilings == [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16), .seconds(30), .seconds(30)])
    }

    @Test(arguments: [0.0, 0.25, 0.999])
    func fullJitterSpansZeroToCeiling(unit: Double) {
        let decision = policy.decide(
            afterAttempt: 3, elapsed: .zero, disposition: .retry(notBefore: nil), random: FixedRandom(value: unit))
        #expect(decision == .retry(after: Duration(timeInterval: 4 * unit)))
    }

    @Test func jitterIsSpreadOverTheWholeWindow() {
        let random = SeededRandomSource(seed: 42)
        let delays = (0..<2_000).map { _ -> Double in
            guard
                case .retry(let delay) = policy.decide(
                    afterAttempt: 4, elapsed: .zero, disposition: .retry(notBefore: nil), random: random)
            else { return -1 }
            return delay.timeInterval
        }
        #expect(delays.allSatisfy { $0 >= 0 && $0 < 8 })
        // Full jitter: roughly uniform, so each quarter of the window gets a fair share.
        for quarter in 0..<4 {
            let count = delays.filter { $0 >= Double(quarter) * 2 && $0 < Double(quarter + 1) * 2 }.count
            #expect(count > 400 && count < 600, "quarter \(quarter) got \(count)")
        }
    }

    @Test func serverHintWinsOverComputedDelayEvenAboveTheCap() {
        let decision = policy.decide(
            afterAttempt: 1, elapsed: .zero, disposition: .retry(notBefore: .seconds(45)),
            random: FixedRandom(value: 0.5))
        // hint + at most initialDelay of jitter
        #expect(decision == .retry(after: .milliseconds(45_500)))
    }

    @Test func notRetryableGivesUpAtOnce() {
        let decision = policy.decide(afterAttempt: 1, elapsed: .zero, disposition: .doNotRetry, random: FixedRandom(value: 0))
        #expect(decision == .giveUp(.notRetryable))
    }

    @Test func maxAttemptsCountsTheFirstAttempt() {
        let retry = RetryDisposition.retry(notBefore: nil)
        #expect(policy.decide(afterAttempt: 5, elapsed: .zero, disposition: retry, random: FixedRandom(value: 0)) == .retry(after: .zero))
        #expect(policy.decide(afterAttempt: 6, elapsed: .zero, disposition: retry, random: FixedRandom(value: 0)) == .giveUp(.attemptsExhausted(6)))
    }

    @Test func deadlineStopsARetryThatWouldOverrunIt() {
        var bounded = policy
        bounded.deadline = .seconds(10)
        let retry = RetryDisposition.retry(notBefore: nil)
        // ceiling after attempt 3 is 4 s; at 0.5 that is 2 s: 7 + 2 < 10 is fine, 9 + 2 is not.
        #expect(
            bounded.decide(afterAttempt: 3, elapsed: .seconds(7), disposition: retry, random: FixedRandom(value: 0.5)) == .retry(after: .seconds(2)))
        #expect(
            bounded.decide(afterAttempt: 3, elapsed: .seconds(9), disposition: retry, random: FixedRandom(value: 0.5)) == .giveUp(.deadlineExceeded))
        // A server hint past the deadline also ends it: better to report now than to wait and fail.
        #expect(
            bounded.decide(afterAttempt: 1, elapsed: .zero, disposition: .retry(notBefore: .seconds(20)), random: FixedRandom(value: 0))
                == .giveUp(.deadlineExceeded))
    }
}
