// The ops dashboard: a live view of the failover loop, fed by server-sent events.
const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const el = (tag, attrs = {}, ...children) => {
  const node = tag === "svg" ? document.createElementNS(SVG, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const child of children) node.append(child);
  return node;
};

// From /v1/dashboard: whether chaos runs here, and this browser's operator session (its
// CSRF token; the session itself is an HttpOnly cookie this script never sees).
let settings = { local: false, session: false, csrf: null, regions: [] };

function regionCard(name) {
  const card = el("div", { class: "card region-card", id: `region-${name}` },
    el("h3", {}, name, el("span", { class: "pill", id: `alarm-${name}` }, "—"), el("span", { class: "pill", id: `role-${name}` }, "")),
    el("svg", { class: "strip", id: `strip-${name}`, viewBox: "0 0 600 64", preserveAspectRatio: "none" }),
    el("div", { class: "alarm-reason", id: `reason-${name}` }),
    el("div", { class: "kv" }, el("span", {}, "health check"), el("b", { id: `health-${name}` }, "—")),
    el("div", { class: "kv" }, el("span", {}, "connected clients"), el("b", { id: `clients-${name}` }, "—")),
    el("div", { class: "kv" }, el("span", {}, "redis"), el("b", { id: `redis-${name}` }, "—")),
    el("div", { class: "kv" }, el("span", {}, "redis, second zone"), el("b", { id: `redis-replica-${name}` }, "—")),
  );
  if (settings.local && !settings.session) {
    card.append(el("div", { class: "chaos-login" }, "Chaos buttons need an operator session: open the link ",
      el("code", {}, "rideout dashboard login"), " prints."));
  } else if (settings.local) {
    const chaos = el("div", { class: "chaos" });
    for (const [op, label, kind] of [["kill", "kill", "danger"], ["freeze", "freeze", "danger"], ["throttle", "throttle", "danger"],
                                      ["kill-redis", "kill redis", "danger"], ["restore", "restore", "mend"]]) {
      const button = el("button", { class: kind, "data-op": op, "data-region": name }, label);
      button.onclick = () => chaosAction(op, name, button);
      chaos.append(button);
    }
    card.append(chaos);
  }
  return card;
}

async function chaosAction(op, region, button) {
  button.disabled = true;
  try {
    const response = await fetch("/v1/chaos", {
      method: "POST",
      credentials: "same-origin",
      headers: { "x-csrf-token": settings.csrf, "content-type": "application/json" },
      body: JSON.stringify({ op, region }),
    });
    const body = await response.json();
    window.dashboard.chaos = { op, region, status: response.status, ...body }; // the last answer
    addEvent({ at: Date.now() / 1000, kind: "chaos", message: body.message || body.error });
  } finally {
    button.disabled = false;
  }
}

function strip(name, points, now, window = 60) {
  // Canary datapoints as bars: green 1, red 0, nothing where the canary was silent.
  const svg = $(`strip-${name}`);
  const bars = points.map(([t, v]) => {
    const x = ((t - (now - window)) / window) * 600;
    return `<rect x="${x.toFixed(1)}" y="${v >= 1 ? 14 : 30}" width="4" height="${v >= 1 ? 36 : 20}" rx="1" fill="${v >= 1 ? "#3ecf8e" : "#f04438"}"/>`;
  });
  svg.innerHTML = `<line x1="0" y1="50" x2="600" y2="50" stroke="#2a3042"/>${bars.join("")}`;
}

const seen = new Set();
function addEvent(event) {
  const key = `${event.at}-${event.kind}-${event.message}`;
  if (seen.has(key)) return;
  seen.add(key);
  const when = new Date(event.at * 1000).toLocaleTimeString();
  $("events").prepend(el("li", {}, `${when}  ${event.kind}: ${event.message}`));
}

// Flap damping, as `rideout status` prints it: whether (and how long) failback is held.
function dampingText(d) {
  if (!d) return "off";
  const detail = `penalty ${d.penalty.toFixed(1)}, ${d.moves} move${d.moves === 1 ? "" : "s"} in ${d.window} s`;
  if (d.holding) return `failback held ${Math.ceil(d.hold_seconds)} s more (${detail})`;
  if (d.hold_seconds > 0) return `a failback now would be held ${Math.ceil(d.hold_seconds)} s (${detail})`;
  return d.penalty > 0 ? `not held (${detail})` : "not held";
}

