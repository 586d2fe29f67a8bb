import DepotProtocol
import DepotStore

/// The groups of a live grouped result set (DESIGN.md §7, Live grouped
/// results), kept from each transaction's changed rows without re-running the
/// grouped query.
///
/// Each group has a slot, a number that stays its row id in the set's
/// ``OrderedIndex`` while the group exists (its wire id is `"group:"` + the
/// JSON array of its groupBy values). Per group: its count and, per aggregate,
/// a running state: `count` a counter, `sum` an exact 128-bit integer sum or a
/// compensated (Neumaier) double sum with its number of values, `avg` the
/// same sum divided by the number, `min`/`max` the group's non-nil values in
/// one sorted array (an ordered structure per group: a change costs a binary
/// search and a move of at most the group's size, and the extremes never need
/// the table again). Per matching object (``Member``): its group's slot and
/// the values its aggregates read, no whole object, since a transaction
/// reports which rows changed but not their old values: taking an updated or
/// deleted row out of its old group needs what it contributed.
///
/// A class (shared by reference with its ``ResultSet``); touched only in
/// publish-lane jobs, or by the reader that builds it before a lane job installs it.
final class GroupedResults: @unchecked Sendable {
    /// The resolved request: its statements and checked shape (the new model's after a migration).
    var plan: GroupedFetchPlan
    /// The sort directions of an index entry's key: the request's sort, then each groupBy key ascending.
    let ascending: [Bool]
    /// Rows that match the predicate, by id.
    private var members: [Int64: Member] = [:]
    /// The slot of each group, by its groupBy values.
    private var slots: [[SortValue]: Int64] = [:]
    /// The groups, by slot.
    private var groups: [Int64: Group] = [:]
    private var nextSlot: Int64 = 1
    /// The wire ids of groups that vanished since the last announcement (their deletes still name them).
    private var retired: [Int64: String] = [:]
    /// The slots of those groups, by groupBy values: one that comes back before the announcement (in a
    /// coalescing window) takes its slot again, so that one notification never deletes and inserts one id.
    private var retiredSlots: [[SortValue]: Int64] = [:]
    /// For each aggregate column: the index of its key among ``GroupedFetchPlan/memberKeyPaths``.
    private let inputIndexes: [Int?]
    private let havingEvaluator: PredicateEvaluator

    /// One matching object: its group and the values of the keys its aggregates read
    /// (the member key paths after the groupBy keys, in ``GroupedFetchPlan/memberKeyPaths``
    /// order). The first value is stored inline, the rest in an array that stays empty (no
    /// allocation) when the aggregates read one key: 40 bytes, plus its id in the map.
    struct Member: Equatable {
        var slot: Int64
        var first: SortValue
        var rest: [SortValue]

        init(slot: Int64, inputs: ArraySlice<SortValue>) {
            self.slot = slot
            first = inputs.first ?? .null
            rest = inputs.count > 1 ? Array(inputs.dropFirst()) : []
        }

        /// The value of input `index`.
        func input(_ index: Int) -> SortValue { index == 0 ? first : rest[index - 1] }
    }

    /// One group's running state.
    struct Group {
        /// The groupBy values, as SQL groups them.
        let key: [SortValue]
        /// `"group:"` + the JSON array of the groupBy values' wire forms.
        let wireID: String
        /// How many objects it holds.
        var count: Int64 = 0
        /// One state per aggregate column.
        var aggregates: [Aggregate]
        /// Its dictionary as last computed (as subscribers last saw it after ``apply(_:candidates:)``).
        var dictionary: [String: JSONValue] = [:]
    }

    /// The running state of one aggregate of a group.
    enum Aggregate {
        /// `count`: the objects, or those whose key is not nil.
        case count(Int64)
        /// `sum`/`avg` of integers: exact, with the number of values summed.
        case integerSum(Int128, values: Int64)
        /// `sum`/`avg` of doubles: compensated, with the number of values summed.
        case doubleSum(CompensatedSum, values: Int64)
        /// `min`/`max`: the non-nil values, ascending as SQL orders them.
        case ordered([SortValue])
    }

    /// Creates empty groups for `plan`.
    init(plan: GroupedFetchPlan) {
        self.plan = plan
        let shape = plan.shape
        var ascending = shape.sort.map(\.ascending) + Array(repeating: true, count: shape.groupKeyCount)
        if ascending.isEmpty { ascending = [true] }
        self.ascending = ascending
        inputIndexes = shape.aggregates.map { column in
            guard case .aggregate(_, let key?) = column.source else { return nil }
            return plan.memberKeyPaths.firstIndex(of: key)
        }
        havingEvaluator = PredicateEvaluator(
            model: [shape.havingEntity], object: { _ in nil }, toMany: { _, _ in [] })
    }

    /// How many objects the groups hold (for the statistics and the benchmark).
    var memberCount: Int { members.count }

    /// How many groups exist (passing `having` or not).
    var groupCount: Int { groups.count }

    // MARK: Building

