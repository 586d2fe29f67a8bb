// Live fetched results: subscribe, then apply every results/didChange by the contract's rule and animate it.
import { h, show, errorBox, parseSort, loadModel } from './dom.js';
import { ResultsState, InconsistentDelta } from './results-state.js';

export function mount(root, bridge) {
  const entitySelect = h('select', { id: 'live-entity' });
  const predicate = h('input', { id: 'live-predicate', placeholder: 'predicate (optional)', spellcheck: 'false' });
  const sort = h('input', { id: 'live-sort', placeholder: 'key:desc, key' });
  const section = h('input', { id: 'live-section', placeholder: 'section key path (optional)' });
  // Live grouped results (DESIGN.md §7): groupBy keys and aggregates as `depot watch` names them.
  const groupBy = h('input', { id: 'live-group-by', placeholder: 'groupBy keys (optional)' });
  const aggregates = h('input', { id: 'live-aggregates', placeholder: 'count, sum:wins, max:wins' });
  // Columns, through relationships too (`homeTeam.teamName`): a dotted column prefetches its path (DESIGN.md §5, §7).
  const columnsInput = h('input', { id: 'live-columns', placeholder: 'columns: score, homeTeam.teamName' });
  const subscribeButton = h('button', { id: 'live-subscribe', type: 'submit' }, 'Subscribe');
  const error = h('div', { id: 'live-error-box' });
  const status = h('div.status', { id: 'live-status' }, 'not subscribed');
  const output = h('div', { id: 'live-output' });
  const log = h('ul', { id: 'live-log' });
  root.append(h('h2', {}, 'Live fetched results'),
    h('form.controls', { onsubmit: (event) => { event.preventDefault(); subscribe(); } },
      h('label', {}, 'Entity', entitySelect), h('label', {}, 'Predicate', predicate), h('label', {}, 'Sort', sort),
      h('label', {}, 'Section key path', section), h('label', {}, 'Group by', groupBy),
      h('label', {}, 'Aggregates', aggregates), h('label', {}, 'Columns', columnsInput), subscribeButton),
    error,
    h('div.live-layout', {}, h('div', {}, status, output), h('div', {}, h('h3', {}, 'Changes as they arrive'), log)));

  let entities = [];
  let subscription = null;
  let request = null;
  let sectioned = false;
  let state = null;
  let columns = [];
  let generation = 0;

  entitySelect.addEventListener('change', () => { sort.value = defaultSort(); section.value = ''; subscribe(); });

  function defaultSort() {
    const entity = entities.find((e) => e.name === entitySelect.value);
    if (!entity) return '';
    if (entity.name === 'Team' && entity.attributes.some((a) => a.name === 'qualifyingZone')) return 'qualifyingZone, wins:desc, teamName';
    return entity.attributes[0]?.name ?? '';
  }

  loadModel(bridge).then((model) => {
    entities = model.entities;
    entitySelect.replaceChildren(...entities.map((e) => h('option', { value: e.name }, e.name)));
    const params = new URLSearchParams(location.hash.split('?')[1] ?? '');
    if (params.get('entity')) entitySelect.value = params.get('entity');
    sort.value = params.get('sort') ?? defaultSort();
    section.value = params.get('section') ?? (entitySelect.value === 'Team' && !params.get('sort') ? 'qualifyingZone' : '');
    predicate.value = params.get('predicate') ?? '';
    groupBy.value = params.get('groupBy') ?? '';
    aggregates.value = params.get('aggregates') ?? '';
    columnsInput.value = params.get('columns') ?? '';
    if (entities.length) subscribe();
  }).catch((e) => error.replaceChildren(errorBox(e, 'live-error')));

  async function subscribe() {
    const mine = ++generation;
    const entity = entities.find((e) => e.name === entitySelect.value);
    if (!entity) return;
    if (subscription) bridge.call('results/unsubscribe', { subscription }).catch(() => {});
    subscription = null;
    request = { entity: entity.name, sort: parseSort(sort.value) };
    if (predicate.value.trim()) request.predicate = predicate.value.trim();
    sectioned = Boolean(section.value.trim());
    const chosen = columnsInput.value.split(',').map((c) => c.trim()).filter(Boolean);
    columns = ['id', ...(chosen.length ? chosen : entity.attributes.map((a) => a.name))];
    // The relationship paths the dotted columns go through, each once: the related objects come live with the rows.
    const prefetch = [...new Set(chosen.filter((c) => c.includes('.')).map((c) => c.split('.').slice(0, -1).join('.')))];
    if (prefetch.length) request.prefetch = prefetch;
    const grouping = parseGrouping(groupBy.value, aggregates.value);
    if (grouping) {
      // The rows are the groups: their ids, groupBy keys and aggregates.
      Object.assign(request, grouping);
      if (!request.sort.length) delete request.sort;
      columns = ['id', ...(grouping.groupBy ?? []), ...(grouping.aggregates ?? []).map((a) => a.name)];
    }
    const params = { request, include: 'all' };
    if (sectioned) params.sectionKeyPath = section.value.trim();
    try {
      const result = await bridge.call('results/subscribe', params);
      if (mine !== generation) { bridge.call('results/unsubscribe', { subscription: result.subscription }).catch(() => {}); return; }
      subscription = result.subscription;
      // Every row carries its id, a group's included (DESIGN.md §7).
      state = ResultsState.fromSubscribe(result);
      error.replaceChildren();
      render(new Map());
      note(`subscribed as ${subscription}: ${result.count} ${grouping ? 'groups' : 'objects'} at transaction ${result.transaction}`);
    } catch (e) {
      if (mine !== generation) return;
      state = null;
      output.replaceChildren();
      status.textContent = 'not subscribed';
      error.replaceChildren(errorBox(e, 'live-error'));
    }
  }

  /** "qualifyingZone" and "count, sum:wins" → {groupBy, aggregates} (named count, sum_wins: as `depot watch`), or null. */
  function parseGrouping(keysText, aggregatesText) {
    const keys = keysText.split(',').map((k) => k.trim()).filter(Boolean);
    const functions = aggregatesText.split(',').map((a) => a.trim()).filter(Boolean).map((text) => {
      const [fn, key] = text.split(':').map((part) => part.trim());
      return key ? { name: `${fn}_${key.replaceAll('.', '_')}`, function: fn, key } : { name: fn, function: fn };
    });
    if (!keys.length && !functions.length) return null;
    const grouping = {};
    if (keys.length) grouping.groupBy = keys;
    if (functions.length) grouping.aggregates = functions;
    return grouping;
  }

  function note(text, kind = '') {
    log.prepend(h(`li${kind ? `.kind-${kind}` : ''}`, {}, text));
    while (log.children.length > 200) log.lastChild.remove();
  }

  const stopChanges = bridge.on('results/didChange', (change) => {
    if (change.subscription !== subscription || !state) return;
    if (change.seq !== state.seq + 1) { note(`seq ${change.seq} after ${state.seq}: a gap, resubscribing`); return subscribe(); }
    try {
      state = state.applying(change);
    } catch (e) {
      if (!(e instanceof InconsistentDelta)) throw e;
      note(`a delta that does not fit (${e.message}): resubscribing`);
      return subscribe();
    }
    const kinds = new Map(change.objects.map((c) => [c.id, c.type]));
    const at = (p) => (p ? `[${p.join(', ')}]` : '');
    const lines = [
      [`seq ${change.seq} · transaction ${change.transaction}: ${change.objects.length} object, ${change.sections.length} section changes`, ''],
      ...change.sections.map((c) => [`  section ${c.type} ${c.index} "${c.name ?? ''}"`, c.type]),
      ...change.objects.map((c) => [`  ${c.type} ${c.id} ${at(c.indexPath)}${c.indexPath && c.newIndexPath ? ' → ' : ''}${at(c.newIndexPath)}`, c.type]),
    ];
    // Newest change on top, its lines in order.
    for (const [text, kind] of lines.reverse()) note(text, kind);
    render(kinds);
  });
  const stopInvalidate = bridge.on('results/didInvalidate', (params) => {
    if (params.subscription !== subscription) return;
    note(`invalidated (${params.reason}): resubscribing`);
    subscribe();
  });
  const stopLink = bridge.onLink((link) => {
    if (link.state === 'reconnected') { note('depotd is back: resubscribing'); subscription = null; subscribe(); }
    if (link.state === 'disconnected' || link.state === 'studio-down') note('depotd is gone; waiting for it');
  });

  /** The value of column `path` for a row: a key of the row, or a dotted path through its related
   *  objects (to-one hops, and a to-many's members), read from the ones the subscription keeps live. */
  function valueAt(object, path) {
    const keys = path.split('.');
    let values = [object];
    keys.forEach((key, index) => {
      const last = index === keys.length - 1;
      values = values.flatMap((value) => {
        const next = value?.[key];
        if (last) return Array.isArray(next) ? next : [next];
        return (Array.isArray(next) ? next : [next]).map((id) => state.related.get(id)).filter(Boolean);
      });
    });
    return values.length === 1 ? values[0] : values.map(show).join(', ');
  }

  /** Redraws the table; rows of `kinds` (id → change type) flash, moved rows slide from where they were. */
  function render(kinds) {
    const oldBody = output.querySelector('tbody');
    const oldRows = oldBody ? [...oldBody.children] : [];
    const before = new Map([...output.querySelectorAll('tr[data-id]')].map((row) => [row.dataset.id, row.getBoundingClientRect().top]));
    const body = h('tbody');
    state.sections.forEach((s, index) => {
      if (sectioned) body.append(h('tr.section', { dataset: { section: index, name: s.name } },
        h('td', { colspan: columns.length }, `${s.name === '' ? '(nil)' : s.name} · ${s.ids.length}`)));
      s.ids.forEach((id, row) => {
        const object = state.values.get(id) ?? {};
        body.append(h('tr', { dataset: { id, indexPath: `${index},${row}` } },
          columns.map((key) => h('td', { dataset: { key } }, show(key === 'id' ? id : valueAt(object, key))))));
      });
    });
    output.replaceChildren(h('table', { id: 'live-table' },
      h('thead', {}, h('tr', {}, columns.map((key) => h('th', {}, key)))), body));
    status.dataset.seq = state.seq;
    status.dataset.transaction = state.transaction;
    status.dataset.subscription = subscription;
    status.replaceChildren(h('span.pill', {}, subscription), h('span.pill', {}, `seq ${state.seq}`),
      h('span.pill', {}, `transaction ${state.transaction}`), h('span.pill', {}, `${state.ids.length} ${request.groupBy || request.aggregates ? 'groups' : 'objects'}`),
      h('span.pill', {}, `${state.sections.length} sections`));
    // Deleted rows fade out where they were (ghosts without data-id: not part of the results).
    oldRows.forEach((old, position) => {
      if (kinds.get(old.dataset.id) !== 'delete') return;
      const ghost = old.cloneNode(true);
      delete ghost.dataset.id;
      ghost.className = 'deleted';
      body.insertBefore(ghost, body.children[position] ?? null);
      setTimeout(() => ghost.remove(), 900);
    });
    for (const row of body.querySelectorAll('tr[data-id]')) {
      const kind = kinds.get(row.dataset.id);
      if (!kind) continue;
      const kindClass = { insert: 'inserted', move: 'moved', update: 'updated' }[kind];
      const from = before.get(row.dataset.id);
      if (kind === 'move' && from !== undefined) {
        const offset = from - row.getBoundingClientRect().top;
        if (offset) {
          row.style.transform = `translateY(${offset}px)`;
          requestAnimationFrame(() => { row.style.transition = 'transform 450ms ease, background-color 1.2s ease'; row.style.transform = ''; });
        }
      }
      if (kindClass) {
        row.classList.add(kindClass);
        setTimeout(() => row.classList.remove(kindClass), 1500);
      }
    }
  }

  return {
    unmount() {
      generation++;
      stopChanges();
      stopInvalidate();
      stopLink();
      if (subscription) bridge.call('results/unsubscribe', { subscription }).catch(() => {});
    },
  };
}
