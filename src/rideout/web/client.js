// rideout's browser client: a WebSocket to the auction that survives a regional failover.
//
// Same semantics as the Python client (rideout.client.ws):
// - resolves the app domain through DNS-over-HTTPS JSON before each connect (the answer's
//   TTL honoured), so a DNS failover is followed without a reload;
// - authenticates with the bearer subprotocol (browsers cannot set headers);
// - heartbeats every `heartbeatInterval`, closes when nothing arrives within
//   `heartbeatTimeout`, and after `heartbeatFailures` consecutive replies that are not
//   `pong` (a backend failing behind an open socket);
// - reconnects with exponential backoff and full jitter, at once after close 1012, after
//   the retry hint of 1013, with a fresh token after 1008;
// - restores state with getState + the last position it saw, applying what it missed;
// - queues bids while disconnected and sends them, with their original ids, afterwards.
//
// Events (a standard EventTarget; `event.detail` carries the data): connecting, open,
// state, update, ack, region, disconnect, reconnect, heartbeat-failed, rejected.

export class FullJitter {
  constructor(base, cap) {
    if (!(base > 0) || !(cap >= base)) throw new RangeError("need 0 < base <= cap");
    this.base = base;
    this.cap = cap;
  }
  /** Seconds to wait before reconnect attempt `attempt` (0-based). */
  delay(attempt, random = Math.random) {
    return random() * Math.min(this.cap, this.base * 2 ** Math.min(attempt, 64));
  }
}

/** Parse the retry hint of a 1013 close reason ("overloaded; retry-after=2.5"). */
export function retryHint(reason) {
  const match = /retry-after=([0-9.]+)/i.exec(reason || "");
  const value = match ? Number(match[1]) : NaN;
  return Number.isFinite(value) && value >= 0 ? Math.min(value, 3600) : null;
}

/** Compare stream offsets "ms-seq" numerically (-1, 0, 1). */
export function compareOffsets(a, b) {
  const [am, as] = a.split("-").map(Number);
  const [bm, bs] = b.split("-").map(Number);
  return am !== bm ? Math.sign(am - bm) : Math.sign(as - bs);
}

/** Resolve `name` to IPv4 addresses through a DoH JSON endpoint: {addresses, ttl}. */
export async function resolveDoH(dohUrl, name, fetchImpl = fetch) {
  const url = `${dohUrl}?name=${encodeURIComponent(name)}&type=A`;
  const response = await fetchImpl(url, { headers: { accept: "application/dns-json" }, cache: "no-store" });
  if (!response.ok) throw new Error(`DoH ${url}: HTTP ${response.status}`);
  const body = await response.json();
  if (body.Status !== 0) throw new Error(`DoH ${name}: DNS status ${body.Status}`);
  const answers = (body.Answer || []).filter((a) => a.type === 1);
  if (!answers.length) throw new Error(`DoH ${name}: no A records`);
  return { addresses: answers.map((a) => a.data), ttl: Math.min(...answers.map((a) => a.TTL)) };
}

const defaults = {
  port: 8000,
  path: "/ws",
  heartbeatInterval: 30,
  heartbeatTimeout: 35,
  heartbeatFailures: 2,
  backoffBase: 2,
  backoffCap: 20,
  healthyAfter: 5,
  maxQueuedBids: 100,
  maxBidRetries: 10,
};

export class AuctionClient extends EventTarget {
  /**
   * @param {object} options  domain, dohUrl, token (string or () => string|Promise),
   *   rooms, and optionally port, path, heartbeat*, backoffBase/Cap (seconds),
   *   healthyAfter (s), maxQueuedBids, random, resolve (name) => {addresses, ttl}.
   */
  constructor(options) {
    super();
    this.options = { ...defaults, ...options };
    if (!this.options.domain) throw new TypeError("domain is required");
    this.backoff = new FullJitter(this.options.backoffBase, this.options.backoffCap);
    this.random = this.options.random || Math.random;
    this.rooms = new Map(); // room -> {state, position}
    for (const room of this.options.rooms || []) this.rooms.set(room, { state: null, position: null });
    this.queue = []; // bids not yet sent: {room, amount, id, tries}
    this.inflight = new Map(); // id -> bid, sent, not yet acknowledged
    this.region = null;
    this.connected = false;
    this.attempt = 0;
    this.stats = { connects: 0, reconnects: 0, heartbeatFailures: 0, disconnectedMs: 0 };
    this._dns = null;
    this._refreshToken = false;
    this._ws = null;
    this._timers = new Set();
    this._stopped = true;
  }

