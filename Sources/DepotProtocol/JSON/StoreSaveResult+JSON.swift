extension StoreSave.Result {
    /// The result as JSON, written straight into bytes: exactly what
    /// ``JSONCoding/encodeBytes(_:)`` writes (members sorted by name), without
    /// the `Encoder` and the ``JSONValue`` tree in between. Every save answers
    /// with one, so the daemon writes it this way.
    public var jsonBytes: [UInt8] {
        var writer = JSONWriter(capacity: 48 + 40 * (ids.count + versions.count))
        writer.writeRaw("{\"ids\":{")
        for (offset, key) in ids.keys.sorted().enumerated() {
            if offset > 0 { writer.writeRaw(",") }
            writer.write(key)
            writer.writeRaw(":")
            writer.write(ids[key]!)
        }
        writer.writeRaw("},\"transaction\":")
        writer.write(transaction)
        writer.writeRaw(",\"versions\":{")
        for (offset, key) in versions.keys.sorted().enumerated() {
            if offset > 0 { writer.writeRaw(",") }
            writer.write(key)
            writer.writeRaw(":")
            writer.write(versions[key]!)
        }
        writer.writeRaw("}}")
        return writer.bytes
    }
}
