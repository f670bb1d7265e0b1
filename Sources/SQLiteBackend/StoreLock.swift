import Foundation

/// An exclusive lock beside the store (`state.sqlite.lock`), held for the daemon's lifetime: two daemons on one store
/// would both act on the same sessions. The kernel drops it when the process dies, even on `kill -9`.
public final class StoreLock: Sendable {
    private let fd: Int32
    public let path: String

    public struct Held: Error, CustomStringConvertible {
        public let path: String
        public let holder: String
        public var description: String { "another klarna-reconciler daemon (\(holder)) holds \(path)" }
    }

    public struct Failed: Error, CustomStringConvertible {
        public let path: String
        public let reason: String
        public var description: String { "cannot lock \(path): \(reason)" }
    }

    public init(storePath: String) throws {
        // Properties are set only once the lock is held: a throw after they are set would run deinit, and its
        // second close(2) could close a descriptor another thread has opened under the same number meanwhile.
        let path = storePath + ".lock"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o640)
        guard fd >= 0 else { throw Failed(path: path, reason: String(cString: strerror(errno))) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let holder = (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
            close(fd)
            throw Held(path: path, holder: holder.map { "pid \($0)" } ?? "unknown pid")
        }
        let pid = "\(getpid())\n"
        _ = ftruncate(fd, 0)
        _ = pid.withCString { pwrite(fd, $0, strlen($0), 0) }
        self.fd = fd
        self.path = path
    }

    deinit { close(fd) }
}
