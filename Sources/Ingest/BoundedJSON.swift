/// A JSON reader for bodies nobody vouches for yet. Every limit (nesting depth, values in all, key, string and number
/// lengths) is checked as the bytes are read, and only the fields a route names are built into values: a 1 MiB body
/// of 47,000 small objects costs a scan, not a tree of 47,000 dictionaries.
public enum BoundedJSON: Sendable, Equatable {
    case null
    case bool(Bool)
    /// The number as written (JSON grammar checked): a route decides what it may be (an amount is a whole number).
    case number(String)
    case string(String)
    /// An array's elements are never kept (no route reads one): only that it was an array.
    case array
    case object([String: BoundedJSON])

    /// What a route keeps of a body: a value whole (scalars only; an object or array there is kept as its kind), or
    /// an object's named fields, each with what to keep of it. Everything else is scanned, checked and dropped.
    public indirect enum Keep: Sendable {
        case value
        case fields([String: Keep])

        /// Both sets of fields (for a spool file, whose kind is known only from the fields it has).
        public func union(_ other: Keep) -> Keep {
            switch (self, other) {
            case (.fields(let a), .fields(let b)): .fields(a.merging(b) { $0.union($1) })
            case (.fields, .value): self
            case (.value, _): other
            }
        }
    }

    public struct Limits: Sendable, Equatable {
        /// Objects and arrays inside each other.
        public var depth: Int
        /// Values in the whole document, counted as they are read (an object's members, an array's elements).
        public var values: Int
        /// UTF-8 bytes of a key, and of a string value, after unescaping.
        public var keyBytes: Int
        public var stringBytes: Int
        /// Characters of a number as written (sign, digits, fraction, exponent).
        public var numberCharacters: Int

        public init(depth: Int = 16, values: Int = 2_048, keyBytes: Int = 128, stringBytes: Int = 16_384, numberCharacters: Int = 40) {
            self.depth = depth
            self.values = values
            self.keyBytes = keyBytes
            self.stringBytes = stringBytes
            self.numberCharacters = numberCharacters
        }

        /// Klarna's callbacks and webhooks, and the shop's track and capture requests, are a few dozen values of
        /// short strings (the largest are an HPP session as read and a Klarna Network payload).
        public static let deliveries = Limits()
    }

    /// Why a body was not read: a stable word and, for people, what was wrong and at which byte.
    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        public enum Reason: String, Sendable {
            case malformed = "malformed_json"
            case encoding = "bad_encoding"
            case tooDeep = "too_deep"
            case tooManyValues = "too_many_values"
            case tooLong = "too_long"
            case duplicateKey = "duplicate_key"
        }

        public let reason: Reason
        public let detail: String
        public var description: String { "\(reason.rawValue): \(detail)" }
    }

    /// Reads `bytes` as one JSON document under `limits`, keeping what `keep` names.
    public static func read(_ bytes: [UInt8], keep: Keep, limits: Limits = .deliveries) throws(Failure) -> BoundedJSON {
        try bytes.withUnsafeBufferPointer { (buffer) throws(Failure) -> BoundedJSON in
            var reader = Reader(bytes: buffer, limits: limits)
            let value = try reader.value(keep: keep, depth: 0)
            reader.skipWhitespace()
            guard reader.offset == buffer.count else { throw reader.failure(.malformed, "text after the JSON value") }
            return value
        }
    }

    public subscript(key: String) -> BoundedJSON? {
        if case .object(let fields) = self { return fields[key] }
        return nil
    }

    public var keys: Set<String> {
        if case .object(let fields) = self { return Set(fields.keys) }
        return []
    }
}

private struct Reader {
    let bytes: UnsafeBufferPointer<UInt8>
    let limits: BoundedJSON.Limits
    var offset = 0
    var values = 0

    init(bytes: UnsafeBufferPointer<UInt8>, limits: BoundedJSON.Limits) {
        self.bytes = bytes
        self.limits = limits
    }

    func failure(_ reason: BoundedJSON.Failure.Reason, _ what: String) -> BoundedJSON.Failure {
        BoundedJSON.Failure(reason: reason, detail: "\(what) (at byte \(offset))")
    }

    /// A byte where JSON's structure wants another: outside strings JSON is ASCII, so a byte above 0x7F there is
    /// an encoding problem before it is a grammar one.
    func unexpected(_ byte: UInt8, _ what: String) -> BoundedJSON.Failure {
        byte >= 0x80 ? failure(.encoding, "the body is not valid UTF-8") : failure(.malformed, what)
    }

