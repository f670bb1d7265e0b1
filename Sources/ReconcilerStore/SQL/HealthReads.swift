import Foundation
import ReconcilerCore

extension ReloadMailbox where Self: StatementRunner {
    public func requestReload(at: Date) async throws -> Int64 {
        Int64(try await rows(writtenBy: "INSERT INTO reloads (requested_at) VALUES (\(at)) RETURNING id").first?.int(0) ?? 0)
    }

    public func answerReloads(through id: Int64, ok: Bool, message: String, at: Date) async throws {
        _ = try await rows(
            writtenBy: "UPDATE reloads SET answered_at = \(at), ok = \(ok), message = \(message) WHERE id <= \(id) AND answered_at IS NULL")
    }

    public func newestReloadRequest() async throws -> Int64? {
        try await rows(of: "SELECT max(id) FROM reloads WHERE answered_at IS NULL").first?.int(0).map(Int64.init)
    }

    public func reloadAnswer(_ id: Int64) async throws -> ReloadAnswer? {
        try await rows(of: "SELECT ok, message FROM reloads WHERE id = \(id) AND answered_at IS NOT NULL").first.map {
            ReloadAnswer(ok: $0.bool(0) == true, message: $0.string(1) ?? "")
        }
    }
}

extension StoreHealth where Self: StatementRunner {
    /// What the store probe and `STATUS=` read every few seconds: the side effects not known done, Klarna's health.
    public func liveStatus() async throws -> LiveStatus {
        let unfinished: [String] = [Intent.State.intended, .sent, .ambiguous].map(\.rawValue)
        var status = LiveStatus(
            unfinishedIntents: try await rows(of: "SELECT count(*) FROM intents WHERE state \(anyOf: unfinished)").first?.int(0) ?? 0)
        let klarna = [HealthKey.klarnaOK, .klarnaError].map(\.rawValue)
        for row in try await rows(of: "SELECT name, at, detail FROM health WHERE name \(anyOf: klarna)") {
            if row.string(0) == HealthKey.klarnaOK.rawValue {
                status.lastKlarnaSuccess = row.date(1)
            } else {
                status.lastKlarnaError = row.date(1)
                status.lastKlarnaErrorDetail = row.string(2)
            }
        }
        return status
    }
}
