// The auction page: the seed's demo app, on rideout's resilient browser client.
import { AuctionClient } from "/client.js";

const $ = (id) => document.getElementById(id);
const room = new URLSearchParams(location.search).get("room") || "lot-1";
const money = (n) => (n ? `$${Number(n).toLocaleString("en-US")}` : "—");

function log(text) {
  const li = document.createElement("li");
  li.textContent = `${new Date().toLocaleTimeString()}  ${text}`;
  $("log").prepend(li);
  while ($("log").children.length > 50) $("log").lastChild.remove();
}

function status(kind, text) {
  $("status").className = `status ${kind}`;
  $("status").textContent = text;
}

function render(state) {
  $("bid").textContent = money(state.bid);
  $("bidder").textContent = state.bidder ? `by ${state.bidder}` : "no bids yet";
  $("bids").textContent = state.bids;
  const input = $("amount");
  if (!input.value || Number(input.value) <= state.bid) input.value = state.bid + 10;
}

function addHistory(state, position, region) {
  if (!state.bidder) return;
  const li = document.createElement("li");
  li.dataset.offset = position.offset;
  li.innerHTML = `<span></span><b></b>`;
  li.firstChild.textContent = `${state.bidder} · ${region}`;
  li.lastChild.textContent = money(state.bid);
  $("history").prepend(li);
}

async function signIn() {
  let name = localStorage.getItem("rideout-user");
  if (!name) {
    name = (prompt("Your bidder name", "guest") || "guest").replace(/[^A-Za-z0-9_-]/g, "").slice(0, 32) || "guest";
    localStorage.setItem("rideout-user", name);
  }
  return name;
}

async function main() {
  const config = await (await fetch("/config.json")).json();
  // A visitor the waiting room let in (room.html) connects with the room's token.
  const handed = new URLSearchParams(location.hash.slice(1)).get("room_token");
  if (handed) {
    sessionStorage.setItem("rideout-room-token", handed);
    history.replaceState(null, "", location.pathname + location.search);
  }
  const roomToken = sessionStorage.getItem("rideout-room-token");
  const user = new URLSearchParams(location.search).get("user") || (roomToken ? "waiting-room visitor" : await signIn());
  $("me").textContent = user;
  $("switch").onclick = (e) => { e.preventDefault(); localStorage.removeItem("rideout-user"); location.reload(); };
  // A token lasts an hour: fetch one, keep it, and ask again only when it is about to
  // expire or the server closed with 1008. (The page's own zone may be gone by then.)
  let cached = null;
  const token = async ({ refresh } = {}) => {
    const expires = cached ? JSON.parse(atob(cached.split(".")[1].replace(/-/g, "+").replace(/_/g, "/"))).exp : 0;
    if (cached && !refresh && expires * 1000 > Date.now() + 30000) return cached;
    if (roomToken && !cached) return (cached = roomToken);
    const response = await fetch("/auth/demo-token", { method: "POST", body: JSON.stringify({ name: user }) });
    if (!response.ok) throw new Error(`sign-in failed: HTTP ${response.status}`);
    cached = (await response.json()).token;
    return cached;
  };
  const client = new AuctionClient({
    domain: config.app_domain, port: config.app_port, dohUrl: config.doh_url, token, rooms: [room],
    heartbeatInterval: config.heartbeat_interval, heartbeatTimeout: config.heartbeat_timeout,
    heartbeatFailures: config.heartbeat_failures, backoffBase: config.backoff_base, backoffCap: config.backoff_cap,
  });
  window.rideout = client; // for the curious (and for the browser tests)
  let countdown;
  client.addEventListener("connecting", (e) => log(`connecting to ${e.detail.address}`));
  client.addEventListener("open", (e) => {
    clearInterval(countdown);
    status("connected", "connected");
    log(`connected to ${e.detail.address}`);
  });
  client.addEventListener("state", (e) => {
    const d = e.detail;
    $("region").textContent = d.region;
    render(d.state);
    if (d.recovered) log(`restored: replayed ${d.replayed} missed update${d.replayed === 1 ? "" : "s"}`);
    else if ($("history").children.length) log("restored from the full state");
    status("connected", d.recovered ? `restored · replayed ${d.replayed}` : "connected");
  });
  client.addEventListener("update", (e) => {
    render(e.detail.state);
    addHistory(e.detail.state, e.detail.position, client.region);
  });
  client.addEventListener("region", (e) => { $("region").textContent = e.detail.to; log(`now served by ${e.detail.to} (was ${e.detail.from})`); });
  client.addEventListener("ack", (e) => {
    const fb = $("feedback");
    fb.className = `feedback ${e.detail.accepted ? "ok" : "bad"}`;
    fb.textContent = e.detail.accepted ? "Your bid is in." : `Not accepted: ${e.detail.reason === "too_low" ? "someone bid more" : e.detail.reason}`;
  });
  client.addEventListener("rejected", (e) => { $("feedback").className = "feedback bad"; $("feedback").textContent = e.detail.message; });
  client.addEventListener("heartbeat-failed", (e) => { status("degraded", `backend failing (${e.detail.count})`); log("heartbeat failed: the backend is not answering"); });
  client.addEventListener("disconnect", (e) => log(`disconnected: ${e.detail.cause}${e.detail.code ? ` (${e.detail.code})` : ""}`));
  client.addEventListener("reconnect", (e) => {
    clearInterval(countdown);
    const until = Date.now() + e.detail.delay * 1000;
    const tick = () => {
      const left = Math.max(0, (until - Date.now()) / 1000);
      status("reconnecting", left > 0 ? `reconnecting in ${left.toFixed(1)} s` : "reconnecting…");
      if (left <= 0) clearInterval(countdown);
    };
    tick();
    countdown = setInterval(tick, 100);
  });
  $("bid-form").onsubmit = (e) => {
    e.preventDefault();
    const amount = Number($("amount").value);
    client.bid(room, amount);
    $("feedback").className = "feedback wait";
    $("feedback").textContent = client.connected ? "Placing your bid…" : "Queued: it will be sent as soon as we reconnect.";
  };
  document.querySelectorAll(".quick button").forEach((b) => {
    b.onclick = () => { $("amount").value = (client.state(room)?.bid || 0) + Number(b.dataset.step); };
  });
  client.start();
}

main().catch((error) => { status("degraded", "failed to start"); log(String(error)); });
