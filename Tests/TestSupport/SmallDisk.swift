import Foundation

/// A filesystem of its own, small enough to fill: a tmpfs of `megabytes` mounted on a fresh directory (root only, as
/// CI and the development machines run). ``fill()`` takes every free byte with a filler file, ``free()`` gives them
/// back; ``unmount()`` in a `defer`, also when the test fails.
public struct SmallDisk: Sendable {
    public let path: String
    private var filler: String { path + "/.filler" }

    /// Whether this machine lets the tests mount one (root with mount rights): probed once, with a 64 KiB tmpfs.
    public static let canMount: Bool = {
        guard getuid() == 0 else { return false }
        let probe = NSTemporaryDirectory() + "klarna-reconciler-tmpfs-probe-\(getpid())"
        try? FileManager.default.createDirectory(atPath: probe, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: probe) }
        guard "size=64k".withCString({ mount("tmpfs", probe, "tmpfs", 0, $0) }) == 0 else { return false }
        umount(probe)
        return true
    }()

    public init(megabytes: Int) async throws {
        path = NSTemporaryDirectory() + "klarna-reconciler-disk-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let mounted = try await Command.run("/usr/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m,mode=0755", "tmpfs", path])
        guard mounted.status == 0 else { throw Failed(description: "mount tmpfs on \(path): \(mounted.output)") }
    }

    /// Runs `body` with a small disk of `megabytes` mounted, unmounted afterwards whatever happens.
    public static func with(megabytes: Int, _ body: (SmallDisk) async throws -> Void) async throws {
        let disk = try await SmallDisk(megabytes: megabytes)
        do {
            try await body(disk)
        } catch {
            await disk.unmount()
            throw error
        }
        await disk.unmount()
    }

    /// Bytes free on it now.
    public var freeBytes: Int64 {
        var stats = statvfs()
        guard statvfs(path, &stats) == 0 else { return -1 }
        return Int64(stats.f_bavail) * Int64(stats.f_frsize)
    }

    /// Takes every free byte but `leaving` with the filler file (grown if it exists: freed pages come back as files
    /// are deleted, so a test tops it up).
    public func fill(leaving: Int64 = 0) throws {
        let fd = open(filler, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Failed(description: "open \(filler): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var size = stat()
        fstat(fd, &size)
        let take = freeBytes - leaving
        guard take > 0 else { return }
        // Page by page at the end, so that every last page is taken even where one large allocation would not fit.
        var current = Int64(size.st_size)
        var chunk = max(take, 4_096)
        while chunk >= 4_096 {
            if posix_fallocate(fd, off_t(current), off_t(chunk)) == 0 {
                current += chunk
                if freeBytes <= leaving { break }
            } else {
                chunk /= 2
            }
        }
    }

    /// Gives back what the filler took, and returns once the filesystem shows it free: a child process another test
    /// forks at that moment holds the file open (until its exec closes it), and its pages with it.
    public func free() async throws {
        let before = freeBytes
        unlink(filler)
        try await waitUntil(timeout: .seconds(10)) { freeBytes > before }
    }

    public func unmount() async {
        _ = try? await Command.run("/usr/bin/umount", ["-l", path])
        try? FileManager.default.removeItem(atPath: path)
    }

    public struct Failed: Error, CustomStringConvertible {
        public let description: String
    }
}
