import Foundation
import Testing
@testable import Ingest
@testable import ReconcilerCore
import Logging
import ReconcilerStore
import SQLiteBackend
import TestSupport

@Suite("Webhooks: shapes, tokens, signatures")
struct WebhookTests {
    let tokens = CallbackTokens(key: Array("callback-key-0123456789abcdef".utf8))
    let signingKey = Array("kn-signing-key-1".utf8)
    var reader: WebhookReader {
        WebhookReader(tokens: tokens, policy: .require, signingKeys: SigningKeys(["krn:key:1": signingKey, "krn:key:2": Array("second".utf8)]))
    }

    func json(_ text: String) -> [UInt8] { Array(text.utf8) }

    func hpp(
        token: String? = nil, kp: String = "kp-1", body: String = #"{"event_id":"e-1","session":{"session_id":"hpp-1","status":"COMPLETED"}}"#
    ) -> Delivery {
        var query = ["kp_session_id": kp, "hpp_session_id": "hpp-1"]
        query["token"] = token ?? tokens.token(.hppStatus, kpSessionID: kp)
        return Delivery(route: .hppStatus, query: query, body: json(body))
    }

    func rejection(_ delivery: Delivery, reader: WebhookReader? = nil) -> Rejection? {
        do {
            _ = try (reader ?? self.reader).read(delivery)
            return nil
        } catch {
            return error
        }
    }

