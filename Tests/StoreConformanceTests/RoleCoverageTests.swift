import Foundation
import Testing

/// ``RoleCoverage/declared`` is every function the store roles declare: read from the protocols' source, so that a
/// function added to a role and to no conformance test shows up as not covered.
@Suite("Store roles, as the conformance suite counts them")
struct RoleCoverageTests {
    @Test("The list the suite counts against names every function of every role a store implements")
    func declaredMatchesTheProtocols() throws {
        let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/ReconcilerStore")
        let roles = Set(RoleCoverage.declared.map { String($0.prefix { $0 != "." }) })
        var found: [String] = []
        for file in try FileManager.default.contentsOfDirectory(atPath: sources.path) where file.hasSuffix(".swift") {
            let text = try String(contentsOf: sources.appendingPathComponent(file), encoding: .utf8)
            // `public protocol Name: …{` up to the closing brace at the start of a line.
            for match in text.matches(of: #/public protocol (\w+)[^{]*\{(?<body>(?:.|\n)*?)\n\}/#) {
                let role = String(match.output.1)
                guard roles.contains(role) else { continue }
                for function in match.output.body.matches(of: #/\n\s*func (\w+)/#) {
                    found.append("\(role).\(function.output.1)")
                }
            }
        }
        // The batch ingest, and the disputes of some orders, share their names with another function of their role.
        let declared = RoleCoverage.declared.map { $0.replacingOccurrences(of: "(batch)", with: "").replacingOccurrences(of: "(orderIDs)", with: "") }
        #expect(found.sorted() == declared.sorted())
        #expect(roles.count == 12)
    }
}