    /// Empties the groups, before a build by ``add(_:values:)``.
    func clear() {
        members = [:]
        slots = [:]
        groups = [:]
        forgetRetired()
    }

    /// Adds one matching object of a build.
    func add(_ id: Int64, values: [SortValue]) {
        let (key, inputs) = split(values)
        let slot = slot(for: key)
        let member = Member(slot: slot, inputs: inputs)
        contribute(member, to: slot, sign: 1)
        members[id] = member
    }

    /// Completes a build: each group's dictionary, and the rows of the index
    /// (the groups that pass `having`), in order.
    func finishBuilding() throws(RPCError) -> [KeyedRow] {
        var rows: [KeyedRow] = []
        for slot in groups.keys {
            let (dictionary, key) = try evaluate(slot)
            groups[slot]?.dictionary = dictionary
            if let key { rows.append(KeyedRow(id: slot, key: key)) }
        }
        let ascending = ascending
        rows.sort { $0.key.compare($1.key, ascending: ascending) < 0 }
        return rows
    }

    // MARK: Following

    /// Applies a transaction's `candidates` (its changed rows of the entity and
    /// rows reached through relationships), of which `read` holds those that
    /// match now with their member values; returns, per group whose dictionary
    /// or membership changed, its new index key (`nil`: it vanished or fails
    /// `having`), and as `touched` the groups whose dictionary changed.
    ///
    /// - Throws: -32602 when an integer sum overflows 64 bits (as the SQL does).
    func apply(_ read: [Int64: [SortValue]], candidates: some Sequence<Int64>) throws(RPCError) -> (
        changes: [Int64: SortKey?], touched: [Int64: Set<String>]
    ) {
        var affected: Set<Int64> = []
        for id in candidates {
            let old = members[id]
            let new = read[id].map(split)
            if let old, let new, groups[old.slot]?.key == new.key, old == Member(slot: old.slot, inputs: new.inputs) {
                continue
            }
            if let old {
                contribute(old, to: old.slot, sign: -1)
                affected.insert(old.slot)
                members[id] = nil
            }
            if let new {
                let slot = slot(for: new.key)
                let member = Member(slot: slot, inputs: new.inputs)
                contribute(member, to: slot, sign: 1)
                affected.insert(slot)
                members[id] = member
            }
        }
        var changes: [Int64: SortKey?] = [:]
        var touched: [Int64: Set<String>] = [:]
        for slot in affected {
            guard let group = groups[slot] else { continue }
            guard group.count > 0 else {
                groups[slot] = nil
                slots[group.key] = nil
                retired[slot] = group.wireID
                retiredSlots[group.key] = slot
                changes[slot] = .some(nil)
                continue
            }
            let (dictionary, key) = try evaluate(slot)
            changes[slot] = .some(key)
            if dictionary != group.dictionary {
                groups[slot]?.dictionary = dictionary
                touched[slot] = ["*"]
            }
        }
        return (changes, touched)
    }

    /// Forgets the wire ids of vanished groups once their deletes went out.
    func forgetRetired() {
        retired = [:]
        retiredSlots = [:]
    }

    // MARK: Reading

    /// The wire id of the group in `slot` (also of one that vanished since the last announcement).
    func wireID(of slot: Int64) -> String {
        groups[slot]?.wireID ?? retired[slot] ?? "group:?"
    }

    /// The slot of the group that matching object `id` is in now; `nil` when it matches none.
    func slot(ofMember id: Int64) -> Int64? { members[id]?.slot }

    /// The row of the group in `slot` as the daemon sends it: its dictionary with its `id`
    /// (DESIGN.md §7: no client computes a group's id).
    func dictionary(of slot: Int64) -> JSONValue {
        guard let group = groups[slot] else { return .null }
        var row = group.dictionary
        row["id"] = .string(group.wireID)
        return .object(row)
    }

    // MARK: Internals

    /// A member's values split into its groupBy values and its aggregate inputs.
    private func split(_ values: [SortValue]) -> (key: [SortValue], inputs: ArraySlice<SortValue>) {
        let count = plan.shape.groupKeyCount
        return (Array(values[..<count]), values[count...])
    }

    /// The slot of the group with groupBy values `key`, created (empty) when it does not exist.
    private func slot(for key: [SortValue]) -> Int64 {
        if let slot = slots[key] { return slot }
        let slot: Int64
        if let returning = retiredSlots.removeValue(forKey: key) {
            slot = returning
            retired[slot] = nil
        } else {
            slot = nextSlot
            nextSlot += 1
        }
        slots[key] = slot
        let wire = zip(plan.shape.groupKeys, key).map { $1.wire(as: $0.type) }
        let aggregates = plan.shape.aggregates.map { column -> Aggregate in
            guard case .aggregate(let function, _) = column.source else { return .count(0) }
            switch function {
            case .count: return .count(0)
            case .sum, .avg:
                return column.keyType == .integer ? .integerSum(0, values: 0) : .doubleSum(.init(), values: 0)
            case .min, .max: return .ordered([])
            }
        }
        groups[slot] = Group(
            key: key, wireID: "group:" + String(decoding: JSONWriter.encode(.array(wire)), as: UTF8.self),
            aggregates: aggregates)
        return slot
    }

