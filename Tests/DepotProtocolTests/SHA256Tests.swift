import DepotProtocol
import XCTest

/// SHA-256 against the FIPS 180-4 examples, and the results digest built on it.
final class SHA256Tests: XCTestCase {
    func testKnownVectors() {
        XCTAssertEqual(SHA256.hex([]), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(SHA256.hex("abc".utf8), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(
            SHA256.hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        XCTAssertEqual(
            SHA256.hex(
                "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"
                    .utf8),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1")
        XCTAssertEqual(
            SHA256.hex([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    /// Fed in pieces of any size, across block boundaries, the digest is the same as fed at once.
    func testPiecesEqualTheWhole() {
        var random = SystemRandomNumberGenerator()
        for length in [0, 1, 55, 56, 63, 64, 65, 119, 120, 127, 128, 129, 1000] {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
            var hash = SHA256()
            var rest = bytes[...]
            while !rest.isEmpty {
                let piece = rest.prefix(Int.random(in: 1...70, using: &random))
                hash.update(Array(piece))
                rest = rest.dropFirst(piece.count)
            }
            XCTAssertEqual(SHA256.hexString(hash.finalize()), SHA256.hex(bytes), "length \(length)")
        }
        // A sequence without contiguous storage.
        XCTAssertEqual(SHA256.hex("abc".utf8.lazy.map { $0 }), SHA256.hex("abc".utf8))
    }

    func testResultsDigestJoinsIdsByNewline() {
        XCTAssertEqual(ResultsDigest.of([]), SHA256.hex([]))
        XCTAssertEqual(ResultsDigest.of(["Team/1", "Team/2"]), SHA256.hex("Team/1\nTeam/2".utf8))
        // Bytes, not canonical equivalence: é precomposed and decomposed differ.
        XCTAssertNotEqual(ResultsDigest.of(["caf\u{E9}"]), ResultsDigest.of(["cafe\u{301}"]))
        XCTAssertTrue(ResultsDigest.isWellFormed(ResultsDigest.of(["x"])))
        XCTAssertFalse(ResultsDigest.isWellFormed(ResultsDigest.of(["x"]).uppercased()))
        XCTAssertFalse(ResultsDigest.isWellFormed("abc"))
    }
}
