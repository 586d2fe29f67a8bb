import DepotProtocol

/// One `$/progress` partial-result notification of a streamed fetch, kept as the
/// bytes that came off the socket: `{..., "params": {"token": T, "value": {"objects": [...]}}}`.
///
/// The transport only finds where the objects are; the fetch that asked for
/// them decodes them from there (``objects(as:dictionaries:)``), each straight
/// into the caller's type, with no ``JSONValue`` tree in between.
struct PartialResultChunk: Sendable {
    /// The whole message.
    let frame: [UInt8]
    /// The `objects` array's bytes within ``frame``.
    let objects: Range<Int>
    /// How many objects the array holds.
    let count: Int

    /// The partial-result token and chunk `frame` carries, or `nil` when it is anything
    /// else (or not as the daemon writes it): such a frame takes the ordinary path.
    static func scan(_ frame: [UInt8]) -> (token: String, chunk: PartialResultChunk)? {
        try? JSONStreamReader.read(frame) { reader throws(JSONParser.Failure) -> (String, PartialResultChunk)? in
            try reader.beginObject()
            var method: String?
            var found: (token: String, objects: Range<Int>, count: Int)?
            while let key = try reader.nextKey() {
                switch key {
                case "method":
                    method = try reader.value().stringValue
                    guard method == ProgressNotification.name else { return nil }
                case "params":
                    found = try params(&reader)
                    guard found != nil else { return nil }
                case "id":
                    return nil
                default:
                    _ = try reader.skipValue()
                }
            }
            try reader.end()
            guard method == ProgressNotification.name, let found else { return nil }
            return (found.token, PartialResultChunk(frame: frame, objects: found.objects, count: found.count))
        }
    }

    /// `{"token": T, "value": {"objects": [...]}}`: the token and where the objects are.
    private static func params(_ reader: inout JSONStreamReader) throws(JSONParser.Failure) -> (
        token: String, objects: Range<Int>, count: Int
    )? {
        try reader.beginObject()
        var token: String?
        var objects: (range: Range<Int>, count: Int)?
        while let key = try reader.nextKey() {
            switch key {
            case "token":
                guard let text = try reader.value().stringValue else { return nil }
                token = text
            case "value":
                try reader.beginObject()
                while let member = try reader.nextKey() {
                    let skipped = try reader.skipValue()
                    guard member == "objects" else { return nil }
                    guard let count = skipped.elements else { return nil }
                    objects = (skipped.range, count)
                }
            default:
                return nil
            }
        }
        guard let token, let objects else { return nil }
        return (token, objects.range, objects.count)
    }

    /// The chunk's objects as `Object`, in order; with `dictionaries` (a grouped fetch, or
    /// `resultType: dictionaries`), each element decoded as `Object` (never a ``DepotObject``:
    /// it has no id). What ``DepotObject/init(json:)`` and `Object`'s decoding would give
    /// from the parsed message, without parsing it into values first.
    func objects<Object: Decodable & Sendable>(as type: Object.Type, dictionaries: Bool) throws(DepotClientError)
        -> [Object]
    {
        try frame.withUnsafeBufferPointer { buffer throws(DepotClientError) -> [Object] in
            let wire = WireBytes(bytes: buffer)
            var decoded: [Object] = []
            decoded.reserveCapacity(count)
            var members: [WireBytes.Member] = []
            members.reserveCapacity(16)
            // Asked once a chunk, not once an object: a dynamic cast costs a conformance lookup.
            let decodesItself = Object.self != DepotObject.self && !(Object.self is any FetchRequestResult.Type)
            // One pass over the array: each object's end is found as its members are read.
            let limit = objects.upperBound
            do {
                guard objects.lowerBound < limit, wire.bytes[objects.lowerBound] == UInt8(ascii: "[") else {
                    throw WireBytes.failure("expected an array", at: objects.lowerBound)
                }
                var index = wire.skipWhitespace(from: objects.lowerBound + 1)
                if index < limit, wire.bytes[index] == UInt8(ascii: "]"), index + 1 == limit { return decoded }
                while true {
                    let start = wire.skipWhitespace(from: index)
                    let isObject = start < limit && wire.bytes[start] == UInt8(ascii: "{")
                    let end =
                        isObject
                        ? try wire.object(at: start, limit: limit, into: &members)
                        : try wire.valueRange(from: start).upperBound
                    decoded.append(
                        try Self.object(
                            at: start..<end, of: wire, members: isObject ? members : nil, dictionaries: dictionaries,
                            decodesItself: decodesItself))
                    index = wire.skipWhitespace(from: end)
                    guard index < limit else { throw WireBytes.failure("unexpected end of input", at: index) }
                    switch wire.bytes[index] {
                    case UInt8(ascii: ","): index += 1
                    case UInt8(ascii: "]") where index + 1 == limit: return decoded
                    default: throw WireBytes.failure("expected ',' or ']'", at: index)
                    }
                }
            } catch let error as JSONParser.Failure {
                throw .invalidResponse("a partial result that is not valid JSON: \(error)")
            } catch let error as DepotClientError {
                throw error
            } catch {
                throw .invalidResponse("\(error)")
            }
        }
    }

