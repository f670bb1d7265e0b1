import Foundation
import Testing
@testable import ReconcilerCore

@Suite("Completion model and poll value")
struct CompletionModelTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    @Test("The prior: median 3 minutes, two in three sessions end; probabilities behave")
    func prior() {
        let model = CompletionModel()
        #expect(abs(model.median.timeInterval - 180) < 0.001)
        #expect(abs(model.shareEnding - 2.0 / 3.0) < 1e-9)
        #expect(abs(model.cdf(.seconds(180)) - 0.5) < 1e-9)
        #expect(model.cdf(.zero) == 0)
        #expect(model.survival(.seconds(1_000_000)) > 0.33 && model.survival(.seconds(1_000_000)) < 0.34)
        #expect(model.chanceOfEnding(from: .seconds(170), to: .seconds(190)) > model.chanceOfEnding(from: .seconds(3_590), to: .seconds(3_610)))
        #expect(model.chanceOfEnding(from: .seconds(100), to: .seconds(100)) == 0)
    }

    @Test("It learns the median and the share that ends from what it observes")
    func learns() {
        var model = CompletionModel()
        for _ in 0..<2_000 { model.observeEnding(age: .seconds(40)) }
        #expect(abs(model.median.timeInterval - 40) < 3)
        #expect(model.shareEnding > 0.99)
        for _ in 0..<6_000 { model.observeAbandoned() }
        #expect(abs(model.shareEnding - 0.25) < 0.01)
    }

    @Test("A session past expires_at is worth the most, a never-read one next, then by the delay a read would end")
    func value() {
        let model = CompletionModel()
        let expired = PollProfile(
            trackedAt: now.addingTimeInterval(-3_600), lastReadAt: now.addingTimeInterval(-5), expiresAt: now.addingTimeInterval(-1))
        let unread = PollProfile(trackedAt: now)
        let typical = PollProfile(trackedAt: now.addingTimeInterval(-180), lastReadAt: now.addingTimeInterval(-20))
        let justRead = PollProfile(trackedAt: now.addingTimeInterval(-180), lastReadAt: now.addingTimeInterval(-1))
        let abandoned = PollProfile(trackedAt: now.addingTimeInterval(-3_600), lastReadAt: now.addingTimeInterval(-20))
        let values = [expired, unread, typical, abandoned].map { PollValuation.value($0, now: now, model: model) }
        #expect(values == values.sorted(by: >))
        #expect(values[2] > 10 * values[3])
        // Read a second ago, a session at its busiest age is worth less than it will be in ten seconds: reads of one
        // session spread out instead of piling up.
        let value = { (profile: PollProfile, at: Date) in PollValuation.value(profile, now: at, model: model) }
        #expect(value(justRead, now) < value(justRead, now.addingTimeInterval(10)))
        #expect(value(justRead, now) < value(typical, now))
    }

    @Test("Callbacks make polling a safety net; a recent hint counts the session as active again")
    func hints() {
        let model = CompletionModel()
        let plain = PollProfile(trackedAt: now.addingTimeInterval(-180), lastReadAt: now.addingTimeInterval(-30))
        var withCallbacks = plain
        withCallbacks.lastHintAt = now.addingTimeInterval(-3_000)
        #expect(PollValuation.value(withCallbacks, now: now, model: model) < PollValuation.value(plain, now: now, model: model) / 10)
        // An hour-old session hinted a minute ago beats the same session never hinted.
        let old = PollProfile(trackedAt: now.addingTimeInterval(-3_600), lastReadAt: now.addingTimeInterval(-60))
        var hinted = old
        hinted.lastHintAt = now.addingTimeInterval(-60)
        #expect(PollValuation.value(hinted, now: now, model: model) > PollValuation.value(old, now: now, model: model))
    }
}
