internal import CSystemd
import Foundation

/// Sockets systemd passed at start (socket activation: `LISTEN_FDS`, `LISTEN_PID`, `LISTEN_FDNAMES`), validated by
/// libsystemd (the variables must name this process) and then unset so children do not inherit them.
public struct ListenFDs: Sendable {
    public struct Socket: Sendable, Equatable {
        public let descriptor: Int32
        public let name: String
        /// A listening unix stream socket (what the ingest socket must be).
        public let isUnixStreamListener: Bool
    }

    public let sockets: [Socket]

    /// Takes the passed sockets; empty when not socket-activated.
    public static func take() -> ListenFDs {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let count = sd_listen_fds_with_names(1, &names)
        guard count > 0 else { return ListenFDs(sockets: []) }
        defer {
            if let names {
                for index in 0..<Int(count) { free(names[index]) }
                free(names)
            }
        }
        let sockets = (0..<Int(count)).map { index -> Socket in
            let descriptor = SD_LISTEN_FDS_START + Int32(index)
            let name = names?[index].map { String(cString: $0) } ?? "unknown"
            return Socket(
                descriptor: descriptor, name: name, isUnixStreamListener: sd_is_socket_unix(descriptor, Int32(SOCK_STREAM.rawValue), 1, nil, 0) > 0)
        }
        return ListenFDs(sockets: sockets)
    }

    /// The operators' socket: the one named `control` (klarna-reconciler-control.socket).
    public func controlSocket() -> Socket? { sockets.first { $0.name == "control" } }

    /// The ingest socket: the one named `ingest` (FileDescriptorName= in the socket unit), else the only one.
    public func ingestSocket() -> Socket? {
        sockets.first { $0.name == "ingest" } ?? (sockets.count == 1 && sockets[0].name != "control" ? sockets.first : nil)
    }
}
