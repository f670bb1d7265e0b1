import ArgumentParser
import Foundation
import Ingest

struct QuarantineCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "quarantine", abstract: "Spool files that were refused, with why.",
        subcommands: [List.self, Show.self, Requeue.self])

    static func spool(_ options: ConfigOptions) async throws -> Spool {
        let settings = try await options.load(needsKlarnaPassword: false)
        guard let directory = settings.spoolDirectory else {
            printError("klarna-reconciler: the spool is turned off (ingest.spool_dir is empty)")
            throw ExitCode.failure
        }
        return Spool(directory: directory, maxFileBytes: settings.ingestMaxBodyBytes + (64 << 10), keepDone: settings.spoolKeepDone)
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Every quarantined file: when, which rule, what was wrong.")
        @OptionGroup var options: ConfigOptions

        func run() async throws {
            let spool = try await QuarantineCommand.spool(options)
            let names = spool.names(in: "quarantine")
            if names.isEmpty { print("quarantine is empty (\(spool.directory)/quarantine)") }
            for name in names {
                let reason = spool.reason(of: name)
                print("\(name)  \(reason.map { "\($0.at.formatted(.iso8601))  \($0.rule): \($0.detail)" } ?? "(no reason file)")")
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "One quarantined file: its reason and its first bytes.")
        @Argument(help: "The file name in quarantine/.") var name: String
        @OptionGroup var options: ConfigOptions

        func run() async throws {
            let spool = try await QuarantineCommand.spool(options)
            guard Spool.isSafeName(name), let reason = spool.reason(of: name) else {
                printError("klarna-reconciler: no quarantined file \(name)")
                throw ExitCode.failure
            }
            print("file:   \(spool.directory)/quarantine/\(name)")
            print("at:     \(reason.at.formatted(.iso8601))")
            print("rule:   \(reason.rule)\(reason.status.map { " (HTTP \($0) on the socket)" } ?? "")")
            print("detail: \(reason.detail)")
            // lstat first: a quarantined symlink or FIFO is never opened.
            var info = stat()
            if lstat("\(spool.directory)/quarantine/\(name)", &info) == 0, info.st_mode & S_IFMT == S_IFREG,
                let handle = FileHandle(forReadingAtPath: "\(spool.directory)/quarantine/\(name)")
            {
                let head = handle.readData(ofLength: 512)
                print("first \(head.count) bytes (callback and authorization tokens hidden):")
                let text = QuarantineCommand.redacted(String(decoding: head, as: UTF8.self))
                print(
                    String(
                        text.map { (character: Character) -> Character in
                            let printable =
                                character.isASCII && (character.isLetter || character.isNumber || character.isPunctuation || character.isSymbol)
                            return printable || character == " " || character == "\n" ? character : "·"
                        }))
            }
        }
    }

    /// A callback token lets anyone deliver for that session, an authorization token places an order: neither is
    /// printed.
    static func redacted(_ text: String) -> String {
        var text = text
        for pattern in [#"(token=)[^&\s]+"#, #"("authorization_token"\s*:\s*")[^"]*"#] {
            text = text.replacingOccurrences(of: pattern, with: "$1…", options: .regularExpression)
        }
        return text
    }

    struct Requeue: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Moves a quarantined file back to new/ for another try (after fixing what was wrong).")
        @Argument(help: "The file name in quarantine/.") var name: String
        @OptionGroup var options: ConfigOptions

        func run() async throws {
            let spool = try await QuarantineCommand.spool(options)
            do {
                try spool.requeue(name)
            } catch {
                printError("klarna-reconciler: \(error.detail)")
                throw ExitCode.failure
            }
            print("\(name) is back in \(spool.directory)/new/")
        }
    }
}
