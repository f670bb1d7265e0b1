import ChildProcess
import Foundation
import Glibc
import KlarnaAPI
import Testing
import TestSupport

/// The `klarna-sandbox` process as systemd runs it: readiness over `$NOTIFY_SOCKET`, then SIGTERM.
@Suite struct SandboxProcessTests {
    /// The built executable, next to this test binary.
    static let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        .deletingLastPathComponent().appendingPathComponent("klarna-sandbox")

    @Test func notifiesReadyServesAndStopsCleanlyOnSIGTERM() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("notify-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let notify = try NotifySocket(path: directory.appendingPathComponent("notify").path)
        // A unix socket: a TCP port picked in advance could be taken by a parallel test before the sandbox binds it.
        let socket = directory.appendingPathComponent("sandbox.sock").path

        let process = ChildProcess()
        process.executableURL = Self.executable
        process.arguments = ["--listen", "unix:\(socket)"]
        process.environment = ProcessInfo.processInfo.environment.merging(["NOTIFY_SOCKET": notify.path]) { $1 }
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { process.terminate() } }

        let ready = try #require(try await notify.receive())
        #expect(ready == "READY=1\nSTATUS=Klarna sandbox listening on unix:\(socket)")

        let transport = CurlTransport(configuration: .init(unixSocketPath: socket))
        defer { transport.shutdown() }
        let response = try await transport.execute(HTTPRequest(method: "GET", url: "http://localhost/_sandbox/clock"))
        #expect(response.status == 200)

        kill(process.processIdentifier, SIGTERM)
        let stopping = try #require(try await notify.receive())
        #expect(stopping.hasPrefix("STOPPING=1\n"))
        try await waitUntil { !process.isRunning }
        #expect(process.terminationReason == .exit)
        #expect(process.terminationStatus == 0)
    }

    @Test func aBadListenAddressIsAUsageError() async throws {
        let process = ChildProcess()
        process.executableURL = Self.executable
        process.arguments = ["--listen", "nowhere"]
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        try await waitUntil { !process.isRunning }
        #expect(process.terminationStatus == 64)
        let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(message.contains("--listen must be HOST:PORT or unix:/path, not nowhere"))
    }
}

/// An AF_UNIX datagram socket standing in for systemd's notification socket.
final class NotifySocket: Sendable {
    let path: String
    private let descriptor: Int32

    init(path: String) throws {
        self.path = path
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            buffer.copyBytes(from: path.utf8.prefix(buffer.count - 1))
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard descriptor >= 0, bound == 0 else { throw SocketSetupFailed() }
    }

    deinit { close(descriptor) }

    /// The next datagram, or `nil` when none arrives before the deadline.
    func receive(timeout: Duration = .seconds(10)) async throws -> String? {
        let deadline = ContinuousClock.now + timeout
        var buffer = [UInt8](repeating: 0, count: 4_096)
        while ContinuousClock.now < deadline {
            let count = recv(descriptor, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            if count > 0 { return String(decoding: buffer[0..<count], as: UTF8.self) }
            try await Task.sleep(for: .milliseconds(10))
        }
        return nil
    }
}
