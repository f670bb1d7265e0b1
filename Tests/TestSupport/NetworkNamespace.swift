import ChildProcess
import Foundation
import Glibc
import Synchronization

/// A network namespace standing for another host, joined to this one by veth pairs ("links"), each a /30 of its
/// own in 10.213.0.0/16, an address range that exists only inside the test. A partition is a link set down; healing
/// is setting it up. Removed by ``remove()`` or at exit, whatever the test's result.
public final class NetworkNamespace: Sendable {
    public struct Link: Sendable {
        /// The interface on this (the root) side: the one to set down.
        public let interface: String
        /// This side's address and the namespace side's.
        public let local: String
        public let remote: String
    }

    public let name: String
    public let links: [Link]

    private static let created = Mutex<Set<String>>([])
    private static let exitHandler: Void = {
        atexit {
            for name in NetworkNamespace.created.withLock({ $0 }) { _ = system("/usr/sbin/ip netns del \(name) 2>/dev/null") }
        }
    }()

    /// Requires root (CAP_NET_ADMIN).
    public init(links count: Int) async throws {
        _ = Self.exitHandler
        let tag = String(UInt32.random(in: 0..<UInt32.max), radix: 16)
        name = "krns-\(tag)"
        let subnet = Int.random(in: 1...250)
        links = (0..<count).map { index in
            Link(interface: "kr\(tag.prefix(6))h\(index)", local: "10.213.\(subnet).\(index * 4 + 1)", remote: "10.213.\(subnet).\(index * 4 + 2)")
        }
        try await Self.run(["netns", "add", name])
        Self.created.withLock { _ = $0.insert(name) }
        try await Self.run(["netns", "exec", name, "ip", "link", "set", "lo", "up"])
        for (index, link) in links.enumerated() {
            let peer = "kr\(tag.prefix(6))n\(index)"
            try await Self.run(["link", "add", link.interface, "type", "veth", "peer", "name", peer])
            try await Self.run(["link", "set", peer, "netns", name])
            try await Self.run(["addr", "add", link.local + "/30", "dev", link.interface])
            try await Self.run(["link", "set", link.interface, "up"])
            try await Self.run(["netns", "exec", name, "ip", "addr", "add", link.remote + "/30", "dev", peer])
            try await Self.run(["netns", "exec", name, "ip", "link", "set", peer, "up"])
        }
    }

    /// The /24 every link's addresses are in.
    public var network: String { links[0].local.split(separator: ".").prefix(3).joined(separator: ".") + ".0/24" }

    /// Cuts (`false`) or heals (`true`) a link.
    public func set(_ link: Link, up: Bool) async throws { try await Self.run(["link", "set", link.interface, up ? "up" : "down"]) }

    /// Removes the namespace (its ends of the links go with it, and so the links).
    public func remove() async {
        _ = await Self.ip(["netns", "del", name])
        Self.created.withLock { _ = $0.remove(name) }
    }

    struct Failed: Error, CustomStringConvertible {
        let description: String
    }

    private static func run(_ arguments: [String]) async throws {
        let status = await ip(arguments)
        guard status == 0 else { throw Failed(description: "ip \(arguments.joined(separator: " ")) exited \(status)") }
    }

    @discardableResult
    private static func ip(_ arguments: [String]) async -> Int32 {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return -1 }
        // Polled: waitUntilExit() would block a thread of the task pool.
        while process.isRunning { try? await Task.sleep(for: .milliseconds(5)) }
        return process.terminationStatus
    }
}
