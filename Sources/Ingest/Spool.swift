import Foundation
import Glibc
import Logging
import ReconcilerCore

/// The spool directory with Maildir semantics (docs/operations.md, "The spool directory"): writers create files in `tmp/` and `rename(2)` them into
/// `new/`; the daemon claims a file by renaming it into `cur/`, commits its delivery, then removes it (or keeps it in
/// `done/`). A refused file moves to `quarantine/` with `NAME.reason` beside it. Nothing outside the spool is ever
/// opened: symlinks, FIFOs, devices and hard-linked files are refused without being read.
public struct Spool: Sendable {
    public let directory: String
    /// Largest file accepted (headers and body).
    public let maxFileBytes: Int
    public let keepDone: Bool

    public init(directory: String, maxFileBytes: Int, keepDone: Bool) {
        self.directory = directory
        self.maxFileBytes = maxFileBytes
        self.keepDone = keepDone
    }

    public static let subdirectories = ["tmp", "new", "cur", "quarantine", "done"]

    public func prepare() throws {
        for sub in Self.subdirectories where sub != "done" || keepDone {
            try FileManager.default.createDirectory(atPath: "\(directory)/\(sub)", withIntermediateDirectories: true)
        }
    }

    /// Names waiting in `sub`, oldest first by name (forwarders name files by time). Dot-files are not ours.
    public func names(in sub: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: "\(directory)/\(sub)")) ?? [])
            .filter { !$0.hasPrefix(".") && !$0.hasSuffix(".reason") }.sorted()
    }

    public struct Refusal: Error, Sendable {
        public let rule: String
        public let detail: String
    }

    /// A name is 1–200 characters from a safe set: no control characters, no spaces, no leading dot.
    public static func isSafeName(_ name: String) -> Bool {
        guard (1...200).contains(name.utf8.count), !name.hasPrefix(".") else { return false }
        // Bytes, not a CharacterSet: this runs for every file the spool takes, and building the set cost more than
        // reading the file.
        return name.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
            default: Self.safePunctuation.contains(byte)
            }
        }
    }

    private static let safePunctuation = Set("._:,=+-@".utf8)

    /// Claims `name` from `new/` into `cur/`. `nil` when another process took it first.
    public func claim(_ name: String) throws(Refusal) -> String? {
        let from = "\(directory)/new/\(name)"
        guard Self.isSafeName(name) else {
            throw Refusal(rule: "unsafe_name", detail: "file names are 1–200 characters of [A-Za-z0-9._:,=+-@], without a leading dot")
        }
        try checkRegular(from)
        let to = "\(directory)/cur/\(name)"
        guard rename(from, to) == 0 else {
            if errno == ENOENT { return nil }
            throw Refusal(rule: "unreadable", detail: "cannot claim \(name): \(String(cString: strerror(errno)))")
        }
        return to
    }

    /// Reads a claimed file, refusing anything that is not a plain, single-linked, small enough regular file.
    public func read(_ path: String) throws(Refusal) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            throw Refusal(
                rule: errno == ELOOP ? "symlink" : "unreadable",
                detail: errno == ELOOP ? "symbolic links are never followed" : "cannot open: \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw Refusal(rule: "unreadable", detail: "cannot stat: \(String(cString: strerror(errno)))") }
        try Self.check(info, maxBytes: maxFileBytes)
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + offset, $0.count - offset, off_t(offset)) }
            guard count > 0 else { throw Refusal(rule: "unreadable", detail: "short read at \(offset) of \(bytes.count) bytes") }
            offset += count
        }
        return bytes
    }

    /// Without opening anything: what kind of file is there?
    func checkRegular(_ path: String) throws(Refusal) {
        var info = stat()
        guard lstat(path, &info) == 0 else { throw Refusal(rule: "unreadable", detail: "cannot stat: \(String(cString: strerror(errno)))") }
        try Self.check(info, maxBytes: maxFileBytes)
    }

    static func check(_ info: stat, maxBytes: Int) throws(Refusal) {
        switch info.st_mode & S_IFMT {
        case S_IFREG: break
        case S_IFLNK: throw Refusal(rule: "symlink", detail: "symbolic links are never followed")
        case S_IFIFO: throw Refusal(rule: "not_regular", detail: "a FIFO is not a delivery")
        case S_IFCHR, S_IFBLK: throw Refusal(rule: "not_regular", detail: "a device is not a delivery")
        case S_IFDIR: throw Refusal(rule: "not_regular", detail: "a directory is not a delivery")
        default: throw Refusal(rule: "not_regular", detail: "only regular files are read")
        }
        guard info.st_nlink == 1 else {
            throw Refusal(rule: "hard_link", detail: "a file with \(info.st_nlink) links may belong to someone else; write a new file instead")
        }
        guard Int(info.st_size) <= maxBytes else { throw Refusal(rule: "too_large", detail: "\(info.st_size) bytes; the limit is \(maxBytes)") }
    }

    /// Done with a committed file: removed, or kept in `done/`.
    public func finish(_ claimed: String) {
        let name = (claimed as NSString).lastPathComponent
        if keepDone { _ = rename(claimed, "\(directory)/done/\(name)") } else { unlink(claimed) }
    }

    /// The `.reason` document beside a quarantined file.
    public struct Reason: Codable, Sendable, Equatable {
        public var file: String
        public var rule: String
        public var detail: String
        public var status: Int?
        public var at: Date
    }

    /// Moves `path` (in `new/` or `cur/`) to `quarantine/` and writes its reason next to it (reason first, so a file in
    /// quarantine always has one).
    public func quarantine(_ path: String, rule: String, detail: String, status: Int?, at: Date) throws {
        let name = (path as NSString).lastPathComponent
        let reason = Reason(file: name, rule: rule, detail: detail, status: status, at: at)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        let target = "\(directory)/quarantine/\(Self.isSafeName(name) ? name : "unsafe-\(UUID().uuidString.prefix(8))")"
        try encoder.encode(reason).write(to: URL(fileURLWithPath: target + ".reason"), options: .atomic)
        guard rename(path, target) == 0 else {
            throw Refusal(rule: "unreadable", detail: "cannot move \(name) to quarantine: \(String(cString: strerror(errno)))")
        }
    }

    public func reason(of name: String) -> Reason? {
        guard Self.isSafeName(name), let data = FileManager.default.contents(atPath: "\(directory)/quarantine/\(name).reason") else { return nil }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try? decoder.decode(Reason.self, from: data)
    }

    /// Moves a quarantined file back to `new/` for another try, dropping its reason.
    public func requeue(_ name: String) throws(Refusal) {
        guard Self.isSafeName(name) else { throw Refusal(rule: "unsafe_name", detail: "no such quarantined file") }
        guard rename("\(directory)/quarantine/\(name)", "\(directory)/new/\(name)") == 0 else {
            throw Refusal(rule: "unreadable", detail: "cannot requeue \(name): \(String(cString: strerror(errno)))")
        }
        unlink("\(directory)/quarantine/\(name).reason")
    }
}

