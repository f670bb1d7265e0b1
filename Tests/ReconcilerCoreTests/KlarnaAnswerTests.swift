import ReconcilerCore
import Testing

@Suite("What a failed Klarna call's answer says")
struct KlarnaAnswerTests {
    @Test("each status is read once: 404 unknown, the account's 401/403/429, other 4xx refusals, the rest unclear")
    func statuses() {
        #expect(KlarnaAnswer(status: 404) == .unknownResource)
        #expect(KlarnaAnswer(status: 400) == .badRequest)
        #expect(KlarnaAnswer(status: 401) == .unauthorized)
        #expect(KlarnaAnswer(status: 403) == .forbidden)
        #expect(KlarnaAnswer(status: 409) == .conflict)
        #expect(KlarnaAnswer(status: 429) == .tooManyRequests)
        #expect(KlarnaAnswer(status: 422) == .otherRefusal(status: 422))
        #expect(KlarnaAnswer(status: 410) == .otherRefusal(status: 410))
        for unclear in [nil, 408, 425, 500, 502, 503, 504, 599, 302] as [Int?] {
            #expect(KlarnaAnswer(status: unclear) == .unclear, "\(String(describing: unclear))")
        }
    }

    @Test("a read ends what it read only when Klarna does not know it; that is no fault of Klarna's")
    func reads() {
        #expect(KlarnaAnswer(status: 404).endsWhatWasRead)
        #expect(!KlarnaAnswer(status: 404).isKlarnaFault)
        for other in [nil, 400, 401, 403, 409, 410, 429, 500, 503] as [Int?] {
            #expect(!KlarnaAnswer(status: other).endsWhatWasRead, "\(String(describing: other)) is read again")
            #expect(KlarnaAnswer(status: other).isKlarnaFault)
        }
    }

    @Test("only a 429 pauses the account")
    func pauses() {
        #expect(KlarnaAnswer(status: 429).pausesTheAccount)
        for other in [nil, 400, 401, 403, 404, 503] as [Int?] { #expect(!KlarnaAnswer(status: other).pausesTheAccount) }
    }

    @Test("a sync drops one resource Klarna refuses (404, 400) and stops for what concerns the account (401, 403, 429)")
    func syncs() {
        #expect(KlarnaAnswer(status: 404).refusesThisResourceOnly)
        #expect(KlarnaAnswer(status: 400).refusesThisResourceOnly)
        for status in [401, 403, 429] {
            #expect(KlarnaAnswer(status: status).concernsTheAccount)
            #expect(!KlarnaAnswer(status: status).refusesThisResourceOnly)
        }
        for other in [nil, 409, 422, 500] as [Int?] {
            #expect(!KlarnaAnswer(status: other).refusesThisResourceOnly)
            #expect(!KlarnaAnswer(status: other).concernsTheAccount)
        }
    }

    @Test("a settlement's order is taken as hidden when OM does not know it (404) or will not show it (403)")
    func hiddenOrders() {
        #expect(KlarnaAnswer(status: 404).hidesTheOrder)
        #expect(KlarnaAnswer(status: 403).hidesTheOrder)
        for other in [nil, 400, 401, 429, 500] as [Int?] { #expect(!KlarnaAnswer(status: other).hidesTheOrder) }
    }

    @Test("an action is refused by every 4xx but 408, 409, 425 and 429, which may go another way when sent again")
    func actions() {
        for refused in [400, 401, 403, 404, 410, 413, 422] { #expect(KlarnaAnswer(status: refused).refusesTheAction, "\(refused)") }
        for open in [nil, 408, 409, 425, 429, 500, 503] as [Int?] {
            #expect(!KlarnaAnswer(status: open).refusesTheAction, "\(String(describing: open))")
        }
    }
}
