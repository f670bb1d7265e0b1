import KlarnaAPI
import Logging
import ReconcilerCore
import ServiceLifecycle
import SystemdSupport

/// READY=1 once the group runs (its signal handlers are installed before any service starts, so a SIGTERM right
/// after READY is a graceful stop, never a kill), and STOPPING=1 the moment graceful shutdown begins, while the
/// workers finish their current step.
struct LifecycleAnnouncer: Service {
    let notifier: SystemdNotifier
    let status: String
    let logger: Logger
    let supervisor: Supervisor
    let readiness: Readiness

    func run() async throws {
        readiness.started()
        logger.notice(
            "klarna-reconciler \(ProductInfo.version) \(status)", metadata: [MessageID.metadataKey: .string(MessageID.ready.rawValue)])
        notifier.ready(status: status)
        await withGracefulShutdownHandler {
            try? await gracefulShutdown()
        } onGracefulShutdown: {
            logger.notice("stopping: finishing the steps under way", metadata: [MessageID.metadataKey: .string(MessageID.stopping.rawValue)])
            notifier.stopping(status: "stopping: finishing the steps under way")
            supervisor.draining()
            readiness.draining()
        }
    }
}
