import DepotProtocol
import Foundation
import GRDB

/// Converts attribute values between their wire form (``JSONValue``) and
/// their stored form (SQLite values), per ``AttributeType``.
///
/// Dates are stored as seconds since 1970 so that they sort and compare as
/// numbers; booleans as 0/1; UUIDs as lowercase text; binary as blobs; json as text.
public enum ValueCoding {
    /// Why a wire value does not fit an attribute.
    public struct Mismatch: Error, Sendable {
        /// What the attribute expects.
        public let expected: String
    }

    /// The stored value of `value` for an attribute of `type`.
    public static func databaseValue(_ value: JSONValue, type: AttributeType) throws(Mismatch) -> DatabaseValue {
        if case .null = value { return .null }
        switch type {
        case .string:
            guard case .string(let text) = value else { throw Mismatch(expected: "a string") }
            // SQLite's text binding ends at U+0000: refuse rather than store a shorter string.
            guard !text.utf8.contains(0) else { throw Mismatch(expected: "a string without U+0000 (NUL)") }
            return text.databaseValue
        case .integer:
            guard let number = value.intValue else { throw Mismatch(expected: "an integer") }
            return number.databaseValue
        case .double:
            guard let number = value.doubleValue else { throw Mismatch(expected: "a number") }
            return number.databaseValue
        case .boolean:
            guard case .bool(let flag) = value else { throw Mismatch(expected: "a boolean") }
            return (flag ? 1 : 0).databaseValue
        case .date:
            if case .string(let text) = value, let seconds = ISO8601.seconds(from: text) {
                return seconds.databaseValue
            }
            throw Mismatch(expected: "an ISO 8601 date string such as \"2026-11-22T10:15:30.250Z\"")
        case .uuid:
            guard case .string(let text) = value, let uuid = UUID(uuidString: text) else {
                throw Mismatch(expected: "a UUID string")
            }
            return uuid.uuidString.lowercased().databaseValue
        case .binary:
            guard case .string(let text) = value, let data = Data(base64Encoded: text) else {
                throw Mismatch(expected: "a base64 string")
            }
            return data.databaseValue
        case .json:
            return String(decoding: JSONWriter.encode(value), as: UTF8.self).databaseValue
        }
    }

    /// The wire value of a stored value.
    public static func json(_ value: DatabaseValue, type: AttributeType) -> JSONValue {
        switch value.storage {
        case .null: return .null
        case .int64(let number):
            switch type {
            case .boolean: return .bool(number != 0)
            case .double: return .double(Double(number))
            case .date: return .string(ISO8601.string(from: Double(number)))
            default: return .int(number)
            }
        case .double(let number):
            switch type {
            case .date: return .string(ISO8601.string(from: number))
            case .integer: return .int(Int64(number))
            default: return .double(number)
            }
        case .string(let text):
            if type == .json { return (try? JSONParser.parse(text)) ?? .string(text) }
            return .string(text)
        case .blob(let data):
            return .string(data.base64EncodedString())
        }
    }
}
