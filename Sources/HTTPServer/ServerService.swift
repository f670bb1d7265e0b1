import ServiceLifecycle

/// Serves until the group shuts down gracefully: the listener closes, open connections finish.
public struct ServerService: Service {
    let server: HTTPServer
    let onShutdown: @Sendable () -> Void

    public init(server: HTTPServer, onShutdown: @escaping @Sendable () -> Void = {}) {
        self.server = server
        self.onShutdown = onShutdown
    }

    public func run() async throws {
        do {
            try await withGracefulShutdownHandler {
                try await cancelWhenGracefulShutdown { try await server.run() }
            } onGracefulShutdown: {
                onShutdown()
            }
        } catch is CancellationError {
            // Shutdown asked for: the listener is closed and open connections have finished.
        }
    }
}
