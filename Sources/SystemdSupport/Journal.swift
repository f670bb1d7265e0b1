internal import CSystemd
import Foundation
import Logging
import Synchronization

/// A swift-log handler that writes native journald entries (`sd_journal_sendv`): `MESSAGE`, `PRIORITY`,
/// `SYSLOG_IDENTIFIER`, `CODE_FILE`/`CODE_LINE`/`CODE_FUNC`, `MESSAGE_ID` from the `message_id` metadata key, and
/// every other metadata key as a field of its own (`order_id` → `ORDER_ID`, `request.id` → `REQUEST_ID`).
public struct JournalLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    let identifier: String
    let level: LogLevelControl

    public init(identifier: String, level: LogLevelControl, metadataProvider: Logger.MetadataProvider?) {
        self.identifier = identifier
        self.level = level
        self.metadataProvider = metadataProvider
    }

    /// Shared by every logger of the process, so a reload changes the level everywhere at once.
    public var logLevel: Logger.Level {
        get { level.value }
        set { level.value = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let own = event.metadata { merged.merge(own) { $1 } }
        var message = event.message.description
        if let error = event.error { message += ": \(error)" }
        let fields = Self.fields(
            message: message, level: event.level, identifier: identifier, metadata: merged,
            file: event.file, line: event.line, function: event.function)
        Self.send(fields)
    }

    /// The entry's fields, in order, as `NAME=value` strings.
    static func fields(
        message: String, level: Logger.Level, identifier: String, metadata: Logger.Metadata,
        file: String, line: UInt, function: String
    ) -> [String] {
        var fields = [
            "MESSAGE=\(message)", "PRIORITY=\(priority(level))", "SYSLOG_IDENTIFIER=\(identifier)",
            "CODE_FILE=\(file)", "CODE_LINE=\(line)", "CODE_FUNC=\(function)",
        ]
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            guard var name = fieldName(key) else { continue }
            if reserved.contains(name) { name = "META_" + name }
            fields.append("\(name)=\(isSecret(name) ? "<redacted>" : flatten(value))")
        }
        return fields
    }

    /// swift-log levels as syslog priorities.
    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// A journal field name for a metadata key: upper case, anything but `A-Z`, `0-9` and `_` becomes `_`, no
    /// leading `_` or digit (journald silently drops such fields), at most 64 characters. `nil` if nothing is left.
    static func fieldName(_ key: String) -> String? {
        if key == "message_id" { return "MESSAGE_ID" }
        var name = String(
            key.uppercased().unicodeScalars.map { scalar -> Character in
                switch scalar {
                case "A"..."Z", "0"..."9", "_": Character(scalar)
                default: "_"
                }
            })
        while let first = name.first, first == "_" || first.isNumber { name.removeFirst() }
        name = String(name.prefix(64))
        return name.isEmpty ? nil : name
    }

    /// Fields this handler sets itself; a metadata key that would collide is written as `META_<NAME>`.
    static let reserved: Set<String> = ["MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "CODE_FILE", "CODE_LINE", "CODE_FUNC"]

    /// A last guard: nothing in this program logs a secret, but a field named like one never carries its value.
    static func isSecret(_ name: String) -> Bool {
        name.contains("PASSWORD") || name.contains("SECRET") || name.contains("CREDENTIAL") || name == "TOKEN"
            || name.hasSuffix("_TOKEN")
    }

    static func flatten(_ value: Logger.Metadata.Value) -> String {
        switch value {
        case .string(let text): text
        case .stringConvertible(let convertible): convertible.description
        case .array(let values): "[" + values.map(flatten).joined(separator: ", ") + "]"
        case .dictionary(let values): "{" + values.sorted { $0.key < $1.key }.map { "\($0.key): \(flatten($0.value))" }.joined(separator: ", ") + "}"
        }
    }

    /// One datagram per entry; libsystemd switches to the length-prefixed form for values with newlines.
    static func send(_ fields: [String]) {
        let buffers = fields.map { Array($0.utf8) }
        var pointers: [UnsafeMutableRawPointer] = []
        pointers.reserveCapacity(buffers.count)
        for buffer in buffers {
            let memory = UnsafeMutableRawPointer.allocate(byteCount: max(buffer.count, 1), alignment: 1)
            buffer.withUnsafeBytes { memory.copyMemory(from: $0.baseAddress!, byteCount: buffer.count) }
            pointers.append(memory)
        }
        defer { pointers.forEach { $0.deallocate() } }
        var vectors = zip(pointers, buffers).map { iovec(iov_base: $0.0, iov_len: $0.1.count) }
        _ = sd_journal_sendv(&vectors, Int32(vectors.count))
    }
}

/// The process's log level, shared by all its loggers and changed by a reload.
public final class LogLevelControl: Sendable {
    private let level: Mutex<Logger.Level>

    public init(_ level: Logger.Level) { self.level = Mutex(level) }

    public var value: Logger.Level {
        get { level.withLock { $0 } }
        set { level.withLock { $0 = newValue } }
    }
}

/// Plain stderr lines (swift-log's stream format, metadata included) for when stderr is not the journal: a
/// terminal, a pipe, a test harness.
public struct StderrLogHandler: LogHandler {
    private var stream: StreamLogHandler
    let level: LogLevelControl

    public init(label: String, level: LogLevelControl, metadataProvider: Logger.MetadataProvider?) {
        stream = StreamLogHandler.standardError(label: label, metadataProvider: metadataProvider)
        stream.logLevel = .trace
        self.level = level
    }

    public var logLevel: Logger.Level {
        get { level.value }
        set { level.value = newValue }
    }

    public var metadata: Logger.Metadata {
        get { stream.metadata }
        set { stream.metadata = newValue }
    }

    public var metadataProvider: Logger.MetadataProvider? {
        get { stream.metadataProvider }
        set { stream.metadataProvider = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { stream[metadataKey: key] }
        set { stream[metadataKey: key] = newValue }
    }

    public func log(event: LogEvent) { stream.log(event: event) }
}

public enum LogDestination {
    /// True when stderr is the journal's stream for this service (`$JOURNAL_STREAM` names its device and inode), so
    /// native entries go to the same place with their fields.
    public static var stderrIsJournal: Bool {
        guard let stream = ProcessInfo.processInfo.environment["JOURNAL_STREAM"] else { return false }
        let parts = stream.split(separator: ":")
        var info = stat()
        guard parts.count == 2, fstat(STDERR_FILENO, &info) == 0 else { return false }
        return parts[0] == "\(info.st_dev)" && parts[1] == "\(info.st_ino)"
    }

    /// Installs the process's log handler: native journald entries under journald, plain stderr otherwise.
    /// Call once, first thing.
    public static func bootstrap(identifier: String, level: LogLevelControl, metadataProvider: Logger.MetadataProvider?) {
        let journal = stderrIsJournal
        LoggingSystem.bootstrap(
            { label, provider -> any LogHandler in
                journal
                    ? JournalLogHandler(identifier: identifier, level: level, metadataProvider: provider)
                    : StderrLogHandler(label: label, level: level, metadataProvider: provider)
            }, metadataProvider: metadataProvider)
    }
}
