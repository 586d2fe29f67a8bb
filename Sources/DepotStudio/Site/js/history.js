// The transaction history: author and counts per entity, newest first, refreshed on every save.
import { h, errorBox } from './dom.js';

export function mount(root, bridge) {
  const output = h('div', { id: 'history' }, h('p.muted', {}, 'Loading…'));
  root.append(h('h2', {}, 'Transaction history'), output);
  let observer = null;
  let stopped = false;

  async function load() {
    try {
      const head = await bridge.call('store/history', { since: 0, limit: 1 });
      const since = Math.max(0, head.latest - 50);
      const history = await bridge.call('store/history', { since, limit: 50 });
      if (stopped) return;
      const rows = history.transactions.slice().reverse().map((t) => h('tr', { dataset: { transaction: t.transaction } },
        h('td.num', {}, t.transaction), h('td', {}, t.timestamp), h('td', {}, t.author ?? ''),
        h('td', {}, Object.entries(t.changes).map(([entity, c]) =>
          h('span.pill', {}, `${entity} +${c.inserted.length} ~${c.updated.length} −${c.deleted.length}`)))));
      output.replaceChildren(
        h('p.muted', {}, `latest ${history.latest} · oldest kept ${history.oldest}`),
        h('table', { id: 'history-table' },
          h('thead', {}, h('tr', {}, ['transaction', 'committed', 'author', 'changes per entity'].map((n) => h('th', {}, n)))),
          h('tbody', {}, rows)));
    } catch (error) {
      output.replaceChildren(errorBox(error, 'history-error'));
    }
  }

  async function observe() {
    try { observer = (await bridge.call('store/observe', {})).observer; } catch { observer = null; }
    load();
  }
  const stopSaves = bridge.on('store/didSave', (params) => { if (params.observer === observer) load(); });
  const stopLink = bridge.onLink((link) => { if (link.state === 'reconnected') observe(); });
  observe();
  return {
    unmount() {
      stopped = true;
      stopSaves();
      stopLink();
      if (observer) bridge.call('store/unobserve', { observer }).catch(() => {});
    },
  };
}
