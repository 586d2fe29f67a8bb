import Foundation

/// Converts between ``JSONValue`` and `Codable` types.
///
/// Typed params and results are plain `Codable` structs (the MCP SDK's way);
/// this bridges them to the dynamic values that the envelope carries.
public enum JSONCoding {
    /// Decodes `type` from `value`.
    ///
    /// - Throws: a ``RPCError`` with code -32602 naming the field that did not fit.
    public static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue, field: String = "params")
        throws(RPCError) -> T
    {
        if let direct = T.self as? any WellFormedDecodable.Type, let decoded = direct.init(wellFormed: value) as? T {
            return decoded
        }
        do {
            return try JSONValueDecoder.decode(T.self, from: value)
        } catch let error as DecodingError {
            throw RPCError.invalidParams(describe(error, root: field), field: fieldPath(error, root: field))
        } catch {
            throw RPCError.invalidParams("\(field): \(error)", field: field)
        }
    }

    /// Encodes `value` to bytes of JSON.
    public static func encodeBytes<T: Encodable>(_ value: T) throws(RPCError) -> [UInt8] {
        JSONWriter.encode(try encode(value))
    }

    /// Encodes `value` to a ``JSONValue``, directly (no bytes in between).
    public static func encode<T: Encodable>(_ value: T) throws(RPCError) -> JSONValue {
        do {
            return try JSONValueEncoder.encode(value)
        } catch {
            throw RPCError(code: .internalError, message: "could not encode a value: \(error)")
        }
    }

    private static func path(_ codingPath: [any CodingKey], root: String) -> String {
        codingPath.reduce(root) { partial, key in
            if let index = key.intValue { return "\(partial)[\(index)]" }
            return "\(partial).\(key.stringValue)"
        }
    }

    private static func fieldPath(_ error: DecodingError, root: String) -> String {
        switch error {
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            return path(context.codingPath, root: root)
        case .keyNotFound(let key, let context):
            return path(context.codingPath + [key], root: root)
        @unknown default:
            return root
        }
    }

    private static func describe(_ error: DecodingError, root: String) -> String {
        switch error {
        case .typeMismatch(let type, let context):
            return
                "\(path(context.codingPath, root: root)) must be \(typeDescription(type)), got \(context.debugDescription)"
        case .valueNotFound(let type, let context):
            return "\(path(context.codingPath, root: root)) must be \(typeDescription(type)), not null"
        case .keyNotFound(let key, let context):
            return "\(path(context.codingPath + [key], root: root)) is required"
        case .dataCorrupted(let context):
            return "\(path(context.codingPath, root: root)): \(context.debugDescription)"
        @unknown default:
            return "\(root): \(error)"
        }
    }

    private static func describeOther(_ name: String) -> String {
        if name.hasPrefix("Array") { return "an array" }
        if name.hasPrefix("Dictionary") { return "an object" }
        return name
    }

    private static func typeDescription(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Int.Type, is Int64.Type, is Int32.Type: "an integer"
        case is Double.Type: "a number"
        case is Bool.Type: "a boolean"
        case let choices as any (CaseIterable & RawRepresentable).Type:
            "one of the strings \(allowedRawValues(of: choices).joined(separator: ", "))"
        default:
            describeOther(String(describing: type))
        }
    }
}
