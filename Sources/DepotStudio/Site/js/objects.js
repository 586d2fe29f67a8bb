// An entity's objects: a predicate box and sort, paged, with the predicate error's position marked.
import { h, show, errorBox, parseSort, loadModel } from './dom.js';

const PAGE = 50;

export function mount(root, bridge) {
  const entitySelect = h('select', { id: 'objects-entity' });
  const predicate = h('input.wide', { id: 'predicate', placeholder: "e.g. wins > 2 AND qualifyingZone BEGINSWITH 'E'", spellcheck: 'false' });
  const sort = h('input', { id: 'sort', placeholder: 'key:desc, key' });
  const run = h('button', { id: 'run', type: 'submit' }, 'Fetch');
  const status = h('div.status', { id: 'objects-status' });
  const error = h('div', { id: 'objects-error-box' });
  const output = h('div', { id: 'objects-output' });
  const previous = h('button', { id: 'prev', type: 'button', disabled: true }, '← previous');
  const next = h('button', { id: 'next', type: 'button', disabled: true }, 'next →');
  let offset = 0;
  let entities = [];

  const form = h('form.controls', { onsubmit: (event) => { event.preventDefault(); offset = 0; fetchPage(); } },
    h('label', {}, 'Entity', entitySelect), h('label', {}, 'Predicate', predicate), h('label', {}, 'Sort', sort), run);
  root.append(h('h2', {}, 'Objects'), form, error, status, output, h('div.controls', {}, previous, next));
  previous.addEventListener('click', () => { offset = Math.max(0, offset - PAGE); fetchPage(); });
  next.addEventListener('click', () => { offset += PAGE; fetchPage(); });
  entitySelect.addEventListener('change', () => { offset = 0; sort.value = ''; fetchPage(); });

  loadModel(bridge).then((model) => {
    entities = model.entities;
    entitySelect.replaceChildren(...entities.map((e) => h('option', { value: e.name }, e.name)));
    if (entities.length) fetchPage();
  }).catch((e) => error.replaceChildren(errorBox(e, 'objects-error')));

  async function fetchPage() {
    const entity = entities.find((e) => e.name === entitySelect.value);
    if (!entity) return;
    const request = { entity: entity.name, sort: parseSort(sort.value) };
    const text = predicate.value.trim();
    if (text) request.predicate = text;
    run.disabled = true;
    try {
      const [count, page] = await Promise.all([
        bridge.call('store/count', request),
        bridge.call('store/fetch', { ...request, limit: PAGE, offset }),
      ]);
      error.replaceChildren();
      const keys = ['id', 'version', ...entity.attributes.map((a) => a.name),
        ...(entity.relationships ?? []).filter((r) => !r.toMany).map((r) => r.name)];
      output.replaceChildren(h('table', { id: 'objects-table' },
        h('thead', {}, h('tr', {}, keys.map((k) => h('th', {}, k)))),
        h('tbody', {}, page.objects.map((object) => h('tr', { dataset: { id: object.id } },
          keys.map((k) => h('td', { dataset: { key: k } }, show(object[k]))))))));
      const last = Math.min(offset + page.objects.length, count.count);
      status.textContent = count.count ? `${offset + 1}–${last} of ${count.count} · transaction ${page.transaction}` : 'no objects match';
      previous.disabled = offset === 0;
      next.disabled = last >= count.count;
    } catch (e) {
      output.replaceChildren();
      status.textContent = '';
      error.replaceChildren(predicateError(e, text));
    } finally {
      run.disabled = false;
    }
  }
}

/** The daemon's error; for a predicate syntax error (-32014), the predicate with the position marked. */
function predicateError(error, text) {
  const box = errorBox(error, 'objects-error');
  const position = error.data?.position;
  if (error.code === -32014 && Number.isInteger(position)) {
    const at = Math.min(position, text.length);
    box.append(h('div', { id: 'predicate-echo' }, h('code', {},
      text.slice(0, at), h('mark', { id: 'predicate-mark' }, text.slice(at, at + 1) || ' '), text.slice(at + 1))),
      error.data.expected ? h('div', {}, `expected ${show(error.data.expected)}`) : null);
  }
  return box;
}
