// Sessions and stats (server/stats), refreshed every second.
import { h, table, errorBox } from './dom.js';

// A key's row-level scope as "Entity: read / write; …" (server/stats `scope`; empty when unscoped).
function scopeText(scope) {
  if (!scope) return '';
  return Object.entries(scope).sort().map(([entity, rule]) =>
    `${entity}: read ${rule.read ?? 'all'} / write ${rule.write ?? 'all'}`).join('; ');
}

export function mount(root, bridge) {
  const output = h('div', { id: 'stats' }, h('p.muted', {}, 'Loading…'));
  root.append(h('h2', {}, 'Sessions & stats'), output);
  let timer = null;
  let stopped = false;

  const ms = (value) => `${value.toFixed(3)} ms`;
  const card = (title, big, ...lines) => h('div.card', {}, h('div.muted', {}, title), h('div.big', {}, big), lines.map((l) => h('div', {}, l)));

  async function refresh() {
    try {
      const s = await bridge.call('server/stats');
      if (stopped) return;
      const latency = (p) => p.count ? `p50 ${ms(p.p50Ms)} · p90 ${ms(p.p90Ms)} · p99 ${ms(p.p99Ms)} · max ${ms(p.maxMs)}` : 'no samples yet';
      output.replaceChildren(
        h('div.cards', {},
          card('depotd', s.server.version, `up ${s.server.uptimeSeconds.toFixed(0)} s`, s.server.endpoints.join(', ')),
          card('sessions', h('span', { id: 'stats-sessions' }, s.sessions.length)),
          card('writer queue', h('span', { id: 'stats-queue' }, s.writer.queueDepth), `${s.writer.commits} commits`),
          card('commit latency', s.latency.commit.count ? ms(s.latency.commit.p50Ms) : '–', latency(s.latency.commit)),
          card('delta latency', s.latency.delta.count ? ms(s.latency.delta.p50Ms) : '–', latency(s.latency.delta)),
          card('store', `${(s.store.sizeBytes / 1024).toFixed(0)} KiB`, `WAL ${(s.store.walBytes / 1024).toFixed(0)} KiB`,
            h('span', { id: 'stats-transaction' }, `transaction ${s.store.transaction}`),
            s.store.lastTransaction ? `last by ${s.store.lastTransaction.author ?? '—'} at ${s.store.lastTransaction.timestamp}` : '')),
        h('h3', {}, 'Sessions'),
        table(['session', 'client', 'key', 'role', 'scope', 'subscriptions', 'observers', 'in flight', 'backlog', 'idle'],
          s.sessions.map((x) => [x.id.slice(0, 8), x.client ? `${x.client.name} ${x.client.version}` : '', x.key ?? '',
            x.role ?? '', scopeText(x.scope), x.subscriptions, x.observers, x.inFlight, x.outboundBacklog, `${x.idleSeconds.toFixed(1)} s`]), { id: 'sessions-table' }),
        h('h3', {}, 'Fetched results (shared sets)'),
        table(['subscriptions', 'request', 'section', 'rows', 'sections', 'sessions', 'notifications', 'transaction'],
          s.subscriptions.map((x) => [x.subscriptionIds.join(', '), h('td', { title: JSON.stringify(x.request) }, JSON.stringify(x.request)), x.sectionKeyPath ?? '',
            x.rows, x.sections, x.sessions, x.notificationsSent, x.transaction]), { id: 'sets-table' }),
        h('h3', {}, 'Notifications sent'),
        table(['method', 'count'], Object.entries(s.notificationsSent).sort(), { id: 'notifications-table' }));
    } catch (error) {
      if (!stopped) output.replaceChildren(errorBox(error, 'stats-error'));
    }
    if (!stopped) timer = setTimeout(refresh, 1000);
  }
  refresh();
  return { unmount() { stopped = true; clearTimeout(timer); } };
}
