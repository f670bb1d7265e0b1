import Foundation
import Testing
@testable import Engine
import ReconcilerCore

@Suite("The rate budget shared by several daemons")
struct BudgetShareTests {
    @Test("Each daemon spends the configured budget divided by the live daemons; a reload keeps the division")
    func share() {
        let clock = ManualClock()
        let limiter = RateLimiter(ratePerSecond: 30, burst: 30, reserve: 0, clock: clock)
        let budget = BudgetShare(limiter: limiter, ratePerSecond: 30, burst: 30)
        budget.daemons(3)
        #expect(budget.share == (10, 10, 3))
        // The limiter holds no more than the share's burst, and refills at the share's rate.
        #expect(limiter.takeSpare(limit: 100) == 10)
        clock.advance(by: .seconds(1))
        #expect(limiter.takeSpare(limit: 100) == 10)
        budget.configure(ratePerSecond: 60, burst: 2)
        #expect(budget.share == (20, 1, 3), "never less than one token of burst")
        budget.daemons(0)
        #expect(budget.share == (60, 2, 1), "a count below one is this daemon alone")
    }
}
