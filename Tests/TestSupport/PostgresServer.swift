import ChildProcess
import Foundation
import Synchronization

/// A real PostgreSQL server of the tests' own: Debian's binaries, `initdb` into a temporary directory, `pg_ctl` on a
/// unix socket in that directory and on a loopback port, password authentication (scram-sha-256) as in production.
/// As root it runs as the `postgres` user (`initdb` refuses root). One server per test process, started on first
/// use and stopped when the process exits; each test takes a database of its own (``createDatabase()``).
public final class PostgresServer: Sendable {
    public let directory: String
    public let port: Int
    public let user = "postgres"
    public let password: String
    private let binaries: String
    private let databases = Mutex(0)
    private let postmaster = Mutex<ChildProcess?>(nil)

    public struct Failed: Error, CustomStringConvertible {
        public let description: String
    }

    /// The process's server.
    public static func shared() async throws -> PostgresServer { try await starting.value }

    /// Started once, on first use (a static is initialised once, whoever asks first).
    private static let starting = Task { try await dedicated() }

    /// Registered once, with the first server.
    private static let exitHandler: Void = {
        atexit {
            // SIGQUIT to a postmaster is PostgreSQL's immediate shutdown; it removes postmaster.pid once it is down
            // (a second at most is waited for), and only then the directory goes, every server's, stopped or not.
            let (running, directories) = (PostgresServer.running.withLock { $0 }, PostgresServer.directories.withLock { $0 })
            for (pid, directory) in running {
                kill(pid, SIGQUIT)
                for _ in 0..<100 where FileManager.default.fileExists(atPath: directory + "/data/postmaster.pid") { usleep(10_000) }
            }
            for directory in directories { try? FileManager.default.removeItem(atPath: directory) }
        }
    }()

    /// A server of its own, for a test that restarts or stops it (the shared one serves tests running alongside).
    /// Stopped at exit like the shared one, or earlier with ``stop(mode:)``.
    /// - Parameter namespace: a network namespace (``NetworkNamespace``) to run it in, as a database host of its own:
    ///   it then listens on every address there, and the tests reach it on its unix socket or over the namespace's links.
    /// - Parameter directory: where its data directory and sockets go (a small filesystem, to fill); a new folder
    ///   under the temporary directory by default.
    public static func dedicated(namespace: String? = nil, directory: String? = nil) async throws -> PostgresServer {
        _ = exitHandler
        let server = try PostgresServer(namespace: namespace, directory: directory)
        directories.withLock { _ = $0.insert(server.directory) }
        try await server.initialize()
        return server
    }

    /// Every postmaster started and not stopped yet, with its directory, and every server's directory, for the
    /// exit handler.
    private static let running = Mutex<[Int32: String]>([:])
    private static let directories = Mutex<Set<String>>([])
    private static let binaryDirectory = ["/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"]
        .first(where: { FileManager.default.isExecutableFile(atPath: $0 + "/pg_ctl") })

    private let namespace: String?

    private init(namespace: String? = nil, directory: String? = nil) throws {
        self.namespace = namespace
        guard let binaries = Self.binaryDirectory else {
            throw Failed(description: "PostgreSQL's server binaries are not installed (apt-get install postgresql; make check does)")
        }
        self.binaries = binaries
        self.directory = directory ?? NSTemporaryDirectory() + "klarna-reconciler-pg-" + UUID().uuidString.prefix(8)
        password = "pw-" + UUID().uuidString.prefix(12)
        port = try freeLoopbackPort()
    }