// The grace after the writer's latest move, as `rideout status` prints it: a failing
// writer region whose Redis answers keeps the writer a while (its clients are arriving).
function graceText(seconds, writer) {
  if (!seconds) return "none";
  return `a failing ${writer} keeps the writer ${Math.ceil(seconds)} s more (the clients sent to it are arriving)`;
}

function render(view) {
  const failover = view.failover;
  const dns = view.dns;
  $("dns").textContent = `DNS → ${dns.region}`;
  $("dns-name").textContent = dns.name;
  $("dns-addresses").textContent = dns.addresses.join(", ");
  $("dns-ttl").textContent = `${dns.ttl} s`;
  $("dns-reason").textContent = dns.reason;
  $("dns-server").textContent = dns.server;
  const evacuated = (view.zones || []).filter((z) => z.evacuated);
  $("dns-evacuated").textContent = evacuated.length
    ? evacuated.map((z) => `${z.zone} (${z.evacuation.reason}, by ${z.evacuation.operator})`).join(", ")
    : "none";
  const full = (view.zones || []).filter((z) => z.full);
  $("dns-full").textContent = full.length ? full.map((z) => z.zone).join(", ") : "none";
  $("writer").textContent = failover.writer;
  $("epoch").textContent = failover.epoch;
  $("replication").textContent = failover.replication;
  $("lag").textContent = failover.lag_bytes == null ? "—" : `${failover.lag_bytes} B${failover.lag_seconds == null ? "" : `, ${failover.lag_seconds} s`}`;
  $("moves").textContent = `${failover.failovers} / ${failover.failbacks}`;
  $("lost").textContent = failover.lost_writes;
  $("datasets-lost").textContent = failover.datasets_lost || 0;
  $("datasets-lost").className = failover.datasets_lost ? "bad" : "";
  $("damping").textContent = dampingText(failover.damping);
  $("grace").textContent = graceText(failover.move_grace_seconds, failover.writer);
  for (const [name, alarm] of Object.entries(view.alarms)) {
    if (!$(`region-${name}`)) $("regions").append(regionCard(name));
    $(`alarm-${name}`).className = `pill ${alarm.state}`;
    $(`alarm-${name}`).textContent = alarm.recovering ? `${alarm.state} (recovering)` : alarm.state;
    $(`reason-${name}`).textContent = alarm.recovering ? alarm.evaluation : alarm.reason;
    $(`role-${name}`).className = `pill ${failover.writer === name ? "writer" : dns.region === name ? "serving" : ""}`;
    $(`role-${name}`).textContent = failover.writer === name ? "writer" : "";
    $(`health-${name}`).textContent = view.health_checks[name] ? "healthy" : "UNHEALTHY";
    const clients = view.clients[name];
    $(`clients-${name}`).textContent = clients == null ? "no answer" : clients;
    // Each Redis of the region: its part around the writer, link and lag (failover.topology).
    for (const [id, key] of [[`redis-${name}`, name], [`redis-replica-${name}`, `${name}/replica`]]) {
      const node = (failover.topology || []).find((n) => n.redis === key);
      $(id).textContent = !node ? "none" : !node.reachable ? `${node.zone}: unreachable`
        : `${node.zone}: ${node.part}${node.part === "writer" ? "" : ` (link ${node.link}${node.lag_bytes == null ? "" : `, lag ${node.lag_bytes} B`})`}`;
    }
    strip(name, view.canary[name] || [], view.now);
  }
  for (const event of failover.events) addEvent(event);
  const autoshift = view.autoshift || {};
  for (const e of autoshift.events || []) {
    addEvent({ at: e.at, kind: `autoshift ${e.action}`, message: `${e.zone} (${e.why}): ${e.result}` });
  }
}

async function main() {
  settings = await (await fetch("/v1/dashboard", { credentials: "same-origin" })).json();
  $("operator").textContent = settings.session ? "operator" : "view only";
  $("operator").className = `status ${settings.session ? "connected" : ""}`;
  connect();
}

function connect() {
  // The browser retries a dropped stream by itself, but not one refused (503 when every
  // reader slot is taken): then retry here, after a few seconds with jitter.
  const source = new EventSource("/v1/stream");
  source.addEventListener("summary", (e) => {
    $("feed").className = "status connected";
    $("feed").textContent = "live";
    render(JSON.parse(e.data));
  });
  source.onerror = () => {
    $("feed").className = "status reconnecting";
    $("feed").textContent = "reconnecting…";
    if (source.readyState === EventSource.CLOSED) setTimeout(connect, 2000 + Math.random() * 3000);
  };
  window.dashboard = { ...window.dashboard, source };
}

main();
