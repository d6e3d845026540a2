"""Reconnect herd: how fast one zone process takes back a thousand clients at once.

    .venv/bin/python -m bench.herd              # 3 rounds of 1,000 clients (~2 minutes)
    .venv/bin/python -m bench.herd --quick      # 1 round of 300

Each round starts a fresh ``rideout serve`` (one process) per variant, in alternating
order, against one Redis whose room holds a history; then every client reconnects at
once (64 handshakes in flight per client process) and sends ``getState`` from the same
position (a replay of ``--missed`` updates) as soon as it is open, as after a drain.

- ``jwt``: today's path: every handshake verifies the token (Ed25519), every getState
  is a Redis script of its own (``auth.resume_ttl = 0``, ``realtime.coalesce_reads =
  false``);
- ``tickets``: handshakes present a resumption ticket (an HMAC), reads as today;
- ``tickets+sf``: tickets, and identical concurrent reads share one (singleflight).

Reported per variant (median of the rounds): connections accepted per second (clients /
time of the last accept), seconds until every getState was answered, server CPU per
reconnect, getStates answered and refused (``throttled``: the replay gate), and the
Redis scripts run (``INFO commandstats``) and room reads the server made
(``rideout_state_reads_total``). The ratio is each variant's accepted/s over ``jwt``'s in
the same round. Load shedding is off (it would refuse part of the herd with 503; the
point here is what one process can take). Clients are separate processes on the same
cores.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table
from websockets.asyncio.client import connect

from bench._harness import BENCH_ROOT, Child, cpu_seconds, median, wait_for_log
from bench.realtime import FANOUT_ZONE, REGION, Run, Settings
from rideout.config import Config, dump_toml
from rideout.drill.machine import core_speed

console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)

VARIANTS: dict[str, dict[str, Any]] = {
    "jwt": {"resume_ttl": 0.0, "coalesce_reads": False},
    "tickets": {"resume_ttl": 300.0, "coalesce_reads": False},
    "tickets+sf": {"resume_ttl": 300.0, "coalesce_reads": True},
}
ROOM = "herd"
SCRIPT_COMMANDS = ("cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha", "cmdstat_eval")


def variant_config(base: Config, name: str) -> Config:
    knobs = VARIANTS[name]
    return dataclasses.replace(
        base,
        auth=dataclasses.replace(base.auth, resume_ttl=knobs["resume_ttl"]),
        realtime=dataclasses.replace(
            base.realtime, workers=1, shed_load=False, coalesce_reads=knobs["coalesce_reads"]
        ),
    )


class Herd:
    def __init__(self, run: Run, clients: int, missed: int) -> None:
        self.run = run
        self.clients = clients
        self.missed = missed
        self.url = run.rideout_url(FANOUT_ZONE)
        self.tokens = [run.token(f"herd-{i}") for i in range(clients)]
        self.since: dict[str, Any] | None = None
        self.files = {}
        for name in VARIANTS:
            path = run.work_dir / f"rideout-{name}.toml"
            path.write_text(dump_toml(variant_config(run.config, name)), encoding="utf-8")
            self.files[name] = path

    async def start(self, variant: str) -> Child:
        name = self.run.name(f"rideout-{variant}")
        argv = [sys.executable, "-m", "rideout", "serve", "--config", str(self.files[variant]),
                "--region", REGION, "--zone", FANOUT_ZONE[0]]  # fmt: skip
        child = await self.run.spawn(Child(name, argv, self.run.logs / f"{name}.log"))
        await wait_for_log(child, "Application startup complete")
        return child

    async def seed(self) -> None:
        """A room with a history: `missed` + 10 bids; the herd replays the last `missed`."""
        server = await self.start("jwt")
        try:
            headers = {"Authorization": f"Bearer {self.run.token('seller')}"}
            async with connect(f"{self.url}/ws", additional_headers=headers) as ws:
                for amount in range(1, self.missed + 11):
                    await ws.send(json.dumps(
                        {"action": "bid", "room": ROOM, "amount": amount, "id": f"seed-{amount}"}
                    ))  # fmt: skip
                    while True:
                        reply = json.loads(await ws.recv())
                        if reply.get("type") == "ack":
                            break
                    if amount == 10:
                        self.since = reply["position"]
        finally:
            await self.run.stop(server)

    def split(self, items: list[str]) -> list[list[str]]:
        workers = len(self.run.clients)
        return [items[i::workers] for i in range(workers)]

    async def round(self, variant: str) -> dict[str, Any]:
        server = await self.start(variant)
        try:
            credentials = self.tokens
            if variant != "jwt":
                held: dict[str, str] = {}
                for _ in range(5):  # a busy machine drops a few: ask again for those
                    missing = [t for t in self.tokens if t not in held]
                    if not missing:
                        break
                    parts = self.split(missing)
                    replies = await asyncio.gather(*(
                        w.call("tickets", url=self.url, tokens=part)
                        for w, part in zip(self.run.clients, parts, strict=True)
                    ))  # fmt: skip
                    for part, reply in zip(parts, replies, strict=True):
                        held.update(
                            (t, k) for t, k in zip(part, reply["tickets"], strict=True) if k
                        )
                credentials = [held[t] for t in self.tokens if t in held]
                if len(credentials) != self.clients:
                    raise RuntimeError(f"{variant}: {len(credentials)} tickets of {self.clients}")
            redis = self.run.redis_client()
            await redis.config_resetstat()
            before = await self.metrics(server)
            cpu = cpu_seconds([server.pid])
            replies = await asyncio.gather(*(
                w.call("herd", url=self.url, credentials=part, room=ROOM, since=self.since)
                for w, part in zip(self.run.clients, self.split(credentials), strict=True)
            ))  # fmt: skip
            cpu = cpu_seconds([server.pid]) - cpu
            stats = await redis.info("commandstats")
            await redis.aclose()
            after = await self.metrics(server)
            await asyncio.gather(*(w.call("close") for w in self.run.clients))
        finally:
            await self.run.stop(server)
        accepted = [t for r in replies for t in r["accepted"]]
        answered = [t for r in replies for t in r["answered"]]
        errors = [e for r in replies for e in r["errors"]]
        scripts = sum(int(stats.get(c, {}).get("calls", 0)) for c in SCRIPT_COMMANDS)
        reads = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in ("redis", "shared", "again")}
        return {
            "accepted": len(accepted),
            "per_second": len(accepted) / max(accepted) if accepted else 0.0,
            "all_answered": max(answered) if answered else float("nan"),
            "answered": len(answered),
            "refused": sum(1 for e in errors if '"throttled"' in e),
            "restored_per_second": len(answered) / max(answered) if answered else 0.0,
            "errors": len(errors),
            "error_samples": errors[:3],
            "cpu_ms": 1000 * cpu / max(1, len(accepted)),
            "scripts": scripts,
            "room_reads": reads["redis"] + reads["again"]
            if variant == "tickets+sf"
            else len(answered),
            "shared": reads["shared"],
        }

    async def metrics(self, server: Child) -> dict[str, float]:
        address, port = FANOUT_ZONE[1], self.run.config.app_port
        async with httpx.AsyncClient(trust_env=False) as http:
            text = (await http.get(f"http://{address}:{port}/metrics", timeout=10)).text
        found: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("rideout_state_reads_total{"):
                how = line.split('how="', 1)[1].split('"', 1)[0]
                found[how] = float(line.rsplit(" ", 1)[1])
        return found


async def main(rounds: int, clients: int, missed: int, keep: bool) -> None:
    work = Path(tempfile.mkdtemp(prefix="rideout-herd-"))
    run = Run(dataclasses.replace(Settings(), client_procs=2), work)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    ratios: dict[str, list[float]] = {name: [] for name in VARIANTS}
    restored: dict[str, list[float]] = {name: [] for name in VARIANTS}
    try:
        await run.start_redis()  # with rideout's function library, as `rideout up`
        await run.start_clients()
        herd = Herd(run, clients, missed)
        await herd.seed()
        for number in range(rounds):
            order = list(VARIANTS) if number % 2 == 0 else list(reversed(VARIANTS))
            this: dict[str, dict[str, Any]] = {}
            for name in order:
                this[name] = await herd.round(name)
                results[name].append(this[name])
                console.print(f"round {number + 1} {name}: {json.dumps(this[name])}")
            for name in VARIANTS:
                ratios[name].append(this[name]["per_second"] / this["jwt"]["per_second"])
                restored[name].append(
                    this[name]["restored_per_second"] / this["jwt"]["restored_per_second"]
                )
    finally:
        await run.close()
    table = Table(title=f"reconnect herd: {clients} clients, one zone process, replay of {missed}")
    for column in ("variant", "accepted/s", "ratio", "restored/s", "ratio", "all restored (s)",
                   "CPU ms/reconnect", "throttled", "Redis scripts", "room reads",
                   "shared"):  # fmt: skip
        table.add_column(column, justify="right")
    for name in VARIANTS:
        rows = results[name]

        def med(key: str, rows: list[dict[str, Any]] = rows) -> float:
            return median([float(r[key]) for r in rows])

        table.add_row(
            name, f"{med('per_second'):,.0f}", f"{median(ratios[name]):.2f}",
            f"{med('restored_per_second'):,.0f}", f"{median(restored[name]):.2f}",
            f"{med('all_answered'):.2f}", f"{med('cpu_ms'):.2f}", f"{med('refused'):.0f}",
            f"{med('scripts'):.0f}", f"{med('room_reads'):.0f}", f"{med('shared'):.0f}",
        )  # fmt: skip
    console.print(table)
    console.print(
        f"nproc {os.cpu_count()}, {platform.python_version()}, load {os.getloadavg()[0]:.1f} "
        f"at the end; {rounds} rounds, medians; ratio: over jwt's, same round"
    )
    console.print(f"core_speed {json.dumps(core_speed())}")
    out = BENCH_ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"herd-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(
        json.dumps({"results": results, "ratios": ratios, "restored": restored}, indent=1)
    )
    console.print(f"written to {path}")
    if not keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    else:
        console.print(f"work directory kept: {work}")


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--missed", type=int, default=20, help="updates each getState replays")
    parser.add_argument("--quick", action="store_true", help="1 round of 300 clients")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.clients = 1, 300
    asyncio.run(main(args.rounds, args.clients, args.missed, args.keep))


if __name__ == "__main__":
    cli()
