import Glibc

/// The ingest socket is for the daemon and the forwarders' group only: mode 0660, group from config.
enum SocketPermissions {
    struct Failed: Error, CustomStringConvertible {
        let description: String
    }

    static func apply(path: String, group: String?) throws {
        guard chmod(path, 0o660) == 0 else { throw Failed(description: "cannot chmod \(path): \(String(cString: strerror(errno)))") }
        guard let group else { return }
        guard let entry = getgrnam(group) else { throw Failed(description: "no group named \(group)") }
        guard chown(path, uid_t.max, entry.pointee.gr_gid) == 0 else {
            throw Failed(description: "cannot give \(path) to group \(group): \(String(cString: strerror(errno)))")
        }
    }
}
