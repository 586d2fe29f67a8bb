import DepotStore

/// The ordered ids of a fetched-results set, with O(log N) rank lookups.
///
/// Entries `(sort key, id)` are kept sorted in chunks of at most
/// ``chunkCapacity``; a running count per chunk gives ranks, and a map from id
/// to its chunk finds an object's old position without storing its key twice.
/// Inserting or removing costs a binary search over chunks, a shift inside one
/// chunk and an update of the chunk counts: for a million entries about two
/// thousand chunks, microseconds per change. This is the order-statistics
/// structure the fetched-results engine needs so that a transaction's cost
/// grows with its size, not with the size of the results.
struct OrderedIndex: Sendable {
    struct Entry: Sendable {
        var key: SortKey
        var id: Int64
    }

    private struct Chunk: Sendable {
        var entries: [Entry] = []
    }

    static let chunkCapacity = 512

    /// Sort directions, one per key value.
    let ascending: [Bool]
    /// Chunks in storage order; `order` says their sequence.
    private var chunks: [Chunk] = []
    /// Chunk numbers in sequence.
    private var order: [Int32] = []
    /// Where each chunk number sits in `order`.
    private var positionOfChunk: [Int32] = []
    /// Entries before each position in `order` (prefix sums), kept current by every change
    /// so that lookups never mutate (a mutation would copy the whole index if it is shared).
    private var prefix: [Int] = [0]
    /// The chunk holding each id.
    private var chunkOfID = IDMap()
    /// Storage slots of chunks that emptied, for reuse.
    private var freeChunks: [Int32] = []

    init(ascending: [Bool]) {
        self.ascending = ascending
    }

    /// The number of entries.
    var count: Int { chunkOfID.count }

    /// Whether `id` is in the index.
    func contains(_ id: Int64) -> Bool { chunkOfID[id] != nil }

    /// Orders two entries: by key, then by id ascending (the fetch tie-break).
    func less(_ a: Entry, _ b: Entry) -> Bool {
        let order = a.key.compare(b.key, ascending: ascending)
        return order != 0 ? order < 0 : a.id < b.id
    }

    /// Builds an index from entries already in order (a fetch's `ORDER BY`).
    init(sortedEntries: [Entry], ascending: [Bool]) {
        self.init(ascending: ascending, expectedCount: sortedEntries.count)
        for entry in sortedEntries { append(entry) }
        finishAppending()
    }

    /// An empty index sized for `expectedCount` entries, to fill with ``append(_:)``.
    init(ascending: [Bool], expectedCount: Int) {
        self.ascending = ascending
        chunkOfID = IDMap(capacity: expectedCount)
        chunks.reserveCapacity(expectedCount / Self.chunkCapacity + 1)
    }

    /// Appends an entry that orders after every entry present (building from an ordered read).
    mutating func append(_ entry: Entry) {
        if order.isEmpty || chunks[Int(order[order.count - 1])].entries.count == Self.chunkCapacity {
            let number = Int32(chunks.count)
            var entries: [Entry] = []
            entries.reserveCapacity(Self.chunkCapacity)
            chunks.append(Chunk(entries: entries))
            order.append(number)
            positionOfChunk.append(Int32(order.count - 1))
        }
        let number = order[order.count - 1]
        chunks[Int(number)].entries.append(entry)
        chunkOfID[entry.id] = number
    }

    /// Completes a build by appends.
    mutating func finishAppending() { rebuildPrefix() }

    // MARK: Lookups

    private mutating func rebuildPrefix() {
        prefix = [Int](repeating: 0, count: order.count + 1)
        for position in order.indices {
            prefix[position + 1] = prefix[position] + chunks[Int(order[position])].entries.count
        }
    }

    /// Adds `delta` to the counts after the chunk at `position`.
    private mutating func shiftPrefix(after position: Int, by delta: Int) {
        for index in (position + 1)..<prefix.count { prefix[index] += delta }
    }

    /// The entry of `id`, if present.
    func entry(for id: Int64) -> Entry? {
        guard let number = chunkOfID[id] else { return nil }
        return chunks[Int(number)].entries.first { $0.id == id }
    }

    /// The flat position of `id` in the order.
    func rank(of id: Int64) -> Int? {
        guard let number = chunkOfID[id] else { return nil }
        let position = Int(positionOfChunk[Int(number)])
        guard let offset = chunks[Int(number)].entries.firstIndex(where: { $0.id == id }) else { return nil }
        return prefix[position] + offset
    }

