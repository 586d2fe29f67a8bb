// Small DOM helpers shared by the pages.

/** An element: h('td.num', {title: 'x'}, 'text', child…). */
export function h(spec, attributes = {}, ...children) {
  const [tag, ...classes] = spec.split('.');
  const element = document.createElement(tag);
  if (classes.length) element.className = classes.join(' ');
  for (const [key, value] of Object.entries(attributes ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) element.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(element.dataset, value);
    else element.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

/** A value as a table cell's text. */
export function show(value) {
  if (value === undefined) return '';
  if (value === null) return 'nil';
  if (Array.isArray(value) || typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

/** A table: header names and rows of cells. */
export function table(headers, rows, attributes = {}) {
  return h('table', attributes,
    h('thead', {}, h('tr', {}, headers.map((name) => h('th', {}, name)))),
    h('tbody', {}, rows.map((cells) => h('tr', {}, cells.map((cell) => cell instanceof Node ? cell : h('td', {}, show(cell)))))));
}

/** An error box: the daemon's message (and code). */
export function errorBox(error, id) {
  return h('div.error', { id, role: 'alert' }, `${error.message}${error.code ? ` (${error.code})` : ''}`);
}

/** "wins:desc, teamName" → [{key: "wins", ascending: false}, {key: "teamName", ascending: true}]. */
export function parseSort(text) {
  return text.split(',').map((part) => part.trim()).filter(Boolean).map((part) => {
    const [key, direction] = part.split(':').map((s) => s.trim());
    return { key, ascending: !(direction && /^desc/i.test(direction)) };
  });
}

/** The model's entities (cached per page load). */
let modelPromise = null;
export function loadModel(bridge, fresh = false) {
  if (fresh || !modelPromise) modelPromise = bridge.call('model/get').catch((error) => { modelPromise = null; throw error; });
  return modelPromise;
}
