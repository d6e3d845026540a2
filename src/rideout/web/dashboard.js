// The ops dashboard: a live view of the failover loop, the zones, the evacuation ledger and
// the waiting rooms, fed by server-sent events.
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

// A button's POST with the operator session: its cookie, its CSRF token, this Origin.
async function operatorPost(path, payload) {
  const response = await fetch(path, {
    method: "POST",
    credentials: "same-origin",
    headers: { "x-csrf-token": settings.csrf, "content-type": "application/json" },
    body: JSON.stringify(payload),
  });
  return { status: response.status, ...(await response.json()) };
}

async function chaosAction(op, region, button) {
  button.disabled = true;
  try {
    const body = await operatorPost("/v1/chaos", { op, region });
    window.dashboard.chaos = { op, region, ...body }; // the last answer
    addEvent({ at: Date.now() / 1000, kind: "chaos", message: body.message || body.error });
  } finally {
    button.disabled = false;
  }
}

// The zones panel: one row per zone, kept (its buttons too) and updated each frame.
function zoneRow(zone) {
  const cell = (what, ...children) => el("td", { id: `zone-${what}-${zone.zone}` }, ...children);
  const row = el("tr", { id: `zone-${zone.zone}` }, el("td", {}, el("b", {}, zone.zone)), el("td", {}, zone.region),
    cell("canary", "—"), cell("full", "—"), cell("state", "—"), cell("drain", "—"), cell("actions"));
  if (settings.session) {
    const buttons = el("div", { class: "chaos" });
    for (const [op, kind] of [["evacuate", "danger"], ["recover", "mend"]]) {
      const button = el("button", { class: kind, "data-zone-op": op, "data-zone": zone.zone }, op);
      button.onclick = () => zoneAction(op, zone.zone, button);
      buttons.append(button);
    }
    row.querySelector(`#zone-actions-${zone.zone}`).append(buttons);
  }
  return row;
}

const zoneBusy = new Set();
async function zoneAction(op, zone, button) {
  zoneBusy.add(zone);
  button.disabled = true;
  try {
    const body = await operatorPost("/v1/dashboard/zones", { op, zone });
    // The last answer, and how many frames the page had drawn when it came.
    window.dashboard.zoneAction = { op, zone, frame: window.dashboard.frames, ...body };
    addEvent({ at: Date.now() / 1000, kind: `zone ${op}`, message: body.message || body.error });
  } finally {
    zoneBusy.delete(zone);
    button.disabled = false;
  }
}

const clock = (t) => new Date(t * 1000).toLocaleTimeString();

function evacuationText(e) {
  if (!e) return "serving";
  const until = e.expires_at ? `, until ${clock(e.expires_at)}` : "";
  return `evacuated (${e.reason}, by ${e.operator}, since ${clock(e.since)}${until})`;
}

function drainText(d) {
  if (!d) return "—";
  const left = d.left == null ? "" : `, ${d.left} left`;
  return `${d.state}${left}`;
}

function renderZones(zones) {
  const body = $("zones").tBodies[0];
  for (const zone of zones) {
    if (!$(`zone-${zone.zone}`)) body.append(zoneRow(zone));
    const canary = zone.healthy == null ? ["no data", "INSUFFICIENT_DATA"] : zone.healthy ? ["healthy", "OK"] : ["UNHEALTHY", "ALARM"];
    $(`zone-canary-${zone.zone}`).replaceChildren(el("span", { class: `pill ${canary[1]}` }, canary[0]));
    const load = [zone.full ? el("span", { class: "pill full" }, "full") : "room"];
    if (zone.busy) load.push(" ", el("span", { class: "pill full" }, "busy"));
    $(`zone-full-${zone.zone}`).replaceChildren(...load);
    $(`zone-state-${zone.zone}`).replaceChildren(zone.evacuated
      ? el("span", { class: "pill evacuated" }, evacuationText(zone.evacuation)) : "serving");
    $(`zone-drain-${zone.zone}`).textContent = zone.evacuated ? drainText(zone.drain) : "—";
    for (const button of document.querySelectorAll(`button[data-zone="${zone.zone}"]`)) {
      const pointless = button.dataset.zoneOp === "evacuate" ? zone.evacuated : !zone.evacuated;
      button.disabled = zoneBusy.has(zone.zone) || pointless;
    }
  }
}

