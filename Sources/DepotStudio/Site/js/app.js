// Depot Studio's shell: the bridge, the daemon-gone banner, and hash navigation between pages.
import { Bridge } from './bridge.js';
import * as model from './model.js';
import * as objects from './objects.js';
import * as live from './live.js';
import * as history from './history.js';
import * as stats from './stats.js';

const pages = { model, objects, live, history, stats };
const bridge = new Bridge(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/ws`);
const main = document.getElementById('page');
const banner = document.getElementById('banner');
let current = null;

bridge.onLink((link) => {
  document.getElementById('endpoint').textContent = link.endpoint ? `depotd at ${link.endpoint}` : '';
  const down = link.state === 'disconnected' || link.state === 'studio-down';
  banner.hidden = !down;
  banner.textContent = down ? `depotd is not reachable — ${link.message ?? 'reconnecting by itself'}` : '';
  document.body.dataset.link = link.state;
});

function route() {
  const name = (location.hash.replace(/^#\//, '').split('?')[0]) || 'live';
  const page = pages[name] ?? pages.live;
  current?.unmount?.();
  main.replaceChildren();
  document.querySelectorAll('nav a').forEach((a) => a.classList.toggle('active', a.dataset.page === name));
  document.body.dataset.page = name;
  current = page.mount(main, bridge) ?? null;
}

window.addEventListener('hashchange', route);
route();
