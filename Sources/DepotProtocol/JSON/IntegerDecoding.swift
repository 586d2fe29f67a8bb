/// A single-value decoding container that reads every fixed-width integer type through one
/// generic reader, so each decoder writes the range check once.
public protocol IntegerDecodingContainer: SingleValueDecodingContainer {
    /// The value as `I`, or a type mismatch when it is not an integer that fits.
    func integer<I: FixedWidthInteger>(_ type: I.Type) throws -> I
}

extension IntegerDecodingContainer {
    /// Decodes an `Int`.
    public func decode(_ type: Int.Type) throws -> Int { try integer(Int.self) }
    /// Decodes an `Int8`.
    public func decode(_ type: Int8.Type) throws -> Int8 { try integer(Int8.self) }
    /// Decodes an `Int16`.
    public func decode(_ type: Int16.Type) throws -> Int16 { try integer(Int16.self) }
    /// Decodes an `Int32`.
    public func decode(_ type: Int32.Type) throws -> Int32 { try integer(Int32.self) }
    /// Decodes an `Int64`.
    public func decode(_ type: Int64.Type) throws -> Int64 { try integer(Int64.self) }
    /// Decodes a `UInt`.
    public func decode(_ type: UInt.Type) throws -> UInt { try integer(UInt.self) }
    /// Decodes a `UInt8`.
    public func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(UInt8.self) }
    /// Decodes a `UInt16`.
    public func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(UInt16.self) }
    /// Decodes a `UInt32`.
    public func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(UInt32.self) }
    /// Decodes a `UInt64`.
    public func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(UInt64.self) }
}
