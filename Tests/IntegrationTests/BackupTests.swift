import Foundation
import KlarnaSandbox
import ReconcilerCore
import ReconcilerStore
import Testing
import TestSupport

@Suite("Backup and restore", .serialized)
struct BackupTests {
    @Test("backup while the daemon runs gives a checked copy; restored after more payments, nothing Klarna did is done again")
    func backupAndRestore() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        func payment(_ reference: String) throws -> CreatedSession {
            try fixture.sandbox.createSession(
                SessionSpec(orderAmount: 3_000, merchantReference: reference, schedule: [ScheduleStep(afterSeconds: 0.3, status: "COMPLETED")]))
        }
        func outcomes(_ created: CreatedSession) async throws -> [OutcomeKind] {
            try await fixture.readStore().timeline(for: created.hppSessionId).outcomes.map(\.outcome.kind)
        }
        let first = try payment("before-backup")
        #expect(try await fixture.cli(["track", first.hppSessionId, "--kp-session", first.kpSessionId]).status == 0)
        try await waitUntil(timeout: .seconds(30)) { try await outcomes(first) == [.orderPlaced, .captured] }

        let file = fixture.directory + "/backup.sqlite"
        let backup = try await fixture.cli(["backup", file])
        #expect(backup.status == 0, "\(backup.errors)")
        #expect(backup.output.contains("integrity ok; 1 sessions, 1 orders"), "\(backup.output)")
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int)
        #expect(mode == 0o640)
        // Retention from the command line against the live store: nothing is 90 days old here.
        let dryRun = try await fixture.cli(["prune", "--dry-run"])
        #expect(dryRun.status == 0, "\(dryRun.errors)")
        #expect(dryRun.output.hasPrefix("would prune: 0 closed payments, 0 payment requests, 0 events"), "\(dryRun.output)")
        let pruned = try await fixture.cli(["prune"])
        #expect(pruned.status == 0, "\(pruned.errors)")
        #expect(pruned.output.hasPrefix("pruned: 0 closed payments"))
        let again = try await fixture.cli(["backup", file])
        #expect(again.status == 73)
        #expect(again.errors.contains("exists; a backup never overwrites"))

        // A payment the backup does not know: placed and captured after it.
        let second = try payment("after-backup")
        #expect(try await fixture.cli(["track", second.hppSessionId, "--kp-session", second.kpSessionId]).status == 0)
        try await waitUntil(timeout: .seconds(30)) { try await outcomes(second) == [.orderPlaced, .captured] }

        // Restore as docs/operations.md says: stop, replace the store (and drop its WAL), start.
        #expect(try await fixture.stop() == 0)
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: fixture.storePath + suffix) }
        try FileManager.default.copyItem(atPath: file, toPath: fixture.storePath)
        try await fixture.start()
        #expect(try await outcomes(first) == [.orderPlaced, .captured])
        #expect(try await fixture.readStore().session(second.hppSessionId) == nil)

        // The shop tracks the lost payment again: the daemon reads Klarna first and finds the order already placed,
        // so it stops and says so instead of placing a second order.
        #expect(try await fixture.cli(["track", second.hppSessionId, "--kp-session", second.kpSessionId]).status == 0)
        try await waitUntil(timeout: .seconds(30)) { try await outcomes(second) == [.needsAttention] }
        #expect(try await fixture.stop() == 0)
        for created in [first, second] {
            #expect(fixture.sandbox.effects(kind: .orderPlaced).filter { $0.kpSessionId == created.kpSessionId }.count == 1)
        }
        #expect(fixture.sandbox.effects(kind: .captured).count == 2)
    }
}