    /// Adds (`sign` 1) or takes out (-1) one member's contribution to the group in `slot`.
    private func contribute(_ member: Member, to slot: Int64, sign: Int64) {
        guard var group = groups[slot] else { return }
        // Moved out, so that each state below is changed in place rather than copied.
        groups[slot] = nil
        group.count += sign
        let groupKeyCount = plan.shape.groupKeyCount
        for index in group.aggregates.indices {
            // A key that is also a groupBy key is read once, with the group's values.
            let value = inputIndexes[index].map {
                $0 < groupKeyCount ? group.key[$0] : member.input($0 - groupKeyCount)
            }
            if value == .null { continue }
            switch group.aggregates[index] {
            case .count(let count):
                group.aggregates[index] = .count(count + sign)
            case .integerSum(let sum, let values):
                guard case .integer(let number)? = value else { continue }
                group.aggregates[index] = .integerSum(sum + Int128(sign) * Int128(number), values: values + sign)
            case .doubleSum(var sum, let values):
                let number: Double
                switch value {
                case .integer(let integer)?: number = Double(integer)
                case .real(let real)?: number = real
                default: continue
                }
                let remaining = values + sign
                if remaining == 0 { sum = CompensatedSum() } else { sum.add(Double(sign) * number) }
                group.aggregates[index] = .doubleSum(sum, values: remaining)
            case .ordered(var sorted):
                guard let value else { continue }
                group.aggregates[index] = .count(0)  // releases the array's reference: edited without a copy
                let position = Self.lowerBound(value, in: sorted)
                if sign > 0 {
                    sorted.insert(value, at: position)
                } else if position < sorted.count {
                    sorted.remove(at: position)
                }
                group.aggregates[index] = .ordered(sorted)
            }
        }
        groups[slot] = group
    }

    private static func lowerBound(_ value: SortValue, in sorted: [SortValue]) -> Int {
        var low = 0
        var high = sorted.count
        while low < high {
            let middle = (low + high) / 2
            if sorted[middle].compare(value) < 0 { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// The group's dictionary as the grouped fetch answers it, and its index
    /// key, or `nil` when it fails `having`.
    private func evaluate(_ slot: Int64) throws(RPCError) -> (dictionary: [String: JSONValue], key: SortKey?) {
        guard let group = groups[slot] else { return ([:], nil) }
        let shape = plan.shape
        var dictionary: [String: JSONValue] = [:]
        var scalars: [SortValue] = group.key
        for (column, value) in zip(shape.groupKeys, group.key) { dictionary[column.name] = value.wire(as: column.type) }
        for (column, state) in zip(shape.aggregates, group.aggregates) {
            let value = try Self.value(column, state, count: group.count)
            dictionary[column.name] = value.wire(as: column.type)
            scalars.append(value)
        }
        if let having = shape.having,
            !(try havingEvaluator.evaluate(having, on: dictionary, entity: GroupedShape.havingEntityName))
        {
            return (dictionary, nil)
        }
        var values = shape.sort.map { scalars[$0.column] } + group.key
        if values.isEmpty { values = [.null] }
        return (dictionary, SortKey(values: values))
    }

    /// An aggregate's value as SQL computes it: `count` and the `sum` of
    /// integers integers (0 over none), a `sum` of doubles 0.0 over none,
    /// `avg`, `min` and `max` nil over none.
    private static func value(_ column: GroupedShape.Column, _ state: Aggregate, count: Int64) throws(RPCError)
        -> SortValue
    {
        guard case .aggregate(let function, let key) = column.source else { return .null }
        switch state {
        case .count(let number):
            return .integer(key == nil ? count : number)
        case .integerSum(let sum, let values):
            if function == .avg { return values == 0 ? .null : .real(Double(sum) / Double(values)) }
            guard let exact = Int64(exactly: sum) else { throw GroupedShape.sumOverflow }
            return .integer(exact)
        case .doubleSum(let sum, let values):
            if function == .avg { return values == 0 ? .null : .real(sum.value / Double(values)) }
            return .real(values == 0 ? 0 : sum.value)
        case .ordered(let sorted):
            return (function == .min ? sorted.first : sorted.last) ?? .null
        }
    }
}

/// A running double sum with Neumaier's compensation, so that adding and
/// taking out values leaves far less error than plain addition would.
struct CompensatedSum {
    private var sum = 0.0
    private var compensation = 0.0

    /// Adds `value` (a negative one takes a value out).
    mutating func add(_ value: Double) {
        let total = sum + value
        if abs(sum) >= abs(value) {
            compensation += (sum - total) + value
        } else {
            compensation += (value - total) + sum
        }
        sum = total
    }

    /// The sum.
    var value: Double { sum + compensation }
}
