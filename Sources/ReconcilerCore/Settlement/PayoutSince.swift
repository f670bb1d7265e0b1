import Foundation

/// The lower bound on payout dates that `klarna-reconciler settlements --since` and the operators' socket's
/// `GET /v1/settlements?since=` take: a day, from its midnight UTC, or an exact instant.
public enum PayoutSince {
    /// What ``parse(_:)`` accepts, for error messages.
    public static let expected = "a day (YYYY-MM-DD, from its midnight UTC) or an ISO 8601 date-time such as 2026-11-01T08:00:00Z"

    /// `2026-11-01` (midnight UTC) or an ISO 8601 date-time (`2026-11-01T08:00:00Z`, fractional seconds allowed);
    /// nil for anything else, a day that does not exist (`2026-02-30`, `2026-13-01`) included.
    public static func parse(_ text: String) -> Date? {
        let instant = Date.ISO8601FormatStyle()
        let midnight = text + "T00:00:00Z"
        // Formatted back to compare: a parser that rolls 2026-02-30 over to March must not make it a day.
        if let day = try? instant.parse(midnight), day.formatted(instant) == midnight { return day }
        return (try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text)) ?? (try? instant.parse(text))
    }
}
