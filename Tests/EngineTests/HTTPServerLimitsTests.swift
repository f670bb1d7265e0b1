import Foundation
import KlarnaAPI
import Logging
import Synchronization
import Testing
import TestSupport
@testable import HTTPServer

/// `ingest.max_connections`: connections beyond it wait for one to end; they are neither closed (nginx would answer
/// 502) nor read (their bodies would take memory).
@Suite("HTTP server: connections over the limit")
struct HTTPServerLimitsTests {
    /// Where the slow handler waits until the test opens it.
    final class Gate: Sendable {
        private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))
        var waiting: Int { state.withLock { $0.waiters.count } }

        func wait() async {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let passes = state.withLock { state -> Bool in
                    if !state.open { state.waiters.append(continuation) }
                    return state.open
                }
                if passes { continuation.resume() }
            }
        }

        func open() {
            let waiters = state.withLock { state in
                state.open = true
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume() }
        }
    }

    @Test(
        "Over max_connections a connection waits for one to end, reaching no handler meanwhile, and is then answered; the wait is logged; under saturation an answered connection is closed, not kept idle"
    )
    func excessConnectionsWait() async throws {
        let gate = Gate()
        let logs = LogLines()
        let served = Mutex(0)
        let server = try await HTTPServer.bind(.tcp(host: "127.0.0.1", port: 0), configuration: .init(maxConnections: 1), logger: logs.logger()) {
            request in
            served.withLock { $0 += 1 }
            if request.uri == "/slow" { await gate.wait() }
            return .response(ServerResponse(status: 200, body: Array("ok \(request.uri)".utf8)))
        }
        let serving = Task { try await server.run() }
        defer { serving.cancel() }
        let transport = CurlTransport(configuration: .init(requestTimeout: .seconds(30), maxConnectionsPerHost: 4))
        defer { transport.shutdown() }
        let base = "http://127.0.0.1:\(server.port!)"
        @Sendable func get(_ path: String) async throws -> (Int, String) {
            let response = try await transport.execute(HTTPRequest(method: "GET", url: base + path, freshConnection: true))
            return (response.status, String(decoding: response.body, as: UTF8.self))
        }

        let slow = Task { try await get("/slow") }
        try await waitUntil(timeout: .seconds(10)) { gate.waiting == 1 }
        let waiting = (0..<3).map { index in Task { try await get("/fast-\(index)") } }
        // Logged as the first of them starts to wait, not once its wait is over.
        try await waitUntil(timeout: .seconds(10)) {
            logs.all.contains { $0.contains("all 1 connections are busy: new ones wait for one to end (ingest.max_connections)") }
        }
        #expect(served.withLock { $0 } == 1, "a waiting connection reached a handler while the only slot was held")

        gate.open()
        #expect(try await slow.value == (200, "ok /slow"))
        for (index, task) in waiting.enumerated() { #expect(try await task.value == (200, "ok /fast-\(index)")) }
        #expect(served.withLock { $0 } == 4)
    }

    @Test("A body sent chunked, without a length, is cut off once it passes the limit: 413, and the refusal is told with the path, never the query")
    func chunkedOverTheLimit() async throws {
        let refusals = Mutex<[HTTPServer.Refusal]>([])
        let handled = Mutex(0)
        let configuration = HTTPServer.Configuration(maxBodyBytes: 64 << 10, refused: { refusal in refusals.withLock { $0.append(refusal) } })
        let server = try await HTTPServer.bind(.tcp(host: "127.0.0.1", port: 0), configuration: configuration, logger: LogLines().logger()) { _ in
            handled.withLock { $0 += 1 }
            return .response(ServerResponse(status: 200))
        }
        let serving = Task { try await server.run() }
        defer { serving.cancel() }
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        try String(repeating: "x", count: 256 << 10).write(toFile: directory.path + "/body", atomically: true, encoding: .utf8)
        let curl = try await Command.run(
            "/usr/bin/curl",
            [
                "-s", "--max-time", "20", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Transfer-Encoding: chunked", "-H", "Expect:",
                "--data-binary", "@\(directory.path)/body", "http://127.0.0.1:\(server.port!)/v1/sessions?token=secret",
            ]
        ).output
        // The client may see the connection close before it reads the 413: it was still sending.
        #expect(curl == "413" || curl == "000", "\(curl)")
        try await waitUntil(timeout: .seconds(10)) { !refusals.withLock { $0 }.isEmpty }
        #expect(
            refusals.withLock { $0 } == [
                HTTPServer.Refusal(
                    status: 413, error: "too_large",
                    detail:
                        "POST /v1/sessions: a body of more than 65536 bytes (sent without a length) is over the limit of 65536 (ingest.max_body_bytes)"
                )
            ])
        #expect(handled.withLock { $0 } == 0)
    }

    @Test("Slots: a saturation is announced once, however many wait in it; a slot freed with nobody waiting ends it")
    func saturationAnnouncedOnce() async throws {
        let slots = ConnectionSlots(1)
        #expect(await slots.acquire() == .atOnce)

        let announced = Mutex(0)
        let first = Task { await slots.acquire { announced.withLock { $0 += 1 } } }
        // Announced as it starts to wait.
        try await waitUntil(timeout: .seconds(10)) { slots.waitingCount == 1 && announced.withLock { $0 } == 1 }
        slots.release()  // handed over, not freed
        #expect(await first.value == .firstToWait)

        let second = Task { await slots.acquire() }
        try await waitUntil(timeout: .seconds(10)) { slots.waitingCount == 1 }
        slots.release()
        #expect(await second.value == .queued, "the same saturation")

        slots.release()  // nobody waits: the slot is free, the saturation over
        #expect(await slots.acquire() == .atOnce)
        let third = Task { await slots.acquire() }
        try await waitUntil(timeout: .seconds(10)) { slots.waitingCount == 1 }
        slots.release()
        #expect(await third.value == .firstToWait, "a new saturation")
    }
}