  start() {
    this._stopped = false;
    this._connect();
    return this;
  }

  stop() {
    this._stopped = true;
    this._teardown(1000, "client stopped");
  }

  follow(room) {
    if (!this.rooms.has(room)) {
      this.rooms.set(room, { state: null, position: null });
      if (this.connected) this._send({ action: "getState", room });
    }
  }

  state(room) {
    return this.rooms.get(room)?.state ?? null;
  }

  /** Place a bid; returns its id. Sent now if connected, else queued (same id later). */
  bid(room, amount, id = crypto.randomUUID()) {
    if (this.queue.length >= this.options.maxQueuedBids) throw new Error("bid queue is full");
    const bid = { room, amount, id, tries: 0 };
    if (this.connected) this._sendBid(bid);
    else this.queue.push(bid);
    return id;
  }

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  _later(ms, fn) {
    const timer = setTimeout(() => {
      this._timers.delete(timer);
      fn();
    }, ms);
    this._timers.add(timer);
    return timer;
  }

  async _resolve() {
    const now = Date.now();
    if (this._dns && this._dns.expires > now) return this._dns.addresses;
    const resolve = this.options.resolve || ((name) => resolveDoH(this.options.dohUrl, name));
    const answer = await resolve(this.options.domain);
    this._dns = { addresses: answer.addresses, expires: now + answer.ttl * 1000 };
    return answer.addresses;
  }

  async _token() {
    const token = this.options.token;
    return typeof token === "function" ? await token({ refresh: this._refreshToken }) : token;
  }

  async _connect() {
    if (this._stopped) return;
    let addresses;
    try {
      addresses = await this._resolve();
    } catch (error) {
      this._emit("disconnect", { cause: "resolution_failed", code: null, error: String(error) });
      return this._scheduleReconnect(null);
    }
    const address = addresses[this.attempt % addresses.length];
    let token;
    try {
      token = await this._token();
    } catch (error) {
      this._emit("disconnect", { cause: "token_unavailable", code: null, error: String(error) });
      return this._scheduleReconnect(null);
    }
    if (this._stopped) return;
    const url = `ws://${address}:${this.options.port}${this.options.path}`;
    this._emit("connecting", { address, attempt: this.attempt });
    let ws;
    try {
      ws = new WebSocket(url, ["bearer", token]);
    } catch (error) {
      this._emit("disconnect", { cause: "connect_failed", code: null, error: String(error) });
      return this._scheduleReconnect(null);
    }
    this._ws = ws;
    this._lastMessage = Date.now();
    this._failures = 0;
    this._awaitingPong = 0;
    // A server that accepts the connection but never answers (a frozen process) is as
    // dead as a silent one: give the opening handshake the heartbeat timeout, no more.
    this._later(this.options.heartbeatTimeout * 1000, () => {
      if (ws === this._ws && ws.readyState === WebSocket.CONNECTING) this._abandon(ws, "open_timeout");
    });
    ws.onopen = () => this._opened(ws, address);
    ws.onmessage = (event) => this._message(ws, event.data);
    ws.onclose = (event) => this._closed(ws, event.code, event.reason, event.code === 1006 ? "connection_lost" : "closed");
  }

  _opened(ws, address) {
    if (ws !== this._ws) return;
    this.connected = true;
    this.stats.connects += 1;
    if (this._disconnectedAt) this.stats.disconnectedMs += Date.now() - this._disconnectedAt;
    this._disconnectedAt = null;
    this._emit("open", { address });
    for (const [room, entry] of this.rooms) {
      const message = { action: "getState", room };
      if (entry.position) message.since = entry.position;
      this._send(message);
    }
    // Bids in flight when the last connection dropped, then those made meanwhile.
    const pending = [...this.inflight.values(), ...this.queue.splice(0)];
    this.inflight.clear();
    for (const bid of pending) this._sendBid(bid);
    this._heartbeat = setInterval(() => this._beat(ws), this.options.heartbeatInterval * 1000);
    this._healthy = this._later(this.options.healthyAfter * 1000, () => {
      if (ws === this._ws && this.connected) this.attempt = 0; // healthy for a while, not merely open
    });
  }

  _beat(ws) {
    if (ws !== this._ws) return;
    if (Date.now() - this._lastMessage > this.options.heartbeatTimeout * 1000) {
      return this._abandon(ws, "heartbeat_timeout");
    }
    this._awaitingPong += 1;
    this._send({ action: "heartbeat" });
  }

  _send(message) {
    if (this._ws && this._ws.readyState === WebSocket.OPEN) this._ws.send(JSON.stringify(message));
  }

