import ArgumentParser
import Engine
import Foundation
import Ingest
import KlarnaAPI
import ReconcilerStore
import Settings

/// The operators' socket as the command line uses it: `status`, `list`, `show` and the repair commands go through
/// the running daemon (which records who asked from the socket), so an operator needs the `klarna-operators` group
/// and no access to the store. With no daemon listening they read and write the store themselves (as root or the
/// daemon's user).
struct ControlClient {
    /// Where systemd's klarna-reconciler-control.socket listens.
    static let activatedPath = "/run/klarna-reconciler-control.sock"

    let path: String

    /// The daemon's control socket if one answers: `control.socket` from the configuration, else the socket unit's,
    /// but that one only while the service runs (its `RuntimeDirectory=` exists): connecting to it would start a
    /// daemon an administrator stopped on purpose. Exits 77 (EX_NOPERM) when the socket is there but this user may
    /// not use it.
    static func find(_ settings: Settings) async throws -> ControlClient? {
        let serviceRuns = FileManager.default.fileExists(atPath: "/run/klarna-reconciler")
        for path in [settings.controlSocket, serviceRuns ? activatedPath : nil].compactMap({ $0 }) {
            var info = stat()
            guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFSOCK else { continue }
            guard access(path, W_OK) == 0 else {
                printError(
                    "klarna-reconciler: cannot use the operators' socket \(path): \(String(cString: strerror(errno))) (operators need the group klarna-operators)"
                )
                throw ExitCode(77)
            }
            let client = ControlClient(path: path)
            if (try? await client.send("GET", "/v1/ready")) != nil { return client }
        }
        return nil
    }

    /// A request over the socket: status and body.
    func send(_ method: String, _ target: String, body: [UInt8]? = nil) async throws -> (status: Int, body: [UInt8]) {
        let transport = CurlTransport(configuration: .init(requestTimeout: .seconds(120), unixSocketPath: path))
        defer { transport.shutdown() }
        var headers = HTTPHeaders([(ControlHTTP.clientHeader, "command-line")])
        if body != nil { headers.add("Content-Type", "application/json") }
        let response = try await transport.execute(HTTPRequest(method: method, url: "http://localhost" + target, headers: headers, body: body))
        return (response.status, response.body)
    }

    /// A GET whose 200 answer decodes as `T`; `nil` when what it names is not there (404). A route the daemon does
    /// not have (404 `not_found`: a daemon older than this command, not restarted since an upgrade) is an error that
    /// says so, never "nothing matches".
    func get<T: Decodable>(_ type: T.Type, _ target: String) async throws -> T? {
        let answer = try await send("GET", target)
        if answer.status == 404 {
            let error = (try? JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any])?["error"] as? String
            guard error == "not_found" else { return nil }
            let route = target.split(separator: "?").first.map(String.init) ?? target
            throw Failed(description: "the daemon has no \(route): it is older than this command; restart it after an upgrade")
        }
        guard answer.status == 200 else {
            throw Failed(description: "the daemon answered \(answer.status): \(String(decoding: answer.body.prefix(300), as: UTF8.self))")
        }
        return try OperatorJSON.decoder().decode(type, from: Data(answer.body))
    }

    struct Failed: Error, CustomStringConvertible {
        let description: String
    }

    /// A path segment or query value, percent-encoded.
    static func escape(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? text
    }
}
