import Glibc

/// A loopback TCP port that refuses every connection for as long as this value lives: a socket bound to it that never
/// listens. Unlike a listener opened and closed again, the port stays taken, so no other test running in parallel can
/// be handed it and answer instead.
public final class RefusingPort: Sendable {
    public let port: Int
    private let descriptor: Int32

    public init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw RefusingPortError(call: "socket", errno: errno) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else {
            let error = RefusingPortError(call: "bind", errno: errno)
            close(fd)
            throw error
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else {
            let error = RefusingPortError(call: "getsockname", errno: errno)
            close(fd)
            throw error
        }
        descriptor = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(descriptor) }
}

public struct RefusingPortError: Error, CustomStringConvertible {
    public let call: String
    public let errno: Int32
    public var description: String { "\(call): \(String(cString: strerror(errno)))" }
}