const ledgerShown = {};
// A ledger's card: `id` is its table's (ledger: the control plane's SQLite file;
// aws-ledger: [evacuate_aws]'s DynamoDB table, when the control plane reads it).
function renderLedger(ledger, id = "ledger") {
  if (!ledger) return;
  const shown = JSON.stringify(ledger);
  if (shown === ledgerShown[id]) return;
  ledgerShown[id] = shown;
  $(`${id}-card`).hidden = false;
  $(`${id}-where`).textContent = `${ledger.kind}: ${ledger.where}`;
  $(id).tBodies[0].replaceChildren(...ledger.rows.map((r) => el("tr", { "data-zone": r.zone },
    el("td", {}, r.zone), el("td", {}, r.type), el("td", { class: "mono" }, r.resource),
    el("td", { class: "mono" }, r.removed.join(", ")), el("td", {}, r.operator),
    el("td", {}, clock(r.since)), el("td", {}, r.outcome || "—"))));
  $(`${id}-note`).textContent = ledger.error ? `cannot read the ledger: ${ledger.error}`
    : ledger.exists === null ? "not read yet"
    : !ledger.exists ? "empty: no evacuation recorded yet (the first one creates the file)"
    : ledger.total === 0 ? "empty: nothing evacuated"
    : `${ledger.total} row${ledger.total === 1 ? "" : "s"}${ledger.total > ledger.rows.length ? ` (the first ${ledger.rows.length} shown)` : ""}`;
}

function inletText(inlet) {
  const alarm = inlet.alarm ? `; alarm ${inlet.alarm}: ${inlet.alarm_state || "unknown"}` : "";
  return `${inlet.kind}: ${inlet.doing}${alarm}`;
}

function renderRooms(rooms) {
  if (!rooms) return;
  const body = $("rooms").tBodies[0];
  const ids = new Set(rooms.events.map((e) => `room-${e.event_id}`));
  for (const row of [...body.rows]) if (!ids.has(row.id)) row.remove();
  for (const e of rooms.events) {
    let row = $(`room-${e.event_id}`);
    if (!row) {
      row = el("tr", { id: `room-${e.event_id}` });
      body.append(row);
    }
    const capacity = e.capacity == null ? `${e.active} (no cap)` : `${e.active} / ${e.capacity}`;
    const wait = e.estimated_wait == null ? "— (nothing admitted)" : `${e.estimated_wait} s`;
    const inlet = el("td", {}, inletText(e.inlet));
    if (e.inlet.held) inlet.className = "bad";
    row.replaceChildren(el("td", {}, el("b", {}, e.event_id)), el("td", {}, e.open ? "open" : "closed"),
      el("td", { "data-field": "queue" }, String(e.queue)), el("td", { "data-field": "serving" }, String(e.serving)),
      el("td", { "data-field": "waiting" }, String(e.waiting)),
      el("td", { "data-field": "active", title: `holding ${e.holding} (active sessions plus admitted positions without their token yet)` }, capacity),
      el("td", { "data-field": "admitted" }, String(e.admitted_per_minute)), el("td", { "data-field": "wait" }, wait), inlet);
  }
  $("rooms-where").textContent = rooms.server ? `read from ${rooms.server}` : "";
  $("rooms-note").textContent = !rooms.enabled ? "the waiting room is off ([waitingroom] enabled = false)"
    : rooms.error ? `cannot read the rooms: ${rooms.error}`
    : rooms.events.length === 0 ? "no events"
    : rooms.more ? `${rooms.more} more event(s) not shown` : "";
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
  renderZones(view.zones || []);
  renderLedger(view.ledger);
  renderLedger(view.aws_ledger, "aws-ledger");
  renderRooms(view.rooms);
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
  if (!settings.session) {
    $("zones-login").append("Evacuate and recover buttons need an operator session: open the link ",
      el("code", {}, "rideout dashboard login"), " prints.");
  }
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
    window.dashboard.frames = (window.dashboard.frames || 0) + 1; // frames drawn (tests count periods)
  });
  source.onerror = () => {
    $("feed").className = "status reconnecting";
    $("feed").textContent = "reconnecting…";
    if (source.readyState === EventSource.CLOSED) setTimeout(connect, 2000 + Math.random() * 3000);
  };
  window.dashboard = { ...window.dashboard, source };
}

main();
