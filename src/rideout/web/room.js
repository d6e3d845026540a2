// The waiting-room page: enter the queue, watch the serving counter, go on when served.
//
// - Direct mode (`?event_id=E[&next=/path]`): once served, the room's token is kept in
//   the URL fragment of the auction page (`next`, a path on this site only), which keeps
//   it in sessionStorage ("rideout-room-token") and connects with it.
// - OpenID mode (served by the adapter as /oidc/E/wait?authz=A, where its /authorize
//   sends the browser; or `?event_id=E&authz=A`): the position is the authorize
//   request's (POST /oidc/E/enter); once served the page returns to the adapter
//   (/oidc/E/resume), which sends the code to the relying party.
// - The request id is kept in sessionStorage: a reload keeps the place in the queue.
// - Polls go through the app domain resolved by DNS-over-HTTPS (as the auction's
//   client), rotating addresses on failure, so a region failover is followed without a
//   reload; the pause between polls grows with full jitter while nothing moves (no fixed
//   period that synchronises a crowd), and is short again when the counter moves.
import { FullJitter, resolveDoH } from "/client.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const adapter = location.pathname.match(/^\/oidc\/([^/]+)\/wait$/);
const eventId = (adapter && decodeURIComponent(adapter[1])) || params.get("event_id") || "auction";
const authz = params.get("authz");
const nextPath = /^\/(?!\/)[^\s\\]*$/.test(params.get("next") || "") ? params.get("next") : "/";
const slot = `rideout-room:${eventId}:${authz || "direct"}`;
const poll = new FullJitter(1, 8); // seconds: base 1, cap 8
const retry = new FullJitter(0.5, 10);

function status(kind, text) {
  $("status").className = `status ${kind}`;
  $("status").textContent = text;
}

function feedback(kind, text) {
  $("feedback").className = `feedback ${kind}`;
  $("feedback").textContent = text;
}

const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

class Origin {
  // The app's addresses through DoH (its TTL honoured); `fetch` tries them in turn.
  constructor(config) {
    this.config = config;
    this.dns = null;
    this.index = 0;
    this.failures = 0;
  }

  async addresses() {
    if (this.dns && this.dns.expires > Date.now()) return this.dns.addresses;
    try {
      const answer = await resolveDoH(this.config.doh_url, this.config.app_domain);
      this.dns = { addresses: answer.addresses, expires: Date.now() + answer.ttl * 1000 };
    } catch (error) {
      if (!this.dns) this.dns = { addresses: [location.hostname], expires: Date.now() + 1000 };
    }
    return this.dns.addresses;
  }

  async base() {
    const addresses = await this.addresses();
    return `http://${addresses[this.index % addresses.length]}:${this.config.app_port}`;
  }

  // A response that is not a server failure, retried through the addresses with full
  // jitter (network errors, 5xx: a region going away answers one of those).
  async fetch(path, init = {}) {
    for (let attempt = 0; ; attempt++) {
      const base = await this.base();
      try {
        const response = await fetch(base + path, { cache: "no-store", ...init });
        if (response.status < 500) {
          this.failures = 0;
          $("region").textContent = new URL(base).hostname;
          return response;
        }
      } catch (error) {
        // unreachable: try the next address
      }
      this.failures++;
      this.index++;
      this.dns = attempt % 2 ? null : this.dns; // re-resolve every other failure
      status("reconnecting", "reconnecting…");
      await sleep(retry.delay(attempt));
    }
  }
}

async function enter(origin) {
  const kept = sessionStorage.getItem(slot);
  if (kept) return JSON.parse(kept);
  let response;
  if (authz) {
    // text/plain: a simple request (no preflight); the adapter checks Origin.
    response = await origin.fetch(`/oidc/${encodeURIComponent(eventId)}/enter`, {
      method: "POST", body: JSON.stringify({ authz }), headers: { "content-type": "text/plain" },
    });
  } else {
    // One idempotency key per arrival: a retry across a failover keeps one position.
    const key = sessionStorage.getItem(`${slot}:key`) || crypto.randomUUID();
    sessionStorage.setItem(`${slot}:key`, key);
    response = await origin.fetch("/assign_queue_num", {
      method: "POST", body: JSON.stringify({ event_id: eventId }),
      headers: { "content-type": "application/json", "idempotency-key": key },
    });
  }
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  const entry = { requestId: body.api_request_id, first: null };
  sessionStorage.setItem(slot, JSON.stringify(entry));
  return entry;
}