    mutating func skipWhitespace() {
        while offset < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[offset]) { offset += 1 }
    }

    mutating func next() throws(BoundedJSON.Failure) -> UInt8 {
        skipWhitespace()
        guard offset < bytes.count else { throw failure(.malformed, "the body ends early") }
        return bytes[offset]
    }

    mutating func expect(_ literal: StaticString, _ value: BoundedJSON) throws(BoundedJSON.Failure) -> BoundedJSON {
        let text = UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount)
        guard offset + text.count <= bytes.count, zip(bytes[offset..<offset + text.count], text).allSatisfy({ $0 == $1 }) else {
            throw failure(.malformed, "not a JSON value")
        }
        offset += text.count
        return value
    }

    /// One value; `keep` says whether to build it (`nil`: scan and drop).
    mutating func value(keep: BoundedJSON.Keep?, depth: Int) throws(BoundedJSON.Failure) -> BoundedJSON {
        values += 1
        guard values <= limits.values else { throw failure(.tooManyValues, "more than \(limits.values) values") }
        let byte = try next()
        switch byte {
        case UInt8(ascii: "{"): return try object(keep: keep, depth: depth + 1)
        case UInt8(ascii: "["): return try array(depth: depth + 1)
        case UInt8(ascii: "\""):
            let text = try string(limit: limits.stringBytes, what: "a string", keep: keep != nil)
            return .string(text ?? "")
        case UInt8(ascii: "t"): return try expect("true", .bool(true))
        case UInt8(ascii: "f"): return try expect("false", .bool(false))
        case UInt8(ascii: "n"): return try expect("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number(keep: keep != nil))
        default: throw unexpected(byte, "not a JSON value")
        }
    }

    mutating func object(keep: BoundedJSON.Keep?, depth: Int) throws(BoundedJSON.Failure) -> BoundedJSON {
        guard depth <= limits.depth else { throw failure(.tooDeep, "nested deeper than \(limits.depth)") }
        offset += 1
        let wanted: [String: BoundedJSON.Keep]? = if case .fields(let fields) = keep { fields } else { nil }
        var fields: [String: BoundedJSON] = [:]
        if try next() == UInt8(ascii: "}") {
            offset += 1
            return .object(fields)
        }
        while true {
            let quote = try next()
            guard quote == UInt8(ascii: "\"") else { throw unexpected(quote, "an object key must be a string") }
            // A key is compared with the wanted ones without building a String for the others.
            let start = offset + 1
            _ = try string(limit: limits.keyBytes, what: "a key", keep: false)
            let key = wanted.flatMap { Self.key(in: bytes, from: start, to: offset - 1, among: $0) }
            let colon = try next()
            guard colon == UInt8(ascii: ":") else { throw unexpected(colon, "':' must follow an object key") }
            offset += 1
            let member = try value(keep: key.flatMap { wanted?[$0] }, depth: depth)
            if let key {
                guard fields[key] == nil else { throw failure(.duplicateKey, "\(key) appears twice") }
                fields[key] = member
            }
            switch try next() {
            case UInt8(ascii: ","): offset += 1
            case UInt8(ascii: "}"):
                offset += 1
                return .object(fields)
            case let byte: throw unexpected(byte, "',' or '}' must follow an object member")
            }
        }
    }

    mutating func array(depth: Int) throws(BoundedJSON.Failure) -> BoundedJSON {
        guard depth <= limits.depth else { throw failure(.tooDeep, "nested deeper than \(limits.depth)") }
        offset += 1
        if try next() == UInt8(ascii: "]") {
            offset += 1
            return .array
        }
        while true {
            _ = try value(keep: nil, depth: depth)
            switch try next() {
            case UInt8(ascii: ","): offset += 1
            case UInt8(ascii: "]"):
                offset += 1
                return .array
            case let byte: throw unexpected(byte, "',' or ']' must follow an array element")
            }
        }
    }

    /// The wanted key whose escape-free spelling is `bytes[from..<to]`. A key written with escapes is never one a
    /// route wants (Klarna's and the shop's keys are plain ASCII), so it is dropped like any unknown key.
    static func key(in bytes: UnsafeBufferPointer<UInt8>, from: Int, to: Int, among wanted: [String: BoundedJSON.Keep]) -> String? {
        let slice = UnsafeBufferPointer(rebasing: bytes[from..<to])
        guard !slice.contains(UInt8(ascii: "\\")) else { return nil }
        return wanted.keys.first { $0.utf8.elementsEqual(slice) }
    }

    /// A string starting at the opening quote; its text when `keep`. Escapes and UTF-8 are checked either way, and
    /// the unescaped length is held to `limit`.
    mutating func string(limit: Int, what: String, keep: Bool) throws(BoundedJSON.Failure) -> String? {
        offset += 1
        var text: [UInt8] = []
        var length = 0
        func add(_ byte: UInt8) { if keep { text.append(byte) } }
        while true {
            guard offset < bytes.count else { throw failure(.malformed, "a string is not closed") }
            let byte = bytes[offset]
            switch byte {
            case UInt8(ascii: "\""):
                offset += 1
                return keep ? String(decoding: text, as: UTF8.self) : nil
            case UInt8(ascii: "\\"):
                guard offset + 1 < bytes.count else { throw failure(.malformed, "a string is not closed") }
                let escaped = bytes[offset + 1]
                offset += 2
                switch escaped {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): add(escaped); length += 1
                case UInt8(ascii: "b"): add(0x08); length += 1
                case UInt8(ascii: "f"): add(0x0C); length += 1
                case UInt8(ascii: "n"): add(0x0A); length += 1
                case UInt8(ascii: "r"): add(0x0D); length += 1
                case UInt8(ascii: "t"): add(0x09); length += 1
                case UInt8(ascii: "u"):
                    let scalar = try unicodeEscape()
                    for unit in UTF8.encode(scalar)! { add(unit) }
                    length += UTF8.width(scalar)
                default: throw failure(.malformed, "an unknown escape in a string")
                }
            case 0x00..<0x20: throw failure(.malformed, "a control character inside a string")
            case 0x80...:
                let width = try utf8Sequence()
                for unit in bytes[offset..<offset + width] { add(unit) }
                offset += width
                length += width
            default:
                add(byte)
                offset += 1
                length += 1
            }
            guard length <= limit else { throw failure(.tooLong, "\(what) longer than \(limit) bytes") }
        }
    }

    /// `XXXX` after `\u`, joined with a following low surrogate; a lone surrogate is malformed.
    mutating func unicodeEscape() throws(BoundedJSON.Failure) -> Unicode.Scalar {
        let high = try hex4()
        if (0xD800...0xDBFF).contains(high) {
            guard offset + 1 < bytes.count, bytes[offset] == UInt8(ascii: "\\"), bytes[offset + 1] == UInt8(ascii: "u") else {
                throw failure(.malformed, "a lone surrogate in a \\u escape")
            }
            offset += 2
            let low = try hex4()
            guard (0xDC00...0xDFFF).contains(low) else { throw failure(.malformed, "a lone surrogate in a \\u escape") }
            return Unicode.Scalar(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))!
        }
        guard let scalar = Unicode.Scalar(high) else { throw failure(.malformed, "a lone surrogate in a \\u escape") }
        return scalar
    }

    mutating func hex4() throws(BoundedJSON.Failure) -> UInt32 {
        guard offset + 4 <= bytes.count else { throw failure(.malformed, "a \\u escape needs four hex digits") }
        var value: UInt32 = 0
        for byte in bytes[offset..<offset + 4] {
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw failure(.malformed, "a \\u escape needs four hex digits")
            }
            value = value << 4 | UInt32(digit)
        }
        offset += 4
        return value
    }

    /// The width of the well-formed UTF-8 sequence at `offset` (RFC 3629: no overlongs, no surrogates, ≤ U+10FFFF).
    func utf8Sequence() throws(BoundedJSON.Failure) -> Int {
        let lead = bytes[offset]
        let width: Int
        var lower: UInt8 = 0x80
        var upper: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: width = 2
        case 0xE0: width = 3; lower = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: width = 3
        case 0xED: width = 3; upper = 0x9F
        case 0xF0: width = 4; lower = 0x90
        case 0xF1...0xF3: width = 4
        case 0xF4: width = 4; upper = 0x8F
        default: throw failure(.encoding, "the body is not valid UTF-8")
        }
        guard offset + width <= bytes.count else { throw failure(.encoding, "the body is not valid UTF-8") }
        guard (lower...upper).contains(bytes[offset + 1]), bytes[offset + 2..<offset + width].allSatisfy({ (0x80...0xBF).contains($0) }) else {
            throw failure(.encoding, "the body is not valid UTF-8")
        }
        return width
    }

    /// A number in JSON's grammar, at most `numberCharacters` long; its text when `keep`.
    mutating func number(keep: Bool) throws(BoundedJSON.Failure) -> String {
        let start = offset
        func digits(_ reader: inout Reader) -> Int {
            let from = reader.offset
            while reader.offset < reader.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(reader.bytes[reader.offset]) {
                reader.offset += 1
                // Checked as the digits go by: a megabyte of digits is refused at the limit, not after.
                if reader.offset - start > reader.limits.numberCharacters { break }
            }
            return reader.offset - from
        }
        if bytes[offset] == UInt8(ascii: "-") { offset += 1 }
        let integer = offset
        guard digits(&self) > 0 else { throw failure(.malformed, "a number needs digits") }
        if bytes[integer] == UInt8(ascii: "0"), offset - integer > 1 { throw failure(.malformed, "a number with a leading zero") }
        if offset < bytes.count, bytes[offset] == UInt8(ascii: ".") {
            offset += 1
            guard digits(&self) > 0 else { throw failure(.malformed, "a fraction needs digits") }
        }
        if offset < bytes.count, bytes[offset] == UInt8(ascii: "e") || bytes[offset] == UInt8(ascii: "E") {
            offset += 1
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "+") || bytes[offset] == UInt8(ascii: "-") { offset += 1 }
            guard digits(&self) > 0 else { throw failure(.malformed, "an exponent needs digits") }
        }
        guard offset - start <= limits.numberCharacters else { throw failure(.tooLong, "a number longer than \(limits.numberCharacters) characters") }
        return keep ? String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<offset]), as: UTF8.self) : ""
    }
}
