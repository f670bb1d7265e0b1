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
            guard case .retry(let delay) = policy.decide(
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
        #expect(bounded.decide(afterAttempt: 3, elapsed: .seconds(7), disposition: retry, random: FixedRandom(value: 0.5)) == .retry(after: .seconds(2)))
        #expect(bounded.decide(afterAttempt: 3, elapsed: .seconds(9), disposition: retry, random: FixedRandom(value: 0.5)) == .giveUp(.deadlineExceeded))
        // A server hint past the deadline also ends it: better to report now than to wait and fail.
        #expect(bounded.decide(afterAttempt: 1, elapsed: .zero, disposition: .retry(notBefore: .seconds(20)), random: FixedRandom(value: 0)) == .giveUp(.deadlineExceeded))
    }
}

@Suite struct TokenBucketTests {
    let start = Date(timeIntervalSince1970: 1_000)

    @Test func burstIsFreeThenRequestsAreSpacedAtTheRate() {
        var bucket = TokenBucket(ratePerSecond: 10, burst: 3, now: start)
        let waits = (0..<6).map { _ in bucket.reserve(now: start) }
        #expect(waits == [.zero, .zero, .zero, .milliseconds(100), .milliseconds(200), .milliseconds(300)])
    }

    @Test func tokensRefillWithTimeUpToTheBurst() {
        var bucket = TokenBucket(ratePerSecond: 10, burst: 3, now: start)
        for _ in 0..<3 { _ = bucket.reserve(now: start) }
        // 10 s later the bucket holds its burst again, never more.
        let later = start.addingTimeInterval(10)
        let waits = (0..<4).map { _ in bucket.reserve(now: later) }
        #expect(waits == [.zero, .zero, .zero, .milliseconds(100)])
    }

    @Test func pauseHoldsEveryoneUntilTheResetThenRestartsEmpty() {
        var bucket = TokenBucket(ratePerSecond: 10, burst: 5, now: start)
        bucket.pause(until: start.addingTimeInterval(2), now: start)
        #expect(bucket.reserve(now: start) == .milliseconds(2_100))
        #expect(bucket.reserve(now: start) == .milliseconds(2_200))
        // After the pause the budget refills from the pause's end, not from before it.
        let after = start.addingTimeInterval(3)
        #expect(bucket.reserve(now: after) == .zero)
    }

    @Test func aShorterPauseDoesNotShortenALongerOne() {
        var bucket = TokenBucket(ratePerSecond: 1, burst: 1, now: start)
        bucket.pause(until: start.addingTimeInterval(5), now: start)
        bucket.pause(until: start.addingTimeInterval(1), now: start)
        #expect(bucket.reserve(now: start) == .seconds(6))
    }

    @Test func reconfigureChangesTheRateLive() {
        var bucket = TokenBucket(ratePerSecond: 10, burst: 1, now: start)
        _ = bucket.reserve(now: start)
        bucket.reconfigure(ratePerSecond: 2, burst: 1, now: start)
        #expect(bucket.reserve(now: start) == .milliseconds(500))
    }

    @Test func rateIsNeverExceededOverAnyLongWindow() {
        var bucket = TokenBucket(ratePerSecond: 50, burst: 10, now: start)
        var granted: [Double] = []
        var now = start
        for _ in 0..<1_000 {
            let wait = bucket.reserve(now: now)
            granted.append(now.timeIntervalSince(start) + wait.timeInterval)
            now = now.addingTimeInterval(0.001)
        }
        // In any one-second window at most burst + rate requests go out.
        for (index, time) in granted.enumerated() {
            let inWindow = granted[index...].prefix { $0 < time + 1 }.count
            #expect(inWindow <= 60)
        }
    }
}