    /// How many entries order before `probe` (its insertion rank).
    func lowerBound(_ probe: Entry) -> Int {
        let position = chunkPosition(for: probe)
        guard position < order.count else { return count }
        let entries = chunks[Int(order[position])].entries
        var low = 0
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if less(entries[middle], probe) { low = middle + 1 } else { high = middle }
        }
        return prefix[position] + low
    }

    /// The position in `order` of the first chunk whose last entry is not before `probe`.
    private func chunkPosition(for probe: Entry) -> Int {
        var low = 0
        var high = order.count
        while low < high {
            let middle = (low + high) / 2
            let entries = chunks[Int(order[middle])].entries
            if let last = entries.last, less(last, probe) { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// The entries at flat positions `range`, in order.
    func entries(in range: Range<Int>) -> [Entry] {
        var result: [Entry] = []
        result.reserveCapacity(range.count)
        guard !range.isEmpty else { return result }
        // Find the first chunk holding range.lowerBound.
        var low = 0
        var high = order.count
        while low < high {
            let middle = (low + high) / 2
            if prefix[middle + 1] <= range.lowerBound { low = middle + 1 } else { high = middle }
        }
        var position = low
        var index = range.lowerBound - (position < order.count ? prefix[position] : 0)
        while result.count < range.count && position < order.count {
            let entries = chunks[Int(order[position])].entries
            while index < entries.count && result.count < range.count {
                result.append(entries[index])
                index += 1
            }
            position += 1
            index = 0
        }
        return result
    }

    /// Every entry in order.
    var allEntries: [Entry] {
        order.flatMap { chunks[Int($0)].entries }
    }

    // MARK: Changes

    /// Inserts `entry` (its id must not be present).
    mutating func insert(_ entry: Entry) {
        if order.isEmpty {
            chunks.append(Chunk(entries: [entry]))
            order.append(Int32(chunks.count - 1))
            positionOfChunk.append(0)
            chunkOfID[entry.id] = Int32(chunks.count - 1)
            rebuildPrefix()
            return
        }
        var position = chunkPosition(for: entry)
        if position == order.count { position -= 1 }
        let number = Int(order[position])
        var entries = chunks[number].entries
        chunks[number].entries = []
        var low = 0
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if less(entries[middle], entry) { low = middle + 1 } else { high = middle }
        }
        entries.insert(entry, at: low)
        chunkOfID[entry.id] = Int32(number)
        if entries.count > Self.chunkCapacity {
            let upper = Array(entries[(entries.count / 2)...])
            entries.removeLast(upper.count)
            let newNumber: Int32
            if let free = freeChunks.popLast() {
                newNumber = free
                chunks[Int(free)].entries = upper
            } else {
                newNumber = Int32(chunks.count)
                chunks.append(Chunk(entries: upper))
                positionOfChunk.append(0)
            }
            order.insert(newNumber, at: position + 1)
            for (offset, chunk) in order.enumerated().dropFirst(position + 1) {
                positionOfChunk[Int(chunk)] = Int32(offset)
            }
            for moved in upper { chunkOfID[moved.id] = newNumber }
            chunks[number].entries = entries
            rebuildPrefix()
            return
        }
        chunks[number].entries = entries
        shiftPrefix(after: position, by: 1)
    }

    /// Removes `id`; returns its entry.
    @discardableResult
    mutating func remove(_ id: Int64) -> Entry? {
        guard let number = chunkOfID.remove(id) else { return nil }
        guard let offset = chunks[Int(number)].entries.firstIndex(where: { $0.id == id }) else { return nil }
        let entry = chunks[Int(number)].entries.remove(at: offset)
        shiftPrefix(after: Int(positionOfChunk[Int(number)]), by: -1)
        if chunks[Int(number)].entries.isEmpty && order.count > 1 {
            // Drop the empty chunk from the sequence; its storage slot stays unused.
            let position = Int(positionOfChunk[Int(number)])
            order.remove(at: position)
            freeChunks.append(number)
            for (offset, chunk) in order.enumerated().dropFirst(position) {
                positionOfChunk[Int(chunk)] = Int32(offset)
            }
            rebuildPrefix()
        }
        return entry
    }
}
