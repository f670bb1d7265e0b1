import Foundation
import PostgresNIO

/// Why the shared store cannot be opened, in an operator's words: unreachable, authentication failed, no such
/// database, a schema newer than this binary. postgres-nio's own error hides the server's message on purpose
/// (it may hold data), so the cases that need words are named here.
public struct PostgresProblem: Error, CustomStringConvertible {
    public enum Kind: String, Sendable {
        case unreachable, authenticationFailed, noSuchDatabase, schemaTooNew, schemaTooOld, inUse, other
        /// The server answers but takes no write now (its disk full, too many connections, read only, starting up):
        /// what a start waits out rather than exits on.
        case cannotWrite
    }

    public let kind: Kind
    public let description: String

    init(kind: Kind, description: String) {
        self.kind = kind
        self.description = description
    }

    init(_ error: any Error, location: PostgresLocation) {
        if let problem = error as? PostgresProblem {
            self = problem
            return
        }
        if let refusal = error as? PostgresStore.ServerRefusal {
            kind = .cannotWrite
            description = refusal.description
            return
        }
        if let tooNew = error as? PostgresSchema.TooNew {
            kind = .schemaTooNew
            description = "\(location): \(tooNew)"
            return
        }
        guard let psql = error as? PSQLError else {
            kind = .other
            description = "\(location): \(error)"
            return
        }
        let state = psql.serverInfo?[.sqlState]
        let message = psql.serverInfo?[.message]
        switch (psql.code, state) {
        case (.authMechanismRequiresPassword, _):
            kind = .authenticationFailed
            description = "\(location): the server asks for a password and none is configured (the credential store-password, or store.password_file)"
        case (_, "28P01"), (_, "28000"):
            kind = .authenticationFailed
            description =
                "\(location): authentication failed for user \(location.user) (\(message ?? "check the credential store-password and pg_hba.conf"))"
        case (_, let state?) where PostgresStore.ServerRefusal.meaning(of: state) != nil:
            kind = .cannotWrite
            description = PostgresStore.ServerRefusal(psql, location: location)?.description ?? "\(location): SQLSTATE \(state)"
        case (_, "3D000"):
            kind = .noSuchDatabase
            description = "\(location): database \(location.database) does not exist"
        case (.connectionError, _), (.serverClosedConnection, _), (.uncleanShutdown, _):
            kind = .unreachable
            description = "\(location): cannot reach PostgreSQL (\(psql.underlying.map { "\($0)" } ?? "connection failed"))"
        default:
            kind = .other
            description = "\(location): \(message ?? "\(psql.code)")"
        }
    }
}

extension PostgresProblem.Kind {
    /// What a command exits with: 78 (EX_CONFIG) for what the configuration or credentials got wrong, 69
    /// (EX_UNAVAILABLE) for a server or schema this binary cannot use now, 75 (EX_TEMPFAIL) while the store is in
    /// use by what excludes the caller (a `store copy` fills it, or daemons run on it).
    public var exitCode: Int32 {
        switch self {
        case .authenticationFailed, .noSuchDatabase: 78
        case .unreachable, .schemaTooNew, .schemaTooOld, .other, .cannotWrite: 69
        case .inUse: 75
        }
    }
}

extension PostgresStore {
    /// The server refused the work for a reason of its own that passes (its disk full, too many connections, a
    /// read-only server, one starting or shutting down): nothing of the caller's work was done. It says the SQLSTATE
    /// and the server's own words, which postgres-nio's error keeps to itself. The store is unavailable: deliveries
    /// are answered 503 and sent again, Klarna's answers are kept until a commit lands, `/v1/ready` is 503.
    public struct ServerRefusal: Error, CustomStringConvertible {
        public let sqlState: String
        public let description: String

        /// What a refusal's SQLSTATE means for an operator; `nil` for every other state.
        static func meaning(of state: String) -> String? {
            switch state {
            case "53100": "the server's disk is full"
            case "53200": "the server is out of memory"
            case "53300": "the server has too many connections"
            case "53400": "a server limit is exceeded"
            case "25006": "the server is read-only (a standby, or default_transaction_read_only)"
            case "57P03": "the server is starting or shutting down"
            default: nil
            }
        }

        init?(_ error: any Error, location: PostgresLocation) {
            guard let psql = error as? PSQLError, let state = psql.serverInfo?[.sqlState], let meaning = Self.meaning(of: state) else {
                return nil
            }
            sqlState = state
            description = "\(location): \(meaning) (SQLSTATE \(state): \(psql.serverInfo?[.message] ?? "no message"))"
        }
    }
}
