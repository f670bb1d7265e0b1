import Foundation
import PostgresNIO

/// Where the shared store is: `store.url`, `postgres://USER@HOST:PORT/DB?sslmode=MODE`, or a unix-socket directory
/// as the host (`postgres://USER@%2Frun%2Fpostgresql/DB`, or `?host=/run/postgresql` as libpq spells it). The
/// password never comes from the URL: it is the credential `store-password` (or `store.password_file`).
public struct PostgresLocation: Sendable, Equatable, CustomStringConvertible {
    public enum Endpoint: Sendable, Equatable {
        case tcp(host: String, port: Int)
        /// The directory PostgreSQL puts its socket in; the socket is `.s.PGSQL.PORT` inside it.
        case unixSocket(directory: String, port: Int)
    }

    /// libpq's `sslmode`: `prefer` and `require` encrypt without checking the server's certificate (as libpq does);
    /// `verify-full` checks it against the system's trusted CAs and the host name.
    public enum TLSMode: String, Sendable, Equatable, CaseIterable {
        case disable, prefer, require
        case verifyFull = "verify-full"

        /// The client's TLS settings for this mode; nil for `disable`.
        var configuration: TLSConfiguration? {
            var configuration = TLSConfiguration.makeClientConfiguration()
            switch self {
            case .disable: return nil
            case .prefer, .require: configuration.certificateVerification = .none
            case .verifyFull: break
            }
            return configuration
        }
    }

    public var endpoint: Endpoint
    public var user: String
    public var database: String
    public var tls: TLSMode

    /// What `store.url` got wrong, in words that name the part.
    public struct Invalid: Error, CustomStringConvertible {
        public let description: String
    }

    public init(endpoint: Endpoint, user: String, database: String, tls: TLSMode = .prefer) {
        self.endpoint = endpoint
        self.user = user
        self.database = database
        self.tls = tls
    }

    public init(url text: String) throws {
        guard let components = URLComponents(string: text), let scheme = components.scheme else {
            throw Invalid(description: "store.url is not a URL: expected postgres://USER@HOST:PORT/DATABASE")
        }
        guard scheme == "postgres" || scheme == "postgresql" else {
            throw Invalid(description: "store.url has the scheme \(scheme)://; only postgres:// is understood")
        }
        guard components.password == nil else {
            throw Invalid(
                description: "store.url carries a password: remove it, and give it as the credential store-password (or store.password_file)")
        }
        guard let user = components.user, !user.isEmpty else {
            throw Invalid(description: "store.url names no user: postgres://USER@HOST/DATABASE")
        }
        let database = String(components.path.drop { $0 == "/" })
        guard !database.isEmpty, !database.contains("/") else {
            throw Invalid(description: "store.url names no database: postgres://USER@HOST/DATABASE")
        }
        var query: [String: String] = [:]
        for item in components.queryItems ?? [] {
            guard let value = item.value else { throw Invalid(description: "store.url parameter \(item.name) has no value") }
            query[item.name] = value
        }
        let port = components.port ?? 5432
        guard (1...65_535).contains(port) else { throw Invalid(description: "store.url port \(port) is out of range") }
        var tls = TLSMode.prefer
        for (name, value) in query {
            switch name {
            case "sslmode":
                guard let mode = TLSMode(rawValue: value) else {
                    throw Invalid(description: "store.url sslmode=\(value) is not one of \(TLSMode.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                tls = mode
            case "host":
                guard value.hasPrefix("/") else {
                    throw Invalid(description: "store.url host=\(value) must be a socket directory (an absolute path)")
                }
            default:
                throw Invalid(description: "store.url parameter \(name) is not understood (only sslmode and host are)")
            }
        }
        // URLComponents decodes %2F in the host; a host that is a path is a socket directory.
        let host = query["host"] ?? components.host ?? ""
        if host.hasPrefix("/") {
            endpoint = .unixSocket(directory: host, port: port)
        } else {
            guard !host.isEmpty else { throw Invalid(description: "store.url names no host: postgres://USER@HOST/DATABASE") }
            endpoint = .tcp(host: host, port: port)
        }
        self.user = user
        self.database = database
        self.tls = tls
    }

    /// The URL again, without anything secret (there is nothing secret in it).
    public var description: String {
        let query = tls == .prefer ? "" : "?sslmode=\(tls.rawValue)"
        switch endpoint {
        case .tcp(let host, let port): return "postgres://\(user)@\(host):\(port)/\(database)\(query)"
        case .unixSocket(let directory, let port):
            let host = directory.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? directory
            return "postgres://\(user)@\(host)\(port == 5432 ? "" : ":\(port)")/\(database)\(query)"
        }
    }

    /// One connection's configuration with `password`: opening checks the server with it before any pool exists, so
    /// that a wrong password or an unreachable host is reported at once, not retried by the pool.
    func connectionConfiguration(password: String?) throws -> PostgresConnection.Configuration {
        var configuration: PostgresConnection.Configuration
        switch endpoint {
        case .tcp(let host, let port):
            let tlsConfiguration: PostgresConnection.Configuration.TLS =
                switch (tls, tls.configuration) {
                case (.disable, _), (_, nil): .disable
                case (.prefer, let settings?): .prefer(try NIOSSLContext(configuration: settings))
                case (_, let settings?): .require(try NIOSSLContext(configuration: settings))
                }
            configuration = .init(host: host, port: port, username: user, password: password, database: database, tls: tlsConfiguration)
        case .unixSocket(let directory, let port):
            configuration = .init(unixSocketPath: "\(directory)/.s.PGSQL.\(port)", username: user, password: password, database: database)
        }
        configuration.options.connectTimeout = .seconds(5)
        return configuration
    }

    /// The client's configuration with `password`; `idleInTransaction`: the server ends a session whose open
    /// transaction waits that long for its next statement.
    func clientConfiguration(password: String?, maximumConnections: Int, idleInTransaction: Duration? = nil) -> PostgresClient.Configuration {
        var configuration: PostgresClient.Configuration
        switch endpoint {
        case .tcp(let host, let port):
            let tlsConfiguration: PostgresClient.Configuration.TLS =
                switch (tls, tls.configuration) {
                case (.disable, _), (_, nil): .disable
                case (.prefer, let settings?): .prefer(settings)
                case (_, let settings?): .require(settings)
                }
            configuration = .init(host: host, port: port, username: user, password: password, database: database, tls: tlsConfiguration)
        case .unixSocket(let directory, let port):
            configuration = .init(unixSocketPath: "\(directory)/.s.PGSQL.\(port)", username: user, password: password, database: database)
        }
        configuration.options.connectTimeout = .seconds(5)
        configuration.options.maximumConnections = maximumConnections
        if let idleInTransaction {
            let milliseconds = Int(idleInTransaction.timeInterval * 1_000)
            configuration.options.additionalStartupParameters = [("idle_in_transaction_session_timeout", "\(milliseconds)")]
        }
        return configuration
    }
}
