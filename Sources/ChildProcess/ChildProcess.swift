internal import CSpawn
import Foundation
internal import Glibc
import Synchronization

/// A child process started with `posix_spawn`: the part of `Foundation.Process` the demo, the tests and the benches
/// use, with the same names.
///
/// Why not `Foundation.Process`: on Linux, swift-corelibs-foundation up to Swift 6.3.1 reads `/proc/self/fd` by
/// copying each `dirent`'s whole 256-byte name (`findMaximumOpenFromProcSelfFD`), past the end of glibc's readdir
/// buffer when a record sits at its tail, and `Process.run()` crashes the process now and then with SIGSEGV
/// (swiftlang/swift-corelibs-foundation#5472). A test process that starts hundreds of children hit it in one full
/// run out of two. Here the child closes every descriptor above 2 with `posix_spawn_file_actions_addclosefrom_np`
/// (glibc 2.34), so nothing reads `/proc/self/fd`.
public final class ChildProcess: @unchecked Sendable {
    /// How the child ended.
    public enum TerminationReason: Sendable, Equatable {
        case exit
        case uncaughtSignal
    }

    public struct SpawnFailed: Error, CustomStringConvertible {
        public var path: String
        public var errno: Int32
        public var description: String { "cannot start \(path): \(String(cString: strerror(errno)))" }
    }

    // Set before `run()`, by the one task that starts the child.
    public var executableURL: URL?
    public var arguments: [String] = []
    /// The child's whole environment; nil: this process's.
    public var environment: [String: String]?
    public var currentDirectoryURL: URL?
    /// A `FileHandle` (the child gets its descriptor) or a `Pipe` (the child gets the end it needs); nil: this
    /// process's own.
    public var standardInput: Any?
    public var standardOutput: Any?
    public var standardError: Any?

    private struct State {
        var pid: pid_t = 0
        /// `waitpid`'s status once the child is reaped.
        var status: Int32?
    }

    private let state = Mutex(State())

    public init() {}

    public var processIdentifier: Int32 { state.withLock { $0.pid } }

    /// Starts the child. Throws ``SpawnFailed`` when it cannot.
    public func run() throws {
        guard let path = executableURL?.path else { throw SpawnFailed(path: "(no executable)", errno: EINVAL) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var parentEnds: [FileHandle] = []
        for (stream, target) in [(standardInput, STDIN_FILENO), (standardOutput, STDOUT_FILENO), (standardError, STDERR_FILENO)] {
            guard let stream else { continue }
            let (childEnd, parentEnd) = Self.ends(of: stream, input: target == STDIN_FILENO)
            if let childEnd { posix_spawn_file_actions_adddup2(&actions, childEnd.fileDescriptor, target) }
            if let parentEnd { parentEnds.append(parentEnd) }
        }
        if let directory = currentDirectoryURL?.path {
            cspawn_addchdir(&actions, directory)
        }
        cspawn_addclosefrom(&actions, 3)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Its own process group, as Foundation's; no signal blocked or ignored, whatever this thread has.
        var none = sigset_t()
        sigemptyset(&none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let variables = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        let envp = variables.map { strdup($0) } + [nil]
        defer { envp.forEach { free($0) } }

        var pid: pid_t = 0
        let result = posix_spawn(&pid, path, &actions, &attributes, argv, envp)
        guard result == 0 else { throw SpawnFailed(path: path, errno: result) }
        state.withLock { $0.pid = pid }
        // The child has its copies: a pipe's end left open here would keep a reader waiting for good.
        for end in parentEnds { try? end.close() }
    }

    /// The descriptor the child gets, and for a pipe the end this process closes once the child has it.
    private static func ends(of stream: Any, input: Bool) -> (child: FileHandle?, parentCloses: FileHandle?) {
        if let handle = stream as? FileHandle { return (handle, nil) }
        if let pipe = stream as? Pipe {
            return input ? (pipe.fileHandleForReading, pipe.fileHandleForReading) : (pipe.fileHandleForWriting, pipe.fileHandleForWriting)
        }
        return (nil, nil)
    }

    /// Whether the child still runs; reaps it once it has ended.
    public var isRunning: Bool {
        state.withLock { state in
            guard state.pid > 0 else { return false }
            if state.status != nil { return false }
            var status: Int32 = 0
            let reaped = waitpid(state.pid, &status, WNOHANG)
            guard reaped == state.pid else { return reaped == 0 }
            state.status = status
            return false
        }
    }

    /// Blocks until the child has ended.
    public func waitUntilExit() {
        let pid = state.withLock { $0.status == nil ? $0.pid : 0 }
        guard pid > 0 else { return }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        state.withLock { state in if state.status == nil { state.status = status } }
    }

    /// The exit code, or the signal that ended it (as `Foundation.Process` gives them).
    public var terminationStatus: Int32 {
        guard let status = state.withLock({ $0.status }) else { return 0 }
        return Self.signalled(status) ? status & 0x7f : (status >> 8) & 0xff
    }

    public var terminationReason: TerminationReason {
        guard let status = state.withLock({ $0.status }) else { return .exit }
        return Self.signalled(status) ? .uncaughtSignal : .exit
    }

    /// SIGTERM, as `Foundation.Process.terminate()`.
    public func terminate() {
        let pid = processIdentifier
        if pid > 0 { kill(pid, SIGTERM) }
    }

    private static func signalled(_ status: Int32) -> Bool {
        let signal = status & 0x7f
        return signal != 0 && signal != 0x7f
    }
}
