import Foundation

/// The lower bound on payout dates that `klarna-reconciler settlements --since` and the operators' socket's
/// `GET /v1/settlements?since=` take: a day, from its midnight UTC, or an exact instant.
///
/// Read field by field, never by a date parser that rolls over: `2026-11-01T25:00:00Z` is refused (hour 25), not
/// taken as the next day's 01:00.
public enum PayoutSince {
    /// What ``read(_:)`` accepts, for error messages.
    public static let expected = "a day (YYYY-MM-DD, from its midnight UTC) or an ISO 8601 date-time such as 2026-11-01T08:00:00Z"

    /// Why a text is not a ``PayoutSince``: the field out of range (`hour 25 is out of range (00–23)`), or the shape.
    public struct Invalid: Error, Equatable, CustomStringConvertible {
        public let description: String

        init(_ description: String) { self.description = description }
    }

    /// ``read(_:)``, `nil` for anything it refuses.
    public static func parse(_ text: String) -> Date? { try? read(text) }

    /// `2026-11-01` (its midnight UTC) or a date-time `2026-11-01T08:00:00Z`, with fractional seconds
    /// (`08:00:00.250Z`) and an offset instead of `Z` (`+01:00`, `-0530`) allowed. Every field is checked against
    /// its range: month 01–12, the day against its month's length (29 February only in a leap year), hour 00–23,
    /// minute and second 00–59 (no leap second), an offset at most 14 hours (the widest in use) with minutes 00–59.
    public static func read(_ text: String) throws(Invalid) -> Date {
        var reader = Reader(Array(text.utf8))
        let year = try reader.number("year", digits: 4)
        try reader.expect("-", after: "the year")
        let month = try reader.number("month", digits: 2)
        try reader.expect("-", after: "the month")
        let day = try reader.number("day", digits: 2)
        guard (1...9_999).contains(year) else { throw Invalid("year \(four(year)) is out of range (0001–9999)") }
        try check("month", month, 1...12)
        let length = daysIn(month: month, of: year)
        guard (1...length).contains(day) else {
            throw Invalid("day \(two(day)) is out of range for \(four(year))-\(two(month)) (01–\(length))")
        }
        let midnight = Double(daysSinceEpoch(year: year, month: month, day: day)) * 86_400
        if reader.atEnd { return Date(timeIntervalSince1970: midnight) }

        guard reader.take("T") || reader.take("t") else {
            throw Invalid("\(reader.rest) after the date is not a time (THH:MM:SS followed by Z or an offset)")
        }
        let hour = try reader.number("hour", digits: 2)
        try reader.expect(":", after: "the hour")
        let minute = try reader.number("minute", digits: 2)
        try reader.expect(":", after: "the minute")
        let second = try reader.number("second", digits: 2)
        try check("hour", hour, 0...23)
        try check("minute", minute, 0...59)
        try check("second", second, 0...59)
        var fraction = 0.0
        if reader.take(".") {
            let digits = reader.digits()
            guard (1...9).contains(digits.count) else { throw Invalid("fractional seconds must be 1 to 9 digits") }
            fraction = Double("0.\(digits)") ?? 0
        }
        let offset = try reader.offset()
        guard reader.atEnd else { throw Invalid("\(reader.rest) after the time is not part of a date-time") }
        return Date(timeIntervalSince1970: midnight + Double(hour * 3_600 + minute * 60 + second - offset) + fraction)
    }

    private static func check(_ field: String, _ value: Int, _ range: ClosedRange<Int>) throws(Invalid) {
        guard range.contains(value) else {
            throw Invalid("\(field) \(two(value)) is out of range (\(two(range.lowerBound))–\(two(range.upperBound)))")
        }
    }

    static func isLeap(_ year: Int) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

    static func daysIn(month: Int, of year: Int) -> Int {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days from 1970-01-01 to a day of the proleptic Gregorian calendar (Howard Hinnant's `days_from_civil`).
    static func daysSinceEpoch(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    private static func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
    private static func four(_ value: Int) -> String { String(repeating: "0", count: max(0, 4 - "\(value)".count)) + "\(value)" }

    /// The text's bytes, read left to right.
    private struct Reader {
        let bytes: [UInt8]
        var index = 0

        init(_ bytes: [UInt8]) { self.bytes = bytes }

        var atEnd: Bool { index == bytes.count }
        /// What is left, quoted and cut short, for messages.
        var rest: String { "\"\(String(decoding: bytes[index...].prefix(20), as: UTF8.self))\"" }

        mutating func take(_ character: Character) -> Bool {
            guard !atEnd, bytes[index] == character.asciiValue else { return false }
            index += 1
            return true
        }

        mutating func expect(_ character: Character, after what: String) throws(Invalid) {
            guard take(character) else { throw Invalid("expected \"\(character)\" after \(what), not \(atEnd ? "the end" : rest)") }
        }

        /// The decimal digits from here, at most `limit` of them.
        mutating func digits(limit: Int = .max) -> String {
            let start = index
            while !atEnd, index - start < limit, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }

        /// Exactly `count` decimal digits, as a number.
        mutating func number(_ field: String, digits count: Int) throws(Invalid) -> Int {
            let text = digits(limit: count)
            guard text.count == count, let value = Int(text) else {
                throw Invalid("the \(field) must be \(count) digits, not \(text.isEmpty ? (atEnd ? "missing" : rest) : "\"\(text)\"")")
            }
            return value
        }

        /// `Z`, `±HH:MM` or `±HHMM`, in seconds east of UTC.
        mutating func offset() throws(Invalid) -> Int {
            if take("Z") || take("z") { return 0 }
            let sign: Int
            if take("+") {
                sign = 1
            } else if take("-") {
                sign = -1
            } else {
                throw Invalid("a date-time needs its offset from UTC (Z, or ±HH:MM), not \(atEnd ? "nothing" : rest)")
            }
            let hours = try number("offset's hours", digits: 2)
            _ = take(":")
            let minutes = try number("offset's minutes", digits: 2)
            try check("offset minute", minutes, 0...59)
            guard hours * 60 + minutes <= 14 * 60 else {
                throw Invalid("offset \(sign < 0 ? "-" : "+")\(two(hours)):\(two(minutes)) is out of range (at most ±14:00)")
            }
            return sign * (hours * 3_600 + minutes * 60)
        }
    }
}
