import Foundation
import Testing
@testable import Ingest

@Suite("BoundedJSON: limits checked while reading, only the named fields kept")
struct BoundedJSONTests {
    func read(
        _ text: String, keep: BoundedJSON.Keep = .fields(["a": .value, "b": .fields(["c": .value])]), limits: BoundedJSON.Limits = .deliveries
    ) throws(BoundedJSON.Failure) -> BoundedJSON {
        try BoundedJSON.read(Array(text.utf8), keep: keep, limits: limits)
    }

    func failure(_ bytes: [UInt8], limits: BoundedJSON.Limits = .deliveries) -> BoundedJSON.Failure? {
        do {
            _ = try BoundedJSON.read(bytes, keep: .fields(["a": .value]), limits: limits)
            return nil
        } catch {
            return error
        }
    }

    func failure(_ text: String, limits: BoundedJSON.Limits = .deliveries) -> BoundedJSON.Failure? { failure(Array(text.utf8), limits: limits) }

    @Test("Named fields are kept with their values; everything else is dropped")
    func keeps() throws {
        let value = try read(#"{"a":"x\"\u00e9\ud83d\ude00","b":{"c":-12.5e3,"d":[1,{"e":null}]},"z":{"y":[true,false]}}"#)
        #expect(value == .object(["a": .string("x\"é😀"), "b": .object(["c": .number("-12.5e3")])]))
        #expect(try read(#"{"a":{"nested":1},"b":[1,2]}"#) == .object(["a": .object([:]), "b": .array]))
        #expect(try read(#" { "a" : true , "b" : null } "#) == .object(["a": .bool(true), "b": .null]))
        #expect(try read("[]") == .array)
        // A key spelled with escapes is not the plain key a route wants.
        #expect(try read(#"{"\u0061":"x"}"#) == .object([:]))
    }

    @Test("Union of two keeps keeps both")
    func union() throws {
        let keep = BoundedJSON.Keep.fields(["a": .fields(["x": .value])]).union(.fields(["a": .fields(["y": .value]), "b": .value]))
        #expect(
            try read(#"{"a":{"x":1,"y":2,"z":3},"b":"B"}"#, keep: keep)
                == .object(["a": .object(["x": .number("1"), "y": .number("2")]), "b": .string("B")]))
    }

    @Test(
        "Malformed JSON is refused with where it broke",
        arguments: [
            "", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "[1,]", "{\"a\":tru}", "{\"a\":01}", "{\"a\":1.}", "{\"a\":1e}", "{\"a\":-}",
            "{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\\udc00\"}", "{\"a\":\"line\nbreak\"}", "{} {}", "{\"a\":1} x",
            "{'a':1}",
        ])
    func malformed(text: String) {
        let result = failure(text)
        #expect(result?.reason == .malformed, "\(text): \(result?.description ?? "accepted")")
        #expect(result?.detail.contains("at byte") == true)
    }

    @Test(
        "Invalid UTF-8 is refused inside and outside strings",
        arguments: [
            [0x7B, 0xFF, 0xFE, 0x7D], [0x7B, 0x22, 0x61, 0x22, 0x3A, 0x22, 0xC0, 0xAF, 0x22, 0x7D],
            [0x7B, 0x22, 0x61, 0x22, 0x3A, 0x22, 0xED, 0xA0, 0x80, 0x22, 0x7D],
            [0x7B, 0x22, 0x7A, 0x22, 0x3A, 0x22, 0xE2, 0x82, 0x22, 0x7D], [0x7B, 0x22, 0x7A, 0x22, 0x3A, 0x22, 0xF4, 0x90, 0x80, 0x80, 0x22, 0x7D],
        ] as [[UInt8]])
    func encoding(bytes: [UInt8]) {
        #expect(failure(bytes)?.reason == .encoding)
    }

    @Test("Each limit stops the read where it is crossed")
    func limits() {
        let small = BoundedJSON.Limits(depth: 3, values: 10, keyBytes: 4, stringBytes: 8, numberCharacters: 5)
        #expect(failure(#"{"a":[[1]]}"#, limits: small) == nil)
        #expect(failure(#"{"a":[[[1]]]}"#, limits: small)?.reason == .tooDeep)
        #expect(failure(#"{"z":{"y":{"x":{}}}}"#, limits: small)?.reason == .tooDeep)
        #expect(failure("[1,2,3,4,5,6,7,8,9]", limits: small) == nil)
        #expect(failure("[1,2,3,4,5,6,7,8,9,10]", limits: small)?.reason == .tooManyValues)
        #expect(failure(#"{"abcd":1}"#, limits: small) == nil)
        #expect(failure(#"{"abcde":1}"#, limits: small)?.reason == .tooLong)
        #expect(failure(#"{"a":"12345678"}"#, limits: small) == nil)
        #expect(failure(#"{"a":"123456789"}"#, limits: small)?.reason == .tooLong)
        // Skipped values are held to the same limits as kept ones.
        #expect(failure(#"{"z":"123456789"}"#, limits: small)?.reason == .tooLong)
        #expect(failure(#"{"a":-1234}"#, limits: small) == nil)
        #expect(failure(#"{"a":-12345}"#, limits: small)?.reason == .tooLong)
        #expect(failure(#"{"a":1e999}"#, limits: small) == nil)
        // Escapes count as what they stand for: "é" is two bytes.
        #expect(failure(#"{"a":"\u00e9\u00e9\u00e9\u00e9"}"#, limits: small) == nil)
        #expect(failure(#"{"a":"\u00e9\u00e9\u00e9\u00e9x"}"#, limits: small)?.reason == .tooLong)
        #expect(failure(#"{"a":1,"a":2}"#)?.reason == .duplicateKey)
    }

    @Test("A hostile body at the size limit is refused early and cheaply")
    func hostileShapes() {
        let mib = 1 << 20
        var objects = "["
        while objects.utf8.count < mib - 20 { objects += #"{"a":1,"b":2},"# }
        objects += "{}]"
        #expect(failure(objects)?.reason == .tooManyValues)
        #expect(failure(String(repeating: "[", count: mib))?.reason == .tooDeep)
        #expect(failure("{\"a\":\"" + String(repeating: "x", count: mib) + "\"}")?.reason == .tooLong)
        #expect(failure("{\"a\":" + String(repeating: "9", count: mib) + "}")?.reason == .tooLong)
        var keys = "{"
        for index in 0..<50_000 { keys += "\"k\(index)\":0," }
        keys += "\"a\":1}"
        #expect(failure(keys)?.reason == .tooManyValues)
        // Where each stopped: at the limit, not at the end of the body.
        let deep = failure(String(repeating: "[", count: mib))
        #expect(deep?.detail.contains("at byte 16") == true, "\(deep?.detail ?? "")")
    }
}
