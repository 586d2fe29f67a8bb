// Fetched results in the page: sections of ids and each object's values, and the contract's rule
// (DESIGN.md §7, docs/fetched-results.md) for applying one results/didChange — the same steps as
// the Python client's ResultsState.applying.

/** A delta that does not fit the results: the view resubscribes. */
export class InconsistentDelta extends Error {}

export class ResultsState {
  constructor(sections, values, seq = 0, transaction = 0, related = new Map()) {
    this.sections = sections; // [{name, indexTitle, ids: [...]}]
    this.values = values;     // Map id -> object
    this.related = related;   // Map id -> related object (a prefetching request's)
    this.seq = seq;
    this.transaction = transaction;
  }

  /** From results/subscribe's `sections: [{name, indexTitle, count}]` and its objects, in order;
   *  `givenIds`: the rows' ids when they carry none (a grouped subscription's, from results/snapshot). */
  static fromSubscribe(result, givenIds = null) {
    const values = new Map();
    if (givenIds && givenIds.length !== result.objects.length) {
      throw new InconsistentDelta(`${givenIds.length} ids for ${result.objects.length} objects`);
    }
    const ids = result.objects.map((object, index) => {
      const id = givenIds ? givenIds[index] : object.id;
      values.set(id, object);
      return id;
    });
    let offset = 0;
    const sections = result.sections.map((info) => {
      const section = { name: info.name, indexTitle: info.indexTitle, ids: ids.slice(offset, offset + info.count) };
      offset += info.count;
      return section;
    });
    if (offset !== ids.length) throw new InconsistentDelta(`sections count ${offset} objects, ${ids.length} arrived`);
    return new ResultsState(sections, values, result.seq, result.transaction, new Map(Object.entries(result.related ?? {})));
  }

  get ids() { return this.sections.flatMap((section) => section.ids); }

  /** The state after one results/didChange; `this` is left unchanged. */
  applying(change) {
    const sections = this.sections.map((s) => ({ name: s.name, indexTitle: s.indexTitle, ids: [...s.ids] }));
    const values = new Map(this.values);
    const objects = change.objects ?? [];
    const sectionChanges = change.sections ?? [];
    const byPath = (a, b) => a[0][0] - b[0][0] || a[0][1] - b[0][1];

    // 1. Remove deleted and moved objects, by descending old index path.
    const removals = objects.filter((c) => c.type === 'delete' || c.type === 'move')
      .map((c) => [c.indexPath, c.id]).sort(byPath).reverse();
    for (const [[s, r], id] of removals) {
      if (!sections[s] || sections[s].ids[r] !== id) throw new InconsistentDelta(`${id} is not at [${s}, ${r}]`);
      sections[s].ids.splice(r, 1);
    }
    // 2. Remove deleted sections, descending.
    for (const c of sectionChanges.filter((c) => c.type === 'delete').sort((a, b) => b.index - a.index)) {
      if (!sections[c.index] || sections[c.index].ids.length) throw new InconsistentDelta(`cannot delete section ${c.index}`);
      sections.splice(c.index, 1);
    }
    // 3. Insert inserted sections (empty), ascending.
    for (const c of sectionChanges.filter((c) => c.type === 'insert').sort((a, b) => a.index - b.index)) {
      if (c.index > sections.length) throw new InconsistentDelta(`cannot insert section at ${c.index}`);
      const name = c.name ?? '';
      sections.splice(c.index, 0, { name, indexTitle: c.indexTitle ?? name.slice(0, 1).toUpperCase(), ids: [] });
    }
    // 4. Insert inserted and moved objects, by ascending new index path.
    const insertions = objects.filter((c) => c.type === 'insert' || c.type === 'move')
      .map((c) => [c.newIndexPath, c.id]).sort(byPath);
    for (const [[s, r], id] of insertions) {
      if (!sections[s] || r > sections[s].ids.length) throw new InconsistentDelta(`cannot insert ${id} at [${s}, ${r}]`);
      sections[s].ids.splice(r, 0, id);
    }
    // 5. Replace the values of moved and updated objects; keep inserted ones.
    for (const c of objects) {
      if (c.type === 'delete') values.delete(c.id);
      else if (c.object) values.set(c.id, c.object);
      if (c.type === 'update') {
        const [s, r] = c.newIndexPath ?? c.indexPath;
        if (!sections[s] || sections[s].ids[r] !== c.id) throw new InconsistentDelta(`updated ${c.id} is not at [${s}, ${r}]`);
      }
    }
    // 6. The related objects: those the change carries replace what was held; those no row reaches any more go.
    const related = new Map(this.related);
    for (const [id, object] of Object.entries(change.related ?? {})) related.set(id, object);
    for (const id of change.relatedRemoved ?? []) related.delete(id);
    return new ResultsState(sections, values, change.seq, change.transaction, related);
  }
}
