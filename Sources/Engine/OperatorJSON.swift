import Foundation
import KlarnaAPI

/// The one JSON convention for what the daemon prints or serves to people and programs: the operators' socket (from
/// its `/v2` routes), every `--json` of the command line and the outbox. snake_case keys (Klarna's own convention),
/// ISO 8601 UTC dates with milliseconds, sorted keys. A map's keys are data and stay as they are.
public enum OperatorJSON {
    public static func encoder(pretty: Bool = false) -> JSONEncoder {
        let encoder = KlarnaJSON.encoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(format(date))
        }
        if pretty { encoder.outputFormatting.insert(.prettyPrinted) }
        return encoder
    }

    /// Reads what ``encoder(pretty:)`` wrote back into the same types.
    public static func decoder() -> JSONDecoder {
        let decoder = KlarnaJSON.decoder()
        decoder.keyDecodingStrategy = .custom { path in PropertyKey(propertyName(path.last?.stringValue ?? "")) }
        return decoder
    }

    /// `2026-11-26T10:03:31.123Z`: UTC, to the nearest millisecond. Rounded, not truncated, so that a date read back
    /// from this text (the nearest binary value to .123, which may lie just below it) prints the same text again.
    static func format(_ date: Date) -> String {
        let milliseconds = (date.timeIntervalSince1970 * 1_000).rounded()
        let seconds = (milliseconds / 1_000).rounded(.down)
        let whole = Date(timeIntervalSince1970: seconds).formatted(.iso8601)  // 2026-11-26T10:03:31Z
        return whole.dropLast() + String(format: ".%03dZ", Int(milliseconds - seconds * 1_000))
    }

    /// `hpp_session_id` → `hppSessionID`: the inverse of `convertToSnakeCase` for this code's property names, which
    /// write the initialisms ID and URL in capitals (Foundation's `convertFromSnakeCase` would give `hppSessionId`).
    static func propertyName(_ key: String) -> String {
        // Leading underscores stay, as `convertToSnakeCase` keeps them (`_0`, an enum case's unnamed value).
        let leading = key.prefix { $0 == "_" }
        let words = key.dropFirst(leading.count).split(separator: "_", omittingEmptySubsequences: false)
        guard words.count > 1 else { return key }
        return leading + words[0]
            + words.dropFirst().map { word in
                switch word {
                case "id": "ID"
                case "url": "URL"
                default: word.prefix(1).uppercased() + word.dropFirst()
                }
            }.joined()
    }

    private struct PropertyKey: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init(_ name: String) { stringValue = name }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }
}
