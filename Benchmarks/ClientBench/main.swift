import Foundation
import KlarnaAPI
import Logging

// klarna-bench URL HPP_SESSION_ID [--concurrency N] [--seconds S]
// Reads one HPP session as fast as N concurrent callers can through KlarnaClient over libcurl, then prints
// throughput, latency percentiles and this process's peak RSS as `key value` lines for scripts/bench.sh.

func option(_ name: String, _ fallback: Int) -> Int {
    guard let index = CommandLine.arguments.firstIndex(of: name), index + 1 < CommandLine.arguments.count,
        let value = Int(CommandLine.arguments[index + 1])
    else { return fallback }
    return value
}

let arguments = CommandLine.arguments
guard arguments.count >= 3 else {
    FileHandle.standardError.write(Data("usage: klarna-bench URL HPP_SESSION_ID [--concurrency N] [--seconds S]\n".utf8))
    exit(64)
}
let concurrency = option("--concurrency", 32)
let seconds = option("--seconds", 10)
let transport = CurlTransport(
    configuration: .init(
        connectTimeout: .seconds(2), requestTimeout: .seconds(10), userAgent: KlarnaClient.userAgent(libcurl: CurlTransport.libcurlVersion),
        maxConnectionsPerHost: concurrency))
var logger = Logger(label: "klarna-bench")
logger.logLevel = .error
let client = KlarnaClient(
    configuration: KlarnaConfiguration(
        baseURL: arguments[1], credentials: BasicCredentials(username: "sandbox-merchant", password: "sandbox-secret")),
    transport: transport, logger: logger)
let sessionID = arguments[2]

// Warm up: open the connections once so the measurement is of steady state.
_ = try await client.readHPPSession(id: sessionID)

let clock = ContinuousClock()
let deadline = clock.now + .seconds(seconds)
let started = clock.now
let results = try await withThrowingTaskGroup(of: ([Double], Int).self) { group in
    for _ in 0..<concurrency {
        group.addTask {
            var latencies: [Double] = []
            var failures = 0
            while clock.now < deadline {
                let begin = clock.now
                do {
                    _ = try await client.readHPPSession(id: sessionID)
                    latencies.append((clock.now - begin).timeInterval * 1_000)
                } catch {
                    failures += 1
                }
            }
            return (latencies, failures)
        }
    }
    var all: [Double] = []
    var failures = 0
    for try await (latencies, failed) in group {
        all += latencies
        failures += failed
    }
    return (all, failures)
}
let elapsed = (clock.now - started).timeInterval
let latencies = results.0.sorted()
func percentile(_ p: Double) -> Double { latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))] }
let rss =
    (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8))?
    .split(separator: "\n").first { $0.hasPrefix("VmHWM:") }?
    .split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "0"
print("requests \(latencies.count)")
print("failures \(results.1)")
print("rps \(String(format: "%.0f", Double(latencies.count) / elapsed))")
print("p50_ms \(String(format: "%.2f", percentile(0.50)))")
print("p99_ms \(String(format: "%.2f", percentile(0.99)))")
print("peak_rss_kib \(rss)")
transport.shutdown()

extension Duration {
    var timeInterval: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
