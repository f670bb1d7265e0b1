import Foundation
import Testing
import ReconcilerCore

/// `settlements --since` and the operators' socket's `?since=`: days and date-times read field by field, every field
/// out of range refused with its name, never rolled over into the next day or month.
@Suite("PayoutSince")
struct PayoutSinceTests {
    /// 2026-11-01T00:00:00Z.
    let november = Date(timeIntervalSince1970: 1_793_491_200)

    @Test(
        "A day is its midnight UTC; 29 February only in a leap year (2024, 2000; not 2025 or 1900)",
        arguments: [
            ("2026-11-01", 1_793_491_200.0), ("1970-01-01", 0.0), ("2024-02-29", 1_709_164_800.0), ("2000-02-29", 951_782_400.0),
            ("2026-12-31", 1_798_675_200.0), ("2026-04-30", 1_777_507_200.0), ("9999-12-31", 253_402_214_400.0),
        ])
    func days(_ text: String, _ seconds: Double) throws {
        #expect(try PayoutSince.read(text) == Date(timeIntervalSince1970: seconds), "\(text)")
        #expect(PayoutSince.parse(text) == Date(timeIntervalSince1970: seconds))
    }

    @Test(
        "A date-time with Z or an offset is that instant; fractional seconds count",
        arguments: [
            ("2026-11-01T08:00:00Z", 28_800.0), ("2026-11-01t08:00:00z", 28_800.0), ("2026-11-01T23:59:59Z", 86_399.0),
            ("2026-11-01T08:00:00.250Z", 28_800.25), ("2026-11-01T09:00:00+01:00", 28_800.0),
            ("2026-11-01T02:30:00-0530", 28_800.0), ("2026-11-01T08:00:00-00:00", 28_800.0),
            ("2026-11-01T08:00:00+14:00", -21_600.0), ("2026-11-01T00:00:00-12:00", 43_200.0),
        ])
    func dateTimes(_ text: String, _ secondsAfterMidnight: Double) throws {
        #expect(try PayoutSince.read(text) == november.addingTimeInterval(secondsAfterMidnight), "\(text)")
    }

    @Test(
        "Each field out of range is refused and named, never rolled over",
        arguments: [
            ("2026-11-01T25:00:00Z", "hour 25 is out of range (00–23)"),
            ("2026-11-01T24:00:00Z", "hour 24 is out of range (00–23)"),
            ("2026-11-01T08:61:00Z", "minute 61 is out of range (00–59)"),
            ("2026-11-01T08:00:60Z", "second 60 is out of range (00–59)"),
            ("2026-11-01T08:00:99Z", "second 99 is out of range (00–59)"),
            ("2026-02-30", "day 30 is out of range for 2026-02 (01–28)"),
            ("2025-02-29", "day 29 is out of range for 2025-02 (01–28)"),
            ("1900-02-29T00:00:00Z", "day 29 is out of range for 1900-02 (01–28)"),
            ("2026-04-31", "day 31 is out of range for 2026-04 (01–30)"),
            ("2026-11-00", "day 00 is out of range for 2026-11 (01–30)"),
            ("2026-13-01", "month 13 is out of range (01–12)"),
            ("2026-00-10", "month 00 is out of range (01–12)"),
            ("0000-01-01", "year 0000 is out of range (0001–9999)"),
            ("2026-11-01T08:00:00+15:00", "offset +15:00 is out of range (at most ±14:00)"),
            ("2026-11-01T08:00:00-14:30", "offset -14:30 is out of range (at most ±14:00)"),
            ("2026-11-01T08:00:00+05:75", "offset minute 75 is out of range (00–59)"),
        ])
    func fieldOutOfRange(_ text: String, _ problem: String) {
        #expect(refusal(text) == problem, "\(text)")
        #expect(PayoutSince.parse(text) == nil, "\(text)")
    }

    @Test(
        "What is not a day or a date-time is refused saying where it stopped",
        arguments: [
            ("yesterday", "the year must be 4 digits, not \"yesterday\""),
            ("02/11/2026", "the year must be 4 digits, not \"02\""),
            ("", "the year must be 4 digits, not missing"),
            ("2026-1-01", "the month must be 2 digits, not \"1\""),
            ("20261-01-01", "expected \"-\" after the year, not \"1-01-01\""),
            ("2026-11-01 08:00:00Z", "\" 08:00:00Z\" after the date is not a time (THH:MM:SS followed by Z or an offset)"),
            ("2026-11-01T08:00Z", "expected \":\" after the minute, not \"Z\""),
            ("2026-11-01T08:00:00", "a date-time needs its offset from UTC (Z, or ±HH:MM), not nothing"),
            ("2026-11-01T08:00:00+01", "the offset's minutes must be 2 digits, not missing"),
            ("2026-11-01T08:00:00.Z", "fractional seconds must be 1 to 9 digits"),
            ("2026-11-01T08:00:00Zx", "\"x\" after the time is not part of a date-time"),
        ])
    func notADate(_ text: String, _ problem: String) {
        #expect(refusal(text) == problem, "\(text)")
    }

    /// Why `text` is refused; `nil` when it is read.
    func refusal(_ text: String) -> String? {
        do {
            _ = try PayoutSince.read(text)
            return nil
        } catch {
            return error.description
        }
    }
}
