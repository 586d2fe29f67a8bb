/// A compact hash map from object row numbers to chunk numbers, for
/// ``OrderedIndex``.
///
/// Open addressing with linear probing over two flat arrays (8 + 4 bytes a
/// slot), sized to the entry count rather than to the next power of two:
/// about 17 bytes per id where a `Dictionary<Int64, Int32>` of a million ids
/// takes 25. Row numbers are positive; 0 marks an empty slot.
struct IDMap: Sendable {
    private var keys: [Int64]
    private var values: [Int32]
    private(set) var count = 0

    init(capacity: Int = 16) {
        let slots = max(16, Int(Double(capacity) / 0.7))
        keys = [Int64](repeating: 0, count: slots)
        values = [Int32](repeating: 0, count: slots)
    }

    private func slot(for key: Int64) -> Int {
        // Fibonacci hashing spreads consecutive ids.
        let hash = UInt64(bitPattern: key) &* 0x9E37_79B9_7F4A_7C15
        return Int(hash.multipliedFullWidth(by: UInt64(keys.count)).high)
    }

    subscript(key: Int64) -> Int32? {
        get {
            var index = slot(for: key)
            while true {
                let found = keys[index]
                if found == key { return values[index] }
                if found == 0 { return nil }
                index = index + 1 == keys.count ? 0 : index + 1
            }
        }
        set {
            if let newValue { insert(key, newValue) } else { remove(key) }
        }
    }

    private mutating func insert(_ key: Int64, _ value: Int32) {
        precondition(key > 0, "row numbers are positive")
        if count + 1 > keys.count * 85 / 100 { grow() }
        var index = slot(for: key)
        while true {
            let found = keys[index]
            if found == key {
                values[index] = value
                return
            }
            if found == 0 {
                keys[index] = key
                values[index] = value
                count += 1
                return
            }
            index = index + 1 == keys.count ? 0 : index + 1
        }
    }

    /// Removes `key`, shifting later entries of its probe run back (no tombstones).
    @discardableResult
    mutating func remove(_ key: Int64) -> Int32? {
        var index = slot(for: key)
        while keys[index] != key {
            if keys[index] == 0 { return nil }
            index = index + 1 == keys.count ? 0 : index + 1
        }
        let removed = values[index]
        keys[index] = 0
        count -= 1
        var hole = index
        var next = index + 1 == keys.count ? 0 : index + 1
        while keys[next] != 0 {
            let home = slot(for: keys[next])
            // Move the entry into the hole if its home is not cyclically within (hole, next].
            let inRange = hole <= next ? (home > hole && home <= next) : (home > hole || home <= next)
            if !inRange {
                keys[hole] = keys[next]
                values[hole] = values[next]
                keys[next] = 0
                hole = next
            }
            next = next + 1 == keys.count ? 0 : next + 1
        }
        return removed
    }

    private mutating func grow() {
        var bigger = IDMap(capacity: max(count * 2, 16))
        for (index, key) in keys.enumerated() where key != 0 { bigger.insert(key, values[index]) }
        self = bigger
    }
}