function render(position, serving, estimate, first) {
  $("position").textContent = position ?? "—";
  $("serving").textContent = serving;
  const ahead = estimate && estimate.ahead !== null ? estimate.ahead : position ? Math.max(0, position - serving) : null;
  $("ahead").textContent = ahead ?? "—";
  const eta = estimate ? estimate.estimated_wait : null;
  $("eta").textContent = ahead === 0 ? "now" : eta === null ? "—" : eta < 60 ? `${eta} s` : `${Math.ceil(eta / 60)} min`;
  // Progress: from the serving counter when we arrived to our number.
  let percent = 0;
  if (position) percent = position <= first ? 100 : Math.min(100, Math.max(0, (100 * (serving - first)) / (position - first)));
  if (position && serving >= position) percent = 100;
  $("bar").style.width = `${percent}%`;
  $("progress").setAttribute("aria-valuenow", String(Math.round(percent)));
}

async function served(origin, entry) {
  if (authz) {
    // The adapter issues the code only if a token can be minted; else it sends us back.
    location.assign(`${await origin.base()}/oidc/${encodeURIComponent(eventId)}/resume?authz=${encodeURIComponent(authz)}`);
    return true;
  }
  const response = await origin.fetch("/generate_token", {
    method: "POST", body: JSON.stringify({ event_id: eventId, request_id: entry.requestId }),
    headers: { "content-type": "application/json" },
  });
  const body = await response.json();
  if (response.status === 202) return false; // not yet (a counter seen a moment early)
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  // Through the address that answered (this page's own may be gone after a failover);
  // the token in the fragment, which no server sees, to the auction page's storage.
  location.assign(`${await origin.base()}${nextPath}#room_token=${encodeURIComponent(body.access_token)}`);
  return true;
}

async function main() {
  $("event").textContent = eventId;
  const config = await (await fetch("/config.json", { cache: "no-store" })).json();
  const origin = new Origin(config);
  const entry = await enter(origin);
  window.rideoutRoom = { entry, polls: 0, delays: [] }; // for the curious (and the tests)
  const q = (path) => `${path}?event_id=${encodeURIComponent(eventId)}&request_id=${encodeURIComponent(entry.requestId)}`;
  let idle = 0;
  let last = null;
  for (;;) {
    const numberResponse = await origin.fetch(q("/queue_num"));
    if (numberResponse.status === 404 || numberResponse.status === 410) {
      sessionStorage.removeItem(slot);
      throw new Error("your place in the queue is gone: reload to join again");
    }
    const number = numberResponse.status === 200 ? (await numberResponse.json()).queue_number : null;
    const serving = Number((await (await origin.fetch(`/serving_num?event_id=${encodeURIComponent(eventId)}`)).json()).serving_counter);
    const estimateResponse = await origin.fetch(q("/estimated_wait"));
    const estimate = estimateResponse.ok ? await estimateResponse.json() : null;
    if (entry.first === null && number !== null) {
      entry.first = Math.min(serving, number - 1);
      sessionStorage.setItem(slot, JSON.stringify(entry));
    }
    render(number, serving, estimate, entry.first ?? 0);
    window.rideoutRoom.polls++;
    if (number !== null && serving >= number) {
      status("connected", "your turn");
      $("title").textContent = "It is your turn";
      feedback("ok", authz ? "Signing you in…" : "Taking you to the auction…");
      if (await served(origin, entry)) return;
    } else {
      status("connected", number === null ? "pre-queued" : "waiting");
    }
    idle = serving === last ? idle + 1 : 0;
    last = serving;
    const delay = Math.max(0.25, poll.delay(idle));
    window.rideoutRoom.delays.push(delay);
    await sleep(delay);
  }
}

main().catch((error) => { status("degraded", "stopped"); feedback("bad", String(error.message || error)); });
