import DepotProtocol
import DepotStore

/// The scoped observers filed by the value their equality rule pins
/// (`owner == $keyName`), the way ``SetIndex`` files result sets: a
/// transaction concerns only the observers filed under the values its rows
/// had before or after (recorded with the transaction, ``RecordedValues``), so
/// a save by one owner visits that owner's observers and no other's.
///
/// An observer is filed once its baseline is read, and only when every entity
/// it observes either pins a value or is hidden (`FALSEPREDICATE`); the others
/// stay unfiled and are visited for every transaction, as before. Part of
/// ``ObserverTable``: touched only in publish-lane jobs.
struct ObserverFiling {
    /// One observer of one session.
    struct Ref: Hashable, Sendable {
        /// The session.
        var routingID: [UInt8]
        /// The observer's id.
        var observer: String
    }

    /// One entity's equality term: the key and the value it must hold.
    typealias Term = (key: String, value: JSONValue)

    /// entity → key → value → observers.
    private var byEquality: [String: [String: [JSONValue: Set<Ref>]]] = [:]
    /// Each filed observer's terms by entity, to unfile it.
    private var terms: [Ref: [String: Term]] = [:]

    /// Whether `ref` is filed (then only ``concerned(by:)`` visits it).
    func isFiled(_ ref: Ref) -> Bool { terms[ref] != nil }

    /// Whether no observer is filed.
    var isEmpty: Bool { terms.isEmpty }

    /// Files `ref` under `newTerms` (replacing its filing), or unfiles it when `nil`.
    mutating func file(_ ref: Ref, terms newTerms: [String: Term]?) {
        for (entity, term) in terms.removeValue(forKey: ref) ?? [:] {
            byEquality[entity]?[term.key]?[term.value]?.remove(ref)
            if byEquality[entity]?[term.key]?[term.value]?.isEmpty == true {
                byEquality[entity]?[term.key]?[term.value] = nil
            }
        }
        guard let newTerms else { return }
        terms[ref] = newTerms
        for (entity, term) in newTerms {
            byEquality[entity, default: [:]][term.key, default: [:]][term.value, default: []].insert(ref)
        }
    }

    /// Unfiles every observer of the session `routingID` (closed).
    mutating func unfile(session routingID: [UInt8]) {
        for ref in terms.keys where ref.routingID == routingID { file(ref, terms: nil) }
    }

    /// The filed observers `transaction` concerns: those under a value one of
    /// its rows held before or after. An entity whose changes came without the
    /// recorded values of a filed key (recorded before the policy read it)
    /// concerns every observer filed under it.
    func concerned(by transaction: CommittedTransaction) -> Set<Ref> {
        var found: Set<Ref> = []
        for (entity, set) in transaction.changes {
            guard let keys = byEquality[entity] else { continue }
            for (key, byValue) in keys {
                guard let recorded = set.recorded, let index = recorded.keys.firstIndex(of: key),
                    set.allRows.allSatisfy({ recorded.rows[$0] != nil })
                else {
                    for refs in byValue.values { found.formUnion(refs) }
                    continue
                }
                for change in recorded.rows.values {
                    for values in [change.before, change.after] {
                        guard let values, index < values.count, let refs = byValue[values[index]] else { continue }
                        found.formUnion(refs)
                    }
                }
            }
        }
        return found
    }
}
