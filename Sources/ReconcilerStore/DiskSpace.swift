import Foundation
import ReconcilerCore
import Synchronization

/// What a directory's filesystem has free for a process without root (`f_bavail × f_frsize`), its size, and which
/// filesystem it is (directories on one filesystem share their free space).
public struct FileSystemSpace: Sendable, Equatable {
    public var free: Int64
    public var total: Int64
    public var id: UInt
}

/// The space of `path`'s filesystem; `nil` when it cannot be read (the directory is gone).
public func freeSpace(at path: String) -> FileSystemSpace? {
    var stats = statvfs()
    guard statvfs(path, &stats) == 0 else { return nil }
    let unit = Int64(stats.f_frsize)
    return FileSystemSpace(free: Int64(stats.f_bavail) * unit, total: Int64(stats.f_blocks) * unit, id: UInt(stats.f_fsid))
}

/// "N free in DIR", for an error that a full disk may have caused: every storage error says where and how much is left.
public func freeSpaceNote(at path: String) -> String {
    let directory = (path as NSString).deletingLastPathComponent
    let folder = directory.isEmpty ? "." : directory
    guard let space = freeSpace(at: folder) else { return "free space of \(folder) unknown" }
    return "\(ByteCount(space.free)) free in \(folder)"
}

/// Space set aside on the store's filesystem (`disk.reserve_mb`, a file beside the store): when a commit fails for
/// want of space, the store gives it back and commits again, so the answers in flight and a start can always be
/// recorded. The disk watch makes it again once the space has come back.
public final class ReserveFile: Sendable {
    public let path: String
    /// The size it is made with; 0 keeps no reserve.
    public let bytes: Int64
    private let held = Mutex(false)

    public init(path: String, bytes: Int64) {
        self.path = path
        self.bytes = max(0, bytes)
        var stats = stat()
        // A reserve left by an earlier run counts once it is whole; a shorter one (a crash while making it) is made again.
        held.withLock { $0 = stat(path, &stats) == 0 && Int64(stats.st_size) >= self.bytes && self.bytes > 0 }
    }

    /// Whether the reserve is on the disk now.
    public var isHeld: Bool { held.withLock { $0 } }
    /// What the reserve has given back and wants again.
    public var owedBytes: Int64 { isHeld ? 0 : bytes }

    /// Makes the reserve (blocks allocated, not a sparse file). Throws when the disk has no room for it; nothing is
    /// left behind then.
    public func make() throws {
        guard bytes > 0, !isHeld else { return }
        let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ReserveFailure(path: path, operation: "open", code: errno) }
        defer { close(fd) }
        let code = posix_fallocate(fd, 0, off_t(bytes))
        guard code == 0 else {
            unlink(path)
            throw ReserveFailure(path: path, operation: "allocate \(ByteCount(bytes)) for", code: code)
        }
        guard fsync(fd) == 0 else {
            let code = errno
            unlink(path)
            throw ReserveFailure(path: path, operation: "fsync", code: code)
        }
        held.withLock { $0 = true }
    }

    /// Gives the reserve back to the filesystem; returns whether there was one to give.
    @discardableResult
    public func release() -> Bool {
        let had = held.withLock { held in
            defer { held = false }
            return held
        }
        guard had else { return false }
        unlink(path)
        return true
    }

    /// The reserve could not be made.
    public struct ReserveFailure: Error, CustomStringConvertible {
        public let path: String
        public let operation: String
        public let code: Int32

        public var description: String {
            "cannot \(operation) the reserve file \(path): \(String(cString: strerror(code))); \(freeSpaceNote(at: path))"
        }
    }
}