  _sendBid(bid) {
    bid.tries += 1;
    this.inflight.set(bid.id, bid);
    this._send({ action: "bid", room: bid.room, amount: bid.amount, id: bid.id });
  }

  _message(ws, data) {
    if (ws !== this._ws) return;
    this._lastMessage = Date.now();
    if (data === "pong") {
      this._awaitingPong = Math.max(0, this._awaitingPong - 1);
      this._failures = 0;
      return;
    }
    let message;
    try {
      message = JSON.parse(data);
    } catch {
      return;
    }
    if (message.region && message.region !== this.region) {
      const from = this.region;
      this.region = message.region;
      if (from !== null) this._emit("region", { from, to: message.region });
    }
    if (message.type === "state") return this._applyState(message);
    if (message.type === "update") return this._applyUpdate(message.room, message.state, message.position);
    if (message.type === "ack") {
      this.inflight.delete(message.id);
      return this._emit("ack", message);
    }
    if (message.type === "error") return this._error(ws, message);
  }

  _applyState(message) {
    const entry = this.rooms.get(message.room) || { state: null, position: null };
    this.rooms.set(message.room, entry);
    if (message.recovered) {
      for (const update of message.missed) this._applyUpdate(message.room, update.state, update.position, true);
    }
    entry.state = message.state;
    entry.position = message.position;
    this._emit("state", {
      room: message.room, state: message.state, recovered: message.recovered,
      replayed: message.recovered ? message.missed.length : 0, region: message.region,
    });
  }

  _applyUpdate(room, state, position, replaying = false) {
    const entry = this.rooms.get(room);
    if (!entry) return;
    if (entry.position && entry.position.epoch === position.epoch && compareOffsets(position.offset, entry.position.offset) <= 0) {
      return; // already have it
    }
    entry.state = state;
    entry.position = position;
    this._emit("update", { room, state, position, replayed: replaying });
  }

  _error(ws, message) {
    if (message.id && this.inflight.has(message.id)) {
      const bid = this.inflight.get(message.id);
      if (message.code === "unavailable" && bid.tries < this.options.maxBidRetries) {
        // Fenced during a failover, or not yet replicated: the same id again, shortly.
        this.inflight.delete(bid.id);
        this.queue.push(bid);
        this._later(200 * bid.tries, () => {
          const index = this.queue.indexOf(bid);
          if (this.connected && index >= 0) this._sendBid(this.queue.splice(index, 1)[0]);
        });
        return;
      }
      this.inflight.delete(message.id);
      return this._emit("rejected", message);
    }
    if (!message.id && this._awaitingPong > 0) {
      // The reply to a heartbeat, and not a pong: the backend is failing.
      this._awaitingPong -= 1;
      this._failures += 1;
      this.stats.heartbeatFailures += 1;
      this._emit("heartbeat-failed", { count: this._failures });
      if (this._failures >= this.options.heartbeatFailures) this._abandon(ws, "degraded");
    }
  }

  _abandon(ws, cause) {
    // Do not wait for a closing handshake a dead or failing server may never finish.
    this._closed(ws, null, cause, cause);
    try {
      ws.close(4000, cause);
    } catch {
      /* already closing */
    }
  }

  _closed(ws, code, reason, cause) {
    if (ws !== this._ws) return;
    this._teardown();
    this._emit("disconnect", { cause, code, reason });
    this._refreshToken = code === 1008; // the token expired or was revoked: ask for a new one
    this._scheduleReconnect(code, reason);
  }

  _teardown(code, reason) {
    clearInterval(this._heartbeat);
    for (const timer of this._timers) clearTimeout(timer);
    this._timers.clear();
    if (this.connected) this._disconnectedAt = Date.now();
    this.connected = false;
    const ws = this._ws;
    this._ws = null;
    if (ws && code) {
      ws.onclose = null;
      try {
        ws.close(code, reason);
      } catch {
        /* already closed */
      }
    }
  }

  _scheduleReconnect(code, reason) {
    if (this._stopped) return;
    let delay;
    if (code === 1012 || code === 1008) delay = 0; // draining: now; token expired: fresh token now
    else if (code === 1013) delay = retryHint(reason) ?? this.backoff.delay(this.attempt, this.random);
    else delay = this.backoff.delay(this.attempt, this.random);
    this.attempt += 1;
    this.stats.reconnects += 1;
    this._dns = this._dns && this._dns.expires > Date.now() ? this._dns : null;
    this._emit("reconnect", { attempt: this.attempt, delay });
    this._later(delay * 1000, () => this._connect());
  }
}
