import Foundation
import Logging
import ReconcilerCore
@testable import SystemdSupport
import Testing

@Suite("journald entries")
struct JournalTests {
    @Test("Metadata keys become valid journal field names; journald would silently drop the others")
    func fieldNames() {
        #expect(JournalLogHandler.fieldName("order_id") == "ORDER_ID")
        #expect(JournalLogHandler.fieldName("klarna.correlation_id") == "KLARNA_CORRELATION_ID")
        #expect(JournalLogHandler.fieldName("request-id") == "REQUEST_ID")
        #expect(JournalLogHandler.fieldName("_private") == "PRIVATE")
        #expect(JournalLogHandler.fieldName("2fa") == "FA")
        #expect(JournalLogHandler.fieldName("ümlaut") == "MLAUT")
        #expect(JournalLogHandler.fieldName("___") == nil)
        #expect(JournalLogHandler.fieldName(String(repeating: "a", count: 100))?.count == 64)
        #expect(JournalLogHandler.fieldName(MessageID.metadataKey) == "MESSAGE_ID")
    }

    @Test("An entry carries MESSAGE, PRIORITY, SYSLOG_IDENTIFIER, CODE_*, MESSAGE_ID and the domain fields")
    func entry() {
        let fields = JournalLogHandler.fields(
            message: "outcome captured", level: .notice, identifier: "klarna-reconciler",
            metadata: [
                "order_id": "o-1", "hpp_session_id": "h-1", "attempt": .stringConvertible(2),
                MessageID.metadataKey: .string(MessageID.captured.rawValue), "message": "spoof",
            ],
            file: "Engine/EventLog.swift", line: 42, function: "log(_:)")
        #expect(
            Array(fields.prefix(6)) == [
                "MESSAGE=outcome captured", "PRIORITY=5", "SYSLOG_IDENTIFIER=klarna-reconciler",
                "CODE_FILE=Engine/EventLog.swift", "CODE_LINE=42", "CODE_FUNC=log(_:)",
            ])
        #expect(fields.contains("ORDER_ID=o-1"))
        #expect(fields.contains("HPP_SESSION_ID=h-1"))
        #expect(fields.contains("ATTEMPT=2"))
        #expect(fields.contains("MESSAGE_ID=\(MessageID.captured.rawValue)"))
        // A metadata key named like a field the handler sets cannot overwrite it.
        #expect(fields.contains("META_MESSAGE=spoof"))
        #expect(fields.filter { $0.hasPrefix("MESSAGE=") } == ["MESSAGE=outcome captured"])
    }

    @Test("A field named like a secret never carries its value")
    func secrets() {
        let fields = JournalLogHandler.fields(
            message: "m", level: .info, identifier: "x",
            metadata: ["klarna_password": "hunter2", "authorization_token": "tok", "client_secret": "s", "idempotency_key": "k"],
            file: "f", line: 1, function: "g")
        #expect(!fields.contains { $0.contains("hunter2") || $0.contains("=tok") || $0.hasSuffix("=s") })
        #expect(fields.contains("KLARNA_PASSWORD=<redacted>"))
        #expect(fields.contains("IDEMPOTENCY_KEY=k"))
    }

    @Test("swift-log levels map to syslog priorities")
    func priorities() {
        #expect(Logger.Level.allCases.map(JournalLogHandler.priority) == [7, 7, 6, 5, 4, 3, 2])
    }

    @Test("Every metric is in the operations guide's table, with its labels")
    func metricsDocumented() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../docs/operations.md").standardized.path
        let text = try String(contentsOfFile: path, encoding: .utf8)
        for name in MetricName.allCases { #expect(text.contains("| `\(name.rawValue)`"), "docs/operations.md does not document \(name.rawValue)") }
        let labels = Urgency.allCases.map(\.label) + SettlementLineResult.allCases.map(\.rawValue) + SettlementFindingKind.allCases.map(\.rawValue)
        for label in labels { #expect(text.contains("`\(label)`"), "docs/operations.md does not name the label \(label)") }
    }

    @Test("Every MESSAGE_ID is in the shipped catalog with a subject, and the catalog has no other")
    func catalog() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../systemd/klarna-reconciler.catalog")
            .standardized.path
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let entries = text.components(separatedBy: "\n-- ").dropFirst()
        let ids = entries.map { String($0.prefix(32)) }
        #expect(Set(ids) == Set(MessageID.allCases.map(\.rawValue)))
        #expect(ids.count == MessageID.allCases.count)
        for entry in entries { #expect(entry.contains("\nSubject: ")) }
        // journald wants 128-bit ids in lower-case hex without dashes.
        for id in MessageID.allCases { #expect(id.rawValue.count == 32 && id.rawValue.allSatisfy { $0.isHexDigit && !$0.isUppercase }) }
    }

    @Test("Outcomes and the events operators act on have a MESSAGE_ID; routine events none")
    func mapping() {
        #expect(Set(OutcomeKind.allCases.map(MessageID.init(outcome:))).count == OutcomeKind.allCases.count)
        #expect(MessageID(event: .attempt) == .sideEffectSent)
        #expect(MessageID(event: .ambiguous) == .sideEffectUnclear)
        #expect(MessageID(event: .status) == nil)
    }
}
