import Logging
import ReconcilerCore

/// The payment a task is working on, attached to every log line the task writes (the engine's events, the Klarna
/// client's request lines) through swift-log's metadata provider. That is what makes
/// `journalctl HPP_SESSION_ID=…` or `journalctl ORDER_ID=…` return a payment's whole story.
public enum LogContext {
    @TaskLocal public static var metadata: Logger.Metadata = [:]

    /// Give this to `LoggingSystem.bootstrap`.
    public static let provider = Logger.MetadataProvider { metadata }

    /// Runs `body` with the account (`ACCOUNT=`) on every log line, besides what is there already.
    static func with<T: Sendable>(account: AccountID, _ body: () async throws -> T) async rethrows -> T {
        var metadata = self.metadata
        metadata["account"] = .string(account.rawValue)
        return try await $metadata.withValue(metadata, operation: body)
    }

    /// Runs `body` with the identifiers of `session` on every log line.
    static func about<T: Sendable>(_ session: TrackedSession, _ body: () async throws -> T) async rethrows -> T {
        // Added to what is there (the account).
        var metadata = self.metadata
        metadata["hpp_session_id"] = .string(session.hppSessionID)
        metadata["kp_session_id"] = .string(session.kpSessionID)
        if let reference = session.merchantReference { metadata["merchant_reference"] = .string(reference) }
        if let order = session.orderID { metadata["order_id"] = .string(order) }
        return try await $metadata.withValue(metadata, operation: body)
    }

    /// Runs `body` with the identifiers of `order` on every log line.
    static func about<T: Sendable>(_ order: TrackedOrder, _ body: () async throws -> T) async rethrows -> T {
        var metadata = self.metadata
        metadata["order_id"] = .string(order.orderID)
        if let id = order.hppSessionID { metadata["hpp_session_id"] = .string(id) }
        if let id = order.kpSessionID { metadata["kp_session_id"] = .string(id) }
        if let reference = order.merchantReference { metadata["merchant_reference"] = .string(reference) }
        return try await $metadata.withValue(metadata, operation: body)
    }

    static func about<T: Sendable>(paymentRequest id: String, _ body: () async throws -> T) async rethrows -> T {
        var metadata = self.metadata
        metadata["payment_request_id"] = .string(id)
        return try await $metadata.withValue(metadata, operation: body)
    }
}

extension Logger {
    /// This logger with the account (`ACCOUNT=`) on every line: for a service that works for one account.
    func with(account: AccountID) -> Logger {
        var logger = self
        logger[metadataKey: "account"] = .string(account.rawValue)
        return logger
    }
}
