import XCTest

@testable import DepotProtocol

final class ISO8601Tests: XCTestCase {
    /// Every millisecond of a second, in several centuries and on both sides
    /// of 1970, reads back as the text that went in (summing the fraction in
    /// floating point once made `.638` come back as `.637`).
    func testEveryMillisecondTextRoundTrips() {
        for prefix in ["0001-01-01T00:00:00", "1969-12-31T23:59:59", "2025-06-06T03:09:27", "9999-12-31T23:59:59"] {
            for millisecond in 0..<1000 {
                let text = prefix + "." + String(format: "%03d", millisecond) + "Z"
                guard let seconds = ISO8601.seconds(from: text) else { return XCTFail("\(text) did not parse") }
                XCTAssertEqual(ISO8601.string(from: seconds), text)
                var bytes: [UInt8] = []
                ISO8601.writeQuoted(seconds, into: &bytes)
                XCTAssertEqual(String(decoding: bytes, as: UTF8.self), "\"\(text)\"")
            }
        }
    }

    /// Digits past the millisecond are dropped, offsets applied, and short fractions padded.
    func testFractionsAndOffsets() {
        XCTAssertEqual(ISO8601.milliseconds(from: "1970-01-01T00:00:00.6389Z"), 638)
        XCTAssertEqual(ISO8601.milliseconds(from: "1970-01-01T00:00:00.5Z"), 500)
        XCTAssertEqual(ISO8601.milliseconds(from: "1970-01-01T01:00:00.25+01:00"), 250)
        XCTAssertEqual(ISO8601.milliseconds(from: "1970-01-01"), 0)
        XCTAssertNil(ISO8601.milliseconds(from: "1970-01-01T00:00:00.Z"))
        XCTAssertEqual(ISO8601.string(from: .infinity), "1970-01-01T00:00:00.000Z", "no trap on a corrupt value")
    }
}
