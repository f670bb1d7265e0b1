import ChildProcess
import Foundation

/// A command line program run to its end by the tests.
public enum Command {
    /// Runs `executable` to its end and returns its exit status and its output (stdout and stderr), trimmed. The
    /// output goes to a file, not a pipe: `pg_ctl start` leaves the server running with the descriptors it was given,
    /// and a pipe would never reach its end.
    public static func run(
        _ executable: String, _ arguments: [String], environment: [String: String] = [:]
    ) async throws -> (status: Int32, output: String) {
        let outputPath = NSTemporaryDirectory() + "klarna-reconciler-command-output-" + UUID().uuidString.prefix(8)
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: outputPath) }
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        defer { try? output.close() }
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = output
        process.standardError = output
        try process.run()
        // Polled, not waitUntilExit(): that blocks a thread of the task pool on a run loop that never reaps the child.
        while process.isRunning { try await Task.sleep(for: .milliseconds(5)) }
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        return (process.terminationStatus, text.trimmingCharacters(in: .whitespacesAndNewlines))
    }
}
