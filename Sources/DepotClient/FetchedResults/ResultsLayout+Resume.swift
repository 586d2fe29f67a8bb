import DepotProtocol

extension ResultsLayout {
    /// The current layout that a resumed `results/subscribe` answer describes (DESIGN.md §7,
    /// Resuming), rebuilt from `held`, the layout the client held as of the resume transaction:
    /// the named ids are dropped, the present ones put back at their index paths, and every
    /// other held id keeps its relative order in the remaining places, cut into the answer's
    /// sections. Check the result's ``ids`` against the answer's digest (``ResultsDigest``).
    ///
    /// - Throws: ``ResultsLayoutError/inconsistent(_:)`` when the answer is not resumed or does
    ///   not fit `held` (then subscribe in full).
    public init(resuming held: ResultsLayout, with answer: ResultsSubscribe.Result) throws(ResultsLayoutError) {
        guard answer.resumed == true, let changed = answer.changed else {
            throw .inconsistent("the answer is not a resumed one")
        }
        var starts: [Int] = []
        var total = 0
        for section in answer.sections {
            starts.append(total)
            total += section.count
        }
        var placed = [String?](repeating: nil, count: total)
        var named: Set<String> = []
        for row in changed {
            guard named.insert(row.id).inserted else { throw .inconsistent("\(row.id) is named twice") }
            guard let path = row.indexPath else { continue }
            guard path.count == 2, starts.indices.contains(path[0]), path[1] >= 0,
                path[1] < answer.sections[path[0]].count, placed[starts[path[0]] + path[1]] == nil
            else { throw .inconsistent("\(row.id) is placed at \(path), outside the sections or on another row") }
            placed[starts[path[0]] + path[1]] = row.id
        }
        var kept = held.ids.lazy.filter { !named.contains($0) }.makeIterator()
        var ids: [String] = []
        ids.reserveCapacity(total)
        for slot in placed {
            if let id = slot {
                ids.append(id)
            } else if let id = kept.next() {
                ids.append(id)
            } else {
                throw .inconsistent("the held results lack rows the answer counts: \(total) expected")
            }
        }
        guard kept.next() == nil else { throw .inconsistent("the held results have more rows than the answer counts") }
        var sections: [Section] = []
        for (index, info) in answer.sections.enumerated() {
            sections.append(
                Section(
                    name: info.name, indexTitle: info.indexTitle,
                    ids: Array(ids[starts[index]..<starts[index] + info.count])))
        }
        self.init(seq: answer.seq, sections: sections)
    }
}