    private func initialize() async throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try password.write(toFile: directory + "/pwfile", atomically: true, encoding: .utf8)
        if getuid() == 0 { try await Self.run("/bin/chown", ["-R", "postgres", directory]) }
        try await runAsServer(
            "initdb", ["-D", directory + "/data", "-A", "scram-sha-256", "-U", user, "--pwfile", directory + "/pwfile", "-E", "UTF8", "--no-sync"])
        try await start()
    }

    /// Starts the postmaster as this process's own child (not through `pg_ctl`, whose daemonised server would
    /// inherit the descriptor Foundation watches to learn that a child ended): sockets in ``directory`` and on
    /// 127.0.0.1:``port``, fsync on (the default). Returns once it answers a query.
    public func start() async throws {
        let process = ChildProcess()
        let arguments = [
            "-D", directory + "/data", "-k", directory, "-c", "listen_addresses=\(namespace == nil ? "127.0.0.1" : "*")", "-p", "\(port)",
            "-c", "max_connections=400",
        ]
        if let namespace {
            // ip netns exec and setpriv each exec the next, so the pid is still the postmaster's.
            process.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
            process.arguments =
                ["netns", "exec", namespace, "/usr/bin/setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", binaries + "/postgres"]
                + arguments
        } else if getuid() == 0 {
            // setpriv execs the server itself, so the pid is the postmaster's and signals reach it.
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments = ["--reuid=postgres", "--regid=postgres", "--init-groups", binaries + "/postgres"] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: binaries + "/postgres")
            process.arguments = arguments
        }
        if !FileManager.default.fileExists(atPath: directory + "/log") {
            _ = FileManager.default.createFile(atPath: directory + "/log", contents: nil)
        }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: directory + "/log"))
        try log.seekToEnd()
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = log
        process.standardError = log
        try process.run()
        postmaster.withLock { $0 = process }
        Self.running.withLock { $0[process.processIdentifier] = directory }
        try await waitUntil(timeout: .seconds(60)) {
            guard process.isRunning else {
                throw Failed(description: "PostgreSQL did not start: \((try? String(contentsOfFile: directory + "/log", encoding: .utf8)) ?? "")")
            }
            return (try? await psql("SELECT 1")) != nil
        }
    }

    /// Stops the server like `pg_ctl stop -m MODE`: `fast` (SIGINT) ends every session and shuts down in order,
    /// `immediate` (SIGQUIT) is a crash. Returns once the postmaster has exited.
    public func stop(mode: String = "fast") async throws {
        guard let process = postmaster.withLock({ $0 }) else { return }
        kill(process.processIdentifier, mode == "immediate" ? SIGQUIT : SIGINT)
        try await waitUntil(timeout: .seconds(60)) { !process.isRunning }
        postmaster.withLock { $0 = nil }
        Self.running.withLock { $0[process.processIdentifier] = nil }
    }

    /// `pg_ctl restart -m fast`: every connection is dropped, the server comes back on the same sockets.
    public func restart() async throws {
        try await stop(mode: "fast")
        try await start()
    }

    /// Turns TLS on with a self-signed certificate for `localhost` (made here with openssl), as a server set up
    /// without a CA of its own would have; the server reloads its configuration.
    public func enableTLS() async throws {
        let data = directory + "/data"
        try await Self.run(
            "/usr/bin/openssl",
            [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                "-keyout", data + "/server.key", "-out", data + "/server.crt",
            ])
        if getuid() == 0 { try await Self.run("/bin/chown", ["postgres", data + "/server.key", data + "/server.crt"]) }
        chmod(data + "/server.key", 0o600)
        try await psql("ALTER SYSTEM SET ssl = on")
        try await psql("SELECT pg_reload_conf()")
        try await waitUntil(timeout: .seconds(10)) { try await psql("SHOW ssl") == "on" }
    }

    /// Lets clients from `network` (CIDR) in with the password, as a `pg_hba.conf` line for another host would.
    public func allow(network: String) async throws {
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: directory + "/data/pg_hba.conf"))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("host all all \(network) scram-sha-256\n".utf8))
        try handle.close()
        try await psql("SELECT pg_reload_conf()")
    }

    /// `store.url` for `database` over TCP to `host` (an address of the server's namespace).
    public func url(_ database: String, host: String) -> String {
        "postgres://\(user)@\(host):\(port)/\(database)?sslmode=disable"
    }

    /// A new, empty database; its name.
    public func createDatabase() async throws -> String {
        let name = "test_\(databases.withLock { $0 += 1; return $0 })_\(UUID().uuidString.prefix(6).lowercased())"
        try await psql("CREATE DATABASE \(name)")
        return name
    }

    /// Runs `sql` as the superuser through psql on the unix socket.
    @discardableResult
    public func psql(_ sql: String, database: String = "postgres") async throws -> String {
        try await Self.run(
            binaries + "/psql", ["-h", directory, "-p", "\(port)", "-U", user, "-d", database, "-v", "ON_ERROR_STOP=1", "-At", "-c", sql],
            environment: ["PGPASSWORD": password])
    }

    /// `store.url` for `database` over the unix socket, or over TCP.
    public func url(_ database: String, tcp: Bool = false) -> String {
        tcp
            ? "postgres://\(user)@127.0.0.1:\(port)/\(database)?sslmode=disable"
            : "postgres://\(user)@\(directory.replacingOccurrences(of: "/", with: "%2F")):\(port)/\(database)"
    }

    private func runAsServer(_ tool: String, _ arguments: [String]) async throws {
        if getuid() == 0 {
            try await Self.run("/usr/bin/setpriv", ["--reuid=postgres", "--regid=postgres", "--init-groups", binaries + "/" + tool] + arguments)
        } else {
            try await Self.run(binaries + "/" + tool, arguments)
        }
    }

    /// Runs `executable` to its end (``Command/run(_:_:environment:)``); a failure is an error with its output.
    @discardableResult
    static func run(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) async throws -> String {
        let (status, text) = try await Command.run(executable, arguments, environment: environment)
        guard status == 0 else {
            throw Failed(description: "\(executable) \(arguments.joined(separator: " ")) exited \(status): \(text)")
        }
        return text
    }
}

/// A loopback port nothing listens on now, below the kernel's ephemeral range, where the outgoing connections of the
/// tests running alongside (curl, the daemons' Klarna calls) cannot take it before the server binds it.
public func freeLoopbackPort() throws -> Int {
    for _ in 0..<200 {
        let port = Int.random(in: 20_000..<32_000)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if bound == 0 { return port }
    }
    throw PostgresServer.Failed(description: "no free loopback port found")
}
