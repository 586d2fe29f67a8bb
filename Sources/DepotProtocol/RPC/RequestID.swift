/// A JSON-RPC request id: a string or an integer, echoed in the response.
public enum RequestID: Hashable, Sendable, Codable, CustomStringConvertible {
    case string(String)
    case number(Int64)

    /// Reads an id from its JSON form, or `nil` when it is neither a string nor an integer.
    public init?(json: JSONValue) {
        switch json {
        case .string(let value): self = .string(value)
        case .int(let value): self = .number(value)
        default: return nil
        }
    }

    /// The JSON form.
    public var json: JSONValue {
        switch self {
        case .string(let value): .string(value)
        case .number(let value): .int(value)
        }
    }

    /// Equal when the ids are: a string id by its bytes (two spellings are two requests in flight).
    public static func == (lhs: RequestID, rhs: RequestID) -> Bool {
        switch (lhs, rhs) {
        case (.string(let a), .string(let b)): a.bytesEqual(b)
        case (.number(let a), .number(let b)): a == b
        default: false
        }
    }

    /// Hashes a string id by its bytes.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .string(let value):
            hasher.combine(0 as UInt8)
            ByteString.hash(value, into: &hasher)
        case .number(let value):
            hasher.combine(1 as UInt8)
            hasher.combine(value)
        }
    }

    public var description: String {
        switch self {
        case .string(let value): "\"\(value)\""
        case .number(let value): String(value)
        }
    }

    /// Decodes a string or integer id.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let number = try? container.decode(Int64.self) {
            self = .number(number)
        } else {
            self = .string(try container.decode(String.self))
        }
    }

    /// Encodes the plain string or integer.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        }
    }
}
