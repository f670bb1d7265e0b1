import Foundation
import Testing

/// What a failed call's status means is decided once: Klarna's answers in `KlarnaAnswer` (ReconcilerCore, mapped by
/// the client as `KlarnaAPIError.answer`), the rules that follow in the core's step functions. The engine compares no
/// status code.
@Suite("The engine decides no HTTP status")
struct NoStatusDecidedTests {
    /// Every code line of Sources/Engine (comments and string literals removed) that names an HTTP status next to a
    /// status, or a range of them.
    static func statusDecisions() throws -> [String] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let engine = root.appendingPathComponent("Sources/Engine")
        let files = try #require(FileManager.default.enumerator(atPath: engine.path)).compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") }
        #expect(files.count > 30, "Sources/Engine was found (\(files.count) files)")
        let status = try pattern()
        var found: [String] = []
        for file in files.sorted() {
            let text = try String(contentsOfFile: engine.appendingPathComponent(file).path, encoding: .utf8)
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let code = Self.code(of: String(line))
                if code.contains(status) { found.append("\(file):\(number + 1): \(line.trimmingCharacters(in: .whitespaces))") }
            }
        }
        return found
    }

    /// A status code next to the word status (either order), or the start of a range of statuses (`400..<500`).
    static func pattern() throws -> Regex<AnyRegexOutput> {
        try Regex(#"(?i)status[^\n]*\b[1-5][0-9]{2}\b|\b[1-5][0-9]{2}\b[^\n]*(?i)status|\b[1-5]00\s*\.\.[.<]"#)
    }

    /// `line` without its `//` comment and with every string literal emptied.
    static func code(of line: String) -> String {
        var code = ""
        var inString = false
        var escaped = false
        var previous: Character = " "
        for character in line {
            if inString {
                if escaped {
                    escaped = false
                } else if character == "\\" {
                    escaped = true
                } else if character == "\"" {
                    inString = false
                    code.append(character)
                }
            } else if character == "/" && previous == "/" {
                code.removeLast()
                break
            } else {
                if character == "\"" { inString = true }
                code.append(character)
            }
            previous = character
        }
        return code
    }

    @Test("no line of Sources/Engine compares an HTTP status")
    func noStatusInTheEngine() throws {
        let found = try Self.statusDecisions()
        #expect(found.isEmpty, "decided in the engine:\n\(found.joined(separator: "\n"))")
    }

    @Test("the check finds a status compared in code, not one in a comment or a message")
    func theCheckCanFail() {
        let pattern = try! Self.pattern()
        #expect(Self.code(of: "case .failure(let error) where error.status == 404:").contains(pattern))
        #expect(Self.code(of: "if let status = error.status, (400..<500).contains(status) {").contains(pattern))
        #expect(!Self.code(of: "// a 404 status is an answer").contains(pattern))
        #expect(!Self.code(of: #"log("Klarna answered status 404 \"gone\"") // 503 status"#).contains(pattern))
        #expect(!Self.code(of: "static let unsettledBatch = 500").contains(pattern))
    }
}