/// A spool file: a raw HTTP request exactly as the forwarder received it, or a bare JSON body.
public enum SpoolFile {
    /// Of the request line only the query string is read (forwarders record the merchant's public path).
    public static func delivery(_ bytes: [UInt8]) throws(Spool.Refusal) -> Delivery {
        guard let first = bytes.first(where: { $0 != 0x20 && $0 != 0x09 && $0 != 0x0A && $0 != 0x0D }), first != UInt8(ascii: "{"),
            first != UInt8(ascii: "[")
        else {
            return Delivery(route: .byShape, body: bytes)
        }
        let firstLine = bytes.prefix { $0 != 0x0A }
        let requestParts = String(decoding: firstLine.last == 0x0D ? firstLine.dropLast() : firstLine, as: UTF8.self).split(separator: " ")
        guard requestParts.count == 3, requestParts[2].hasPrefix("HTTP/1.") else {
            throw Spool.Refusal(
                rule: "unknown_format",
                detail: "the file is neither a JSON body nor a raw HTTP request (POST /path?query HTTP/1.1, headers, empty line, body)")
        }
        // Header block: up to the first empty line (CRLF CRLF, or LF LF from tools that write bare newlines).
        guard let (headEnd, bodyStart) = headerEnd(bytes) else {
            throw Spool.Refusal(rule: "malformed_request", detail: "no empty line after the request headers")
        }
        // Split bytes, not Characters: "\r\n" is one Character in Swift.
        var lines: [String] = []
        for raw in bytes[..<headEnd].split(separator: 0x0A, omittingEmptySubsequences: false) {
            guard let line = String(validating: raw.last == 0x0D ? raw.dropLast() : raw, as: UTF8.self) else {
                throw Spool.Refusal(rule: "bad_encoding", detail: "the request head is not UTF-8")
            }
            lines.append(line)
        }
        let requestLine = lines.removeFirst().split(separator: " ")
        guard ["POST", "PUT"].contains(requestLine[0]) else {
            throw Spool.Refusal(rule: "malformed_request", detail: "a \(requestLine[0].prefix(10)) request carries no delivery; webhooks are POSTed")
        }
        var headers: [(name: String, value: String)] = []
        for line in lines where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":") else { throw Spool.Refusal(rule: "malformed_request", detail: "a header line has no colon") }
            headers.append(
                (
                    String(line[..<colon]).trimmingCharacters(in: .whitespaces),
                    String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
                ))
        }
        var body = Array(bytes[bodyStart...])
        if let length = headers.first(where: { $0.name.lowercased() == "content-length" }).flatMap({ Int($0.value) }) {
            guard length <= body.count else {
                throw Spool.Refusal(rule: "truncated", detail: "Content-Length \(length) but only \(body.count) body bytes")
            }
            body = Array(body.prefix(length))
        }
        let target = String(requestLine[1])
        let query = target.firstIndex(of: "?").map { parseQuery(target[target.index(after: $0)...]) } ?? [:]
        return Delivery(route: .byShape, query: query, headers: headers, body: body)
    }

    static func headerEnd(_ bytes: [UInt8]) -> (Int, Int)? {
        var index = 0
        while index < bytes.count {
            if bytes[index] == 0x0A {
                if index + 1 < bytes.count, bytes[index + 1] == 0x0A { return (index, index + 2) }
                if index + 2 < bytes.count, bytes[index + 1] == 0x0D, bytes[index + 2] == 0x0A { return (index, index + 3) }
            }
            index += 1
        }
        return nil
    }

    static func parseQuery(_ text: Substring) -> [String: String] {
        var result: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(parts[0]).removingPercentEncoding ?? String(parts[0])
            let value = parts.count > 1 ? (String(parts[1]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(parts[1])) : ""
            if result[name] == nil { result[name] = value }
        }
        return result
    }
}
