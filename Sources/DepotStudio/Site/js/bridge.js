// The page's link to the studio: a WebSocket carrying JSON-RPC-like requests to depotd and its notifications back.

/** A request refused by depotd (or by the studio when depotd cannot be reached). */
export class RpcError extends Error {
  constructor(error) {
    super(error.message);
    this.code = error.code;
    this.data = error.data;
  }
}

/** One WebSocket to the studio, reopened when it closes; requests wait while depotd is unreachable. */
export class Bridge {
  constructor(url) {
    this.url = url;
    this.nextId = 1;
    this.pending = new Map();
    this.handlers = new Map();
    this.linkListeners = new Set();
    this.linked = false;
    this.waiting = [];
    this.open();
  }

  open() {
    const socket = new WebSocket(this.url);
    this.socket = socket;
    socket.onmessage = (event) => this.receive(JSON.parse(event.data));
    socket.onclose = () => {
      for (const { reject } of this.pending.values()) reject(new RpcError({ code: -32099, message: 'the studio went away' }));
      this.pending.clear();
      this.setLink({ state: 'studio-down', message: 'the studio server is not reachable; retrying' });
      setTimeout(() => this.open(), 1000);
    };
  }

  receive(message) {
    if (message.id !== undefined && message.id !== null && this.pending.has(message.id)) {
      const { resolve, reject } = this.pending.get(message.id);
      this.pending.delete(message.id);
      if (message.error) reject(new RpcError(message.error)); else resolve(message.result);
      return;
    }
    if (message.method === 'studio/link') return this.setLink(message.params);
    for (const handler of this.handlers.get(message.method) ?? []) handler(message.params);
  }

  setLink(link) {
    this.link = link;
    this.linked = link.state === 'connected' || link.state === 'reconnected';
    if (this.linked) {
      const waiting = this.waiting;
      this.waiting = [];
      waiting.forEach((go) => go());
    }
    for (const listener of this.linkListeners) listener(link);
  }

  /** Calls a daemon method; resolves with its result or rejects with an RpcError. */
  async call(method, params = {}) {
    if (!this.linked) await new Promise((go) => this.waiting.push(go));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.socket.send(JSON.stringify({ id, method, params }));
    });
  }

  /** Runs `handler(params)` for every notification named `method`; returns a function that stops it. */
  on(method, handler) {
    if (!this.handlers.has(method)) this.handlers.set(method, new Set());
    this.handlers.get(method).add(handler);
    return () => this.handlers.get(method).delete(handler);
  }

  /** Runs `listener(link)` on every change of the link to depotd; returns a function that stops it. */
  onLink(listener) {
    this.linkListeners.add(listener);
    return () => this.linkListeners.delete(listener);
  }
}