    /// One element as `Object`: the same outcome as decoding its parsed ``JSONValue``.
    private static func object<Object: Decodable & Sendable>(
        at range: Range<Int>, of wire: WireBytes, members: [WireBytes.Member]?, dictionaries: Bool,
        decodesItself: Bool
    ) throws(DepotClientError) -> Object {
        if dictionaries {
            guard Object.self != DepotObject.self else {
                throw .invalidResponse(
                    "a grouped fetch (or resultType dictionaries) returns dictionaries, not objects: fetch them as [String: JSONValue] or a Decodable type of yours"
                )
            }
            do {
                return try WireDecoder.decode(Object.self, from: wire, range: range, members: members)
            } catch {
                throw .invalidResponse("\(Self.excerpt(wire, range)) cannot be made into \(Object.self): \(error)")
            }
        }
        guard let members else {
            throw .invalidResponse("an object must be a JSON object with a string 'id': \(Self.excerpt(wire, range))")
        }
        // A type of the caller's own (not one that makes itself from a DepotObject) is decoded
        // from the bytes, when the object carries what its wire form would: a string id, an entity.
        if decodesItself, let id = Self.member("id", of: members, in: wire),
            wire.bytes[id.lowerBound] == UInt8(ascii: "\""),
            let entity = Self.member("entity", of: members, in: wire),
            wire.bytes[entity.lowerBound] == UInt8(ascii: "\""), Self.versionIsPlain(members, wire)
        {
            do {
                return try WireDecoder.decode(Object.self, from: wire, range: range, members: members)
            } catch {
                let name = (try? wire.string(at: id)) ?? "?"
                throw .invalidResponse("\(name) cannot be made into \(Object.self): \(error)")
            }
        }
        let raw = try DepotObject(wire: wire, members: members, range: range)
        do {
            return try Object.make(from: raw)
        } catch {
            throw .invalidResponse("\(raw.id) cannot be made into \(Object.self): \(error)")
        }
    }

    /// The value of the last member named `name`.
    static func member(_ name: String, of members: [WireBytes.Member], in wire: WireBytes) -> Range<Int>? {
        for member in members.reversed() where wire.member(member, isNamed: name) { return member.value }
        return nil
    }

    /// Whether `version` is absent or an integer as written (a `DepotObject` would rewrite any other form).
    private static func versionIsPlain(_ members: [WireBytes.Member], _ wire: WireBytes) -> Bool {
        guard let version = member("version", of: members, in: wire) else { return true }
        return wire.bytes[version].allSatisfy { (0x30...0x39).contains($0) || $0 == UInt8(ascii: "-") }
    }

    private static func excerpt(_ wire: WireBytes, _ range: Range<Int>) -> String {
        (try? wire.value(at: range).excerpt()) ?? String(decoding: wire.bytes[range].prefix(80), as: UTF8.self)
    }
}

extension DepotObject {
    /// Reads an object from its wire form in place: what ``init(json:)`` gives from the parsed value.
    init(wire: WireBytes, members: [WireBytes.Member], range: Range<Int>) throws(DepotClientError) {
        var values: [String: JSONValue] = [:]
        values.reserveCapacity(members.count)
        var id: JSONValue?
        var entity: JSONValue?
        var version: JSONValue?
        do {
            for member in members {
                let key = try wire.key(of: member)
                let value = try Self.value(at: member.value, of: wire)
                switch key {
                case "id": id = value
                case "entity": entity = value
                case "version": version = value
                default: values[key] = value
                }
            }
        } catch {
            throw .invalidResponse("an object that is not valid JSON: \(error)")
        }
        guard let id = id?.stringValue else {
            let json = (try? wire.value(at: range)) ?? .null
            throw .invalidResponse("an object must be a JSON object with a string 'id': \(json.excerpt())")
        }
        self.init(
            id: id, entity: entity?.stringValue ?? Self.entity(ofID: id), version: version?.intValue, values: values)
    }

    /// A member's value: strings without escapes (most of them) straight from the bytes.
    private static func value(at range: Range<Int>, of wire: WireBytes) throws(JSONParser.Failure) -> JSONValue {
        switch wire.bytes[range.lowerBound] {
        case UInt8(ascii: "\""): return .string(try wire.string(at: range))
        case UInt8(ascii: "n") where wire.isNull(range): return .null
        default: return try wire.value(at: range)
        }
    }
}