    @Test("Callback tokens: verify what they mint, per kind and KP session, and nothing else")
    func callbackTokens() {
        let token = tokens.token(.hppStatus, kpSessionID: "kp-1")
        #expect(token.count == 43)
        #expect(tokens.isValid(token, .hppStatus, kpSessionID: "kp-1"))
        #expect(!tokens.isValid(token, .kpAuthorization, kpSessionID: "kp-1"))
        #expect(!tokens.isValid(token, .hppStatus, kpSessionID: "kp-2"))
        #expect(!CallbackTokens(key: Array("other".utf8)).isValid(token, .hppStatus, kpSessionID: "kp-1"))
        for junk in ["", "x", String(repeating: "A", count: 43), token + "A", "!!!!"] {
            #expect(!tokens.isValid(junk, .hppStatus, kpSessionID: "kp-1"))
        }
        let url = tokens.url(.hppStatus, kpSessionID: "kp 1/x", base: "https://shop.example/klarna/hpp")
        #expect(
            url
                == "https://shop.example/klarna/hpp?kp_session_id=kp%201%2Fx&token=\(tokens.token(.hppStatus, kpSessionID: "kp 1/x"))&hpp_session_id={{session_id}}"
        )
        #expect(!tokens.url(.kpAuthorization, kpSessionID: "k", base: "https://a/b?x=1").contains("hpp_session_id"))
        #expect(tokens.url(.kpAuthorization, kpSessionID: "k", base: "https://a/b?x=1").hasPrefix("https://a/b?x=1&kp_session_id=k&token="))
    }

    @Test("Klarna Network signatures: any configured key, raw body, constant-time compare; every failure named")
    func signatures() {
        let keys = SigningKeys(["krn:key:1": signingKey, "krn:key:2": Array("second".utf8)])
        let body = json(#"{"metadata":{"event_id":"1"},"payload":{}}"#)
        let signature = SigningKeys.sign(body: body, key: signingKey)
        #expect(signature.count == 64)
        #expect(keys.check(body: body, signature: signature, keyID: "krn:key:1") == nil)
        #expect(keys.check(body: body, signature: signature.uppercased(), keyID: "krn:key:1") == nil)
        #expect(keys.check(body: body, signature: SigningKeys.sign(body: body, key: Array("second".utf8)), keyID: "krn:key:2") == nil)
        #expect(keys.check(body: body + [0x20], signature: signature, keyID: "krn:key:1") == .mismatch)
        #expect(keys.check(body: body, signature: signature, keyID: "krn:key:2") == .mismatch)
        #expect(keys.check(body: body, signature: signature, keyID: "krn:key:9") == .unknownKey("krn:key:9"))
        #expect(keys.check(body: body, signature: nil, keyID: "krn:key:1") == .missingHeaders)
        #expect(keys.check(body: body, signature: "zz" + signature.dropFirst(2), keyID: "krn:key:1") == .mismatch)
        #expect(keys.check(body: body, signature: String(signature.dropLast()), keyID: "krn:key:1") == .mismatch)
    }

    @Test("Each kind is read by route and by shape, with the same result")
    func kinds() throws {
        let kn =
            #"{"metadata":{"event_type":"payment.request.state-change.completed","event_id":"ev-9"},"payload":{"payment_request_id":"krn:payment:eu1:request:1","state":"COMPLETED"}}"#
        let knHeaders = [("Klarna-Signature", SigningKeys.sign(body: json(kn), key: signingKey)), ("Klarna-Signing-Key-Id", "krn:key:1")]
        let kpQuery = ["kp_session_id": "kp-1", "token": tokens.token(.kpAuthorization, kpSessionID: "kp-1")]
        let cases: [(Delivery.Route, [String: String], [(String, String)], String, Webhook)] = [
            (
                .hppStatus, hpp().query, [], #"{"event_id":"e-1","session":{"session_id":"hpp-1","status":"COMPLETED"}}"#,
                .hppStatus(eventID: "e-1", hppSessionID: "hpp-1", kpSessionID: "kp-1", status: "COMPLETED")
            ),
            (
                .kpAuthorization, kpQuery, [], #"{"authorization_token":"tok-123456789","session_id":"kp-1"}"#,
                .kpAuthorization(
                    kpSessionID: "kp-1", authorizationTokenTail: "456789",
                    tokenDigest: "c8c1b5e8a2d4b2fb43b3fb4b4bd2b9ad3c7a6e5cbbd3c7fe0bb0d14a4a5c5d0a")
            ),
            (
                .omNotification, [:], [], #"{"order_id":"o-1","event_type":"FRAUD_RISK_ACCEPTED"}"#,
                .omNotification(orderID: "o-1", eventType: "FRAUD_RISK_ACCEPTED")
            ),
            (
                .klarnaNetwork, [:], knHeaders, kn,
                .klarnaNetwork(
                    eventID: "ev-9", eventType: "payment.request.state-change.completed", paymentRequestID: "krn:payment:eu1:request:1",
                    state: "COMPLETED", merchantID: nil)
            ),
            (
                .track, [:], [],
                #"{"hpp_session_id":"h","kp_session_id":"k","capture":"on_request","intent":"buy_and_tokenize","merchant_reference":"shop 1"}"#,
                .track(
                    TrackRequest(
                        hppSessionID: "h", kpSessionID: "k", mode: nil, merchantReference: "shop 1", capture: .onRequest, purpose: .buyAndTokenize))
            ),
        ]
        for (route, query, headers, body, expected) in cases {
            let byRoute = try reader.read(Delivery(route: route, query: query, headers: headers.map { (name: $0.0, value: $0.1) }, body: json(body)))
                .0
            let byShape = try reader.read(
                Delivery(route: .byShape, query: query, headers: headers.map { (name: $0.0, value: $0.1) }, body: json(body))
            ).0
            if case .kpAuthorization(let kp, let tail, _, _) = expected {
                guard case .kpAuthorization(kp, tail, let digest, _) = byRoute else { Issue.record("\(byRoute)"); continue }
                #expect(digest.count == 64 && !digest.contains("tok-"))
            } else {
                #expect(byRoute == expected)
            }
            #expect(byShape == byRoute)
        }
        #expect(
            try reader.read(Delivery(route: .capture(orderID: "o-1"), body: json(#"{"amount":2500}"#))).0
                == .capture(orderID: "o-1", amount: 2_500, requestID: nil))
        #expect(
            try reader.read(Delivery(route: .byShape, body: json(#"{"order_id":"o-1","request_id":"r-7"}"#))).0
                == .capture(orderID: "o-1", amount: nil, requestID: "r-7"))
    }

    @Test("Repeats share a dedupe key; the KP token never appears in it")
    func dedupeKeys() throws {
        #expect(Webhook.hppStatus(eventID: "e", hppSessionID: "h", kpSessionID: nil, status: nil).dedupeKey == "hpp-event:e")
        let (kp, _) = try reader.read(
            Delivery(
                route: .kpAuthorization, query: ["kp_session_id": "kp-1", "token": tokens.token(.kpAuthorization, kpSessionID: "kp-1")],
                body: json(#"{"authorization_token":"secret-token-value","session_id":"kp-1"}"#)))
        #expect(kp.dedupeKey?.hasPrefix("kp-authorization:") == true)
        #expect(kp.dedupeKey?.contains("secret") == false)
        #expect(
            Webhook.track(TrackRequest(hppSessionID: "h", kpSessionID: "k", mode: nil, merchantReference: nil, capture: nil, purpose: .buy)).dedupeKey
                == nil)
        #expect(Webhook.capture(orderID: "o", amount: nil, requestID: nil).dedupeKey == nil)
    }

    @Test(
        "Hostile and malformed input: each refused with its reason",
        arguments: [
            ("", 400, "empty_body"), ("{", 400, "malformed_json"), ("[1,2]", 400, "malformed_json"), ("\u{0}{}", 400, "bad_encoding"),
            (#"{"event_id":1,"session":{"session_id":"hpp-1"}}"#, 400, "bad_field"),
            (#"{"event_id":"e","session":"hpp-1"}"#, 400, "bad_field"),
            (#"{"session":{"session_id":"hpp-1"}}"#, 400, "missing_field"),
            (#"{"event_id":"e with space","session":{"session_id":"hpp-1"}}"#, 400, "bad_field"),
            (#"{"event_id":"e","session":{"session_id":"other"}}"#, 400, "mismatch"),
        ])
    func hostile(body: String, status: Int, error: String) {
        let result = rejection(hpp(body: body))
        #expect(result?.status == status, "\(body)")
        #expect(result?.error == error, "\(body): \(result?.description ?? "accepted")")
    }

    @Test("Invalid UTF-8 and unknown shapes and event types are refused")
    func encodingAndKinds() {
        #expect(rejection(Delivery(route: .byShape, body: [0x7B, 0xFF, 0xFE, 0x7D]))?.error == "bad_encoding")
        #expect(rejection(Delivery(route: .byShape, body: json(#"{"hello":"world"}"#)))?.error == "unknown_kind")
        #expect(
            rejection(Delivery(route: .omNotification, body: json(#"{"order_id":"o","event_type":"FRAUD_RISK_MAYBE"}"#)))?.error
                == "unknown_event_type")
        let kn = #"{"metadata":{"event_type":"payment.refund.done","event_id":"1"},"payload":{}}"#
        let signed = Delivery(
            route: .klarnaNetwork,
            headers: [("Klarna-Signature", SigningKeys.sign(body: json(kn), key: signingKey)), ("Klarna-Signing-Key-Id", "krn:key:1")], body: json(kn)
        )
        #expect(rejection(signed)?.error == "unknown_event_type")
    }

    @Test(
        "Dispute webhooks (v4): a signed state change or update names its dispute, by route and by shape; older generations' names, ids over 100 characters and unsigned ones are refused"
    )
    func disputes() throws {
        func delivery(
            _ eventType: String, id: String = "krn:network:eu1:live:payment:dispute:7", route: Delivery.Route = .klarnaNetwork, sign: Bool = true
        )
            -> Delivery
        {
            let body = json(
                #"{"metadata":{"event_type":"\#(eventType)","event_id":"dv-1"},"payload":{"payment_dispute_id":"\#(id)","order_id":"o-1","state":"INITIATED"}}"#
            )
            let headers =
                sign
                ? [
                    (name: "Klarna-Signature", value: SigningKeys.sign(body: body, key: signingKey)),
                    (name: "Klarna-Signing-Key-Id", value: "krn:key:1"),
                ] : []
            return Delivery(route: route, headers: headers, body: body)
        }
        let expected = Webhook.klarnaDispute(
            eventID: "dv-1", eventType: "payment.dispute.state-change.initiated", disputeID: "krn:network:eu1:live:payment:dispute:7", orderID: "o-1",
            merchantID: nil)
        #expect(try reader.read(delivery("payment.dispute.state-change.initiated")).0 == expected)
        #expect(try reader.read(delivery("payment.dispute.state-change.initiated", route: .byShape)).0 == expected)
        #expect(expected.dedupeKey == "kn-event:dv-1" && expected.kind == "klarna_dispute")
        guard case .klarnaDispute = try reader.read(delivery("payment.dispute.updated.representment-deadline-extended")).0 else {
            Issue.record("a v4 update is a hint"); return
        }
        #expect(rejection(delivery("payment.dispute.state-change.arbitration-pending"))?.error == "unknown_event_type")
        #expect(rejection(delivery("payment.dispute.state-change.closed", id: String(repeating: "x", count: 101)))?.error == "bad_field")
        #expect(rejection(delivery("payment.dispute.state-change.closed", sign: false))?.error == "bad_signature")
        let record = try Ingestor.record(
            expected, warning: nil, source: "socket",
            accounts: AccountRouting([.init(id: .default, merchantID: nil, capturePolicy: .immediate)]), now: Date())
        guard case .hintDispute(let hint) = record.action else { Issue.record("\(record.action)"); return }
        #expect(hint == DisputeHint(disputeID: "krn:network:eu1:live:payment:dispute:7", account: .default) && record.dedupeKey == "kn-event:dv-1")
    }

    @Test(
        "With several accounts, a delivery whose payment's account cannot be read is a 503 (the sender tries again), and nothing is recorded"
    )
    func accountCheckUnavailable() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/state.sqlite")
        let us = try #require(AccountID(rawValue: "us"))
        let accounts = AccountRouting([
            .init(id: .default, merchantID: "K100001", capturePolicy: .immediate), .init(id: us, merchantID: "K200002", capturePolicy: .immediate),
        ])
        let ingestor = Ingestor(
            rules: Ingestor.Rules(reader: WebhookReader(tokens: nil, policy: .require, signingKeys: SigningKeys([:])), accounts: accounts),
            store: FaultyStore(store, failAccountReads: true), clock: SystemClock(), logger: Logger(label: "test")
        ) { _, _ in }
        let body = #"{"hpp_session_id":"h-1","kp_session_id":"k-1","account":"us"}"#
        let answer = await ingestor.ingest(Delivery(route: .track, body: Array(body.utf8)), source: "socket")
        #expect(answer.status == 503 && answer.word == "store_unavailable", "\(answer)")
        #expect(try await store.session("h-1") == nil)
    }

    @Test("A dispute webhook goes to the account whose merchant id it carries; one naming no configured merchant is refused")
    func disputeWebhookRouting() throws {
        let us = try #require(AccountID(rawValue: "us"))
        let accounts = AccountRouting([
            .init(id: .default, merchantID: "K100001", capturePolicy: .immediate), .init(id: us, merchantID: "K200002", capturePolicy: .immediate),
        ])
        func webhook(_ merchantID: String?) -> Webhook {
            .klarnaDispute(
                eventID: "dv-2", eventType: "payment.dispute.state-change.initiated", disputeID: "d-2", orderID: nil, merchantID: merchantID)
        }
        for (merchant, account) in [("K200002", us), ("K100001", AccountID.default)] {
            let record = try Ingestor.record(webhook(merchant), warning: nil, source: "socket", accounts: accounts, now: Date())
            guard case .hintDispute(let hint) = record.action else { Issue.record("\(record.action)"); continue }
            #expect(hint == DisputeHint(disputeID: "d-2", account: account), "\(merchant)")
            #expect(record.summary.contains("of account \(account)"))
        }
        // The work a delivery wakes is weighed against the budget of the account it names from its first run.
        let callback = try Ingestor.record(
            .hppStatus(eventID: "e-1", hppSessionID: "h-1", kpSessionID: "k-1", status: "COMPLETED", account: us), warning: nil, source: "socket",
            accounts: accounts, now: Date())
        #expect(callback.account == us)
        for merchant in ["K999999", nil] {
            do throws(Rejection) {
                _ = try Ingestor.record(webhook(merchant), warning: nil, source: "socket", accounts: accounts, now: Date())
                Issue.record("a dispute webhook of merchant \(merchant ?? "none") was routed")
            } catch {
                #expect(error.status == 422 && error.error == "unknown_account")
            }
        }
    }

    @Test("Klarna Network: unsigned, forged, altered or unknown-key deliveries are 400 before the body is read")
    func networkSignatures() {
        let body = #"{"metadata":{"event_type":"payment.request.state-change.completed","event_id":"1"},"payload":{}}"#
        let signature = SigningKeys.sign(body: json(body), key: signingKey)
        let cases: [[(name: String, value: String)]] = [
            [], [("Klarna-Signature", signature)], [("Klarna-Signing-Key-Id", "krn:key:1")],
            [("Klarna-Signature", SigningKeys.sign(body: json(body), key: Array("forged".utf8))), ("Klarna-Signing-Key-Id", "krn:key:1")],
            [("Klarna-Signature", signature), ("Klarna-Signing-Key-Id", "krn:key:404")],
        ]
        for headers in cases {
            #expect(rejection(Delivery(route: .klarnaNetwork, headers: headers, body: json(body)))?.status == 400)
        }
        // Replayed with an altered body.
        let altered = body.replacingOccurrences(of: "completed", with: "canceled")
        #expect(
            rejection(
                Delivery(
                    route: .klarnaNetwork, headers: [("Klarna-Signature", signature), ("Klarna-Signing-Key-Id", "krn:key:1")], body: json(altered)))?
                .error == "bad_signature")
        // Header names are case-insensitive (SDK docs spell Klarna-Signing-Key-ID).
        #expect(
            rejection(
                Delivery(route: .klarnaNetwork, headers: [("klarna-signature", signature), ("KLARNA-SIGNING-KEY-ID", "krn:key:1")], body: json(body)))
                == nil)
        // No keys configured: nothing is accepted.
        let unconfigured = WebhookReader(tokens: tokens, policy: .require, signingKeys: SigningKeys([:]))
        #expect(
            rejection(
                Delivery(
                    route: .klarnaNetwork, headers: [("Klarna-Signature", signature), ("Klarna-Signing-Key-Id", "krn:key:1")], body: json(body)),
                reader: unconfigured)?.detail.contains("no webhook-signing-keys") == true)
    }

    @Test("Callback tokens on HPP and KP callbacks: missing 401, wrong 403; policy warn accepts with a warning")
    func tokenPolicy() throws {
        var missing = hpp()
        missing.query["token"] = nil
        #expect(rejection(missing)?.status == 401)
        #expect(rejection(hpp(token: tokens.token(.kpAuthorization, kpSessionID: "kp-1")))?.status == 403)
        #expect(rejection(hpp(token: "forged"))?.status == 403)
        let noKey = WebhookReader(tokens: nil, policy: .require, signingKeys: SigningKeys([:]))
        #expect(rejection(hpp(), reader: noKey)?.status == 403)
        let lenient = WebhookReader(tokens: tokens, policy: .warn, signingKeys: SigningKeys([:]))
        let (webhook, warning) = try lenient.read(hpp(token: "forged"))
        #expect(webhook.kind == "hpp_status")
        #expect(warning?.contains("policy warn") == true)
        #expect(try reader.read(hpp()).warning == nil)
    }

    @Test("Routes with a token or a signature refuse a forged request before its body is read")
    func authenticateBeforeParsing() {
        // Bodies no parser should ever see: each would fail to parse, and the answer names the token or signature.
        let hostile = ["[" + String(repeating: #"{"a":1},"#, count: 10_000) + "{}]", String(repeating: "[", count: 100_000), "not json at all"]
        for body in hostile {
            #expect(rejection(hpp(token: "forged", body: body))?.error == "bad_token")
            var missing = hpp(body: body)
            missing.query["token"] = nil
            #expect(rejection(missing)?.error == "missing_token")
            let kp = Delivery(route: .kpAuthorization, query: ["kp_session_id": "kp-1", "token": "forged"], body: json(body))
            #expect(rejection(kp)?.error == "bad_token")
            let unsigned = Delivery(route: .klarnaNetwork, body: json(body))
            #expect(rejection(unsigned)?.error == "bad_signature")
            let wronglySigned = Delivery(
                route: .klarnaNetwork,
                headers: [
                    ("Klarna-Signature", SigningKeys.sign(body: json(body), key: Array("forged".utf8))), ("Klarna-Signing-Key-Id", "krn:key:1"),
                ], body: json(body))
            #expect(rejection(wronglySigned)?.error == "bad_signature")
        }
        // The KP callback's token is checked against the session in its URL, which the body must then repeat.
        let noSessionInURL = Delivery(
            route: .kpAuthorization, query: ["token": tokens.token(.kpAuthorization, kpSessionID: "kp-1")],
            body: json(#"{"authorization_token":"t","session_id":"kp-1"}"#))
        #expect(rejection(noSessionInURL)?.status == 401)
        let otherSession = Delivery(
            route: .kpAuthorization, query: ["kp_session_id": "kp-1", "token": tokens.token(.kpAuthorization, kpSessionID: "kp-1")],
            body: json(#"{"authorization_token":"t","session_id":"kp-2"}"#))
        #expect(rejection(otherSession)?.error == "mismatch")
        // A verified body is still read within bounds.
        #expect(rejection(hpp(body: String(repeating: "[", count: 100_000)))?.error == "too_deep")
        #expect(
            rejection(hpp(body: #"{"event_id":"e-1","session":{"session_id":"hpp-1"},"x":""# + String(repeating: "y", count: 20_000) + #""}"#))?.error
                == "too_long")
    }

    @Test("Unsigned routes and spool files are read within bounds, keeping only their fields")
    func boundedUnsigned() {
        let cases: [(Delivery.Route, String, String)] = [
            (.omNotification, "[" + String(repeating: "{},", count: 5_000) + "{}]", "too_many_values"),
            (.track, String(repeating: #"{"a":"#, count: 40) + "1" + String(repeating: "}", count: 40), "too_deep"),
            (.capture(orderID: "o-1"), #"{"amount":"# + String(repeating: "9", count: 100) + "}", "too_long"),
            (.byShape, #"{"order_id":"o","order_id":"p"}"#, "duplicate_key"),
            (.byShape, #"{"hpp_session_id":"h","kp_session_id":"k","note":""# + String(repeating: "n", count: 20_000) + #""}"#, "too_long"),
        ]
        for (route, body, error) in cases {
            #expect(rejection(Delivery(route: route, body: json(body)))?.error == error, "\(route): \(body.prefix(60))")
        }
    }

    @Test("An HPP callback whose session omits session_id (the spec requires none) is the session its URL names")
    func hppSessionFromURL() throws {
        let (webhook, _) = try reader.read(hpp(body: #"{"event_id":"e-2","session":{"status":"COMPLETED"}}"#))
        #expect(webhook == .hppStatus(eventID: "e-2", hppSessionID: "hpp-1", kpSessionID: "kp-1", status: "COMPLETED"))
        var unnamed = hpp(body: #"{"event_id":"e-2","session":{"status":"COMPLETED"}}"#)
        unnamed.query["hpp_session_id"] = "{{session_id}}"
        #expect(rejection(unnamed)?.error == "missing_field")
    }

    @Test(
        "Track and capture requests: enums and amounts are checked",
        arguments: [
            (#"{"hpp_session_id":"h"}"#, "missing_field"), (#"{"hpp_session_id":"h","kp_session_id":"k","capture":"sometimes"}"#, "bad_field"),
            (#"{"hpp_session_id":"h","kp_session_id":"k","place_order_mode":"none"}"#, "bad_field"),
            (#"{"hpp_session_id":"h","kp_session_id":"k","intent":7}"#, "bad_field"),
            (#"{"hpp_session_id":"h","kp_session_id":"k","merchant_reference":""}"#, "bad_field"),
        ])
    func trackValidation(body: String, error: String) {
        #expect(rejection(Delivery(route: .track, body: json(body)))?.error == error)
    }

    @Test(
        "Capture amounts must be positive whole minor units",
        arguments: [#"{"amount":true}"#, #"{"amount":1.5}"#, #"{"amount":-1}"#, #"{"amount":0}"#, #"{"amount":"100"}"#])
    func captureAmounts(body: String) {
        #expect(rejection(Delivery(route: .capture(orderID: "o"), body: json(body)))?.error == "bad_field")
    }

    @Test("A refund request: amount, reference and description read within Klarna's limits; other fields ignored")
    func refundRequest() throws {
        #expect(
            try reader.read(
                Delivery(route: .refund(orderID: "o-1"), body: json(#"{"amount":2500,"reference":"rma 1","description":"shoes","x":[1]}"#))
            ).0
                == .refund(RefundAsk(orderID: "o-1", amount: 2_500, reference: "rma 1", description: "shoes")))
        #expect(
            try reader.read(Delivery(route: .refund(orderID: "o-1"), body: json(#"{"amount":1,"reference":"r","description":null}"#))).0
                == .refund(RefundAsk(orderID: "o-1", amount: 1, reference: "r")))
        #expect(Webhook.refund(RefundAsk(orderID: "o", amount: 1, reference: "r")).dedupeKey == nil, "a repeat is told by its intent")
    }

    @Test(
        "Refund requests that Klarna would not take are refused with the field",
        arguments: [
            (#"{"reference":"r"}"#, "missing_field", "amount"), (#"{"amount":0,"reference":"r"}"#, "bad_field", "amount"),
            (#"{"amount":10}"#, "missing_field", "reference"), (#"{"amount":10,"reference":""}"#, "bad_field", "reference"),
            (#"{"amount":10,"reference":7}"#, "bad_field", "reference"),
            (#"{"amount":10,"reference":"\#(String(repeating: "r", count: 256))"}"#, "bad_field", "reference"),
            (#"{"amount":10,"reference":"a\u0000b"}"#, "bad_field", "reference"),
            (#"{"amount":10,"reference":"r","description":"\#(String(repeating: "d", count: 256))"}"#, "bad_field", "description"),
            (#"{"amount":10,"reference":"r","reference":"s"}"#, "duplicate_key", "reference"),
        ])
    func refundValidation(body: String, error: String, field: String) {
        let refused = rejection(Delivery(route: .refund(orderID: "o"), body: json(body)))
        #expect(refused?.error == error, "\(body)")
        #expect(refused?.detail.contains(field) == true, "\(refused?.detail ?? "")")
    }
}
