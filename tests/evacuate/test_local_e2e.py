"""Evacuating a zone of `rideout up`, end to end: the CLI, the control plane, DNS packets,
resilient clients moving to the region's other zone with no acknowledged bid lost."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dns.asyncquery
import dns.exception
import dns.message
import dns.rdatatype
import pytest
from websockets.asyncio.client import connect

from rideout.auth import SigningKey, TokenIssuer
from rideout.client.resolve import CachingResolver, NameserverResolver
from rideout.client.ws import Acked, AuctionClient, ClientClosed, Connected, Event, QueueFull
from rideout.config import Config, parse_config
from rideout.drill.clients import client_settings
from tests.cluster.conftest import rideout, started
from tests.conftest import until

pytestmark = pytest.mark.slow

AZ1, AZ2 = "127.0.1.1", "127.0.1.2"
CLIENTS = 6


async def resolve(config: Config, name: str | None = None) -> list[str]:
    query = dns.message.make_query(name or config.app_domain, dns.rdatatype.A)
    cp = config.control_plane
    try:
        response = await dns.asyncquery.udp(query, cp.address, port=cp.dns_port, timeout=2)
    except dns.exception.DNSException:
        return []
    return sorted(str(r) for rrset in response.answer for r in rrset)


class Bidder:
    """One resilient client bidding 1, 2, 3 ... in a room of its own; counts its acks."""

    def __init__(self, config: Config, token: str, room: str) -> None:
        self.room = room
        self.address: str | None = None
        self.accepted = 0
        self.highest = 0
        self.client = AuctionClient.from_config(
            config,
            token=token,
            resolver=CachingResolver(
                NameserverResolver(config.control_plane.address, config.control_plane.dns_port)
            ),
            settings=client_settings(config, jitter=True),
            rooms=[room],
            on_event=self.on_event,
        )

    def on_event(self, event: Event) -> None:
        if isinstance(event, Connected):
            self.address = event.address
        elif isinstance(event, Acked) and event.accepted:
            self.accepted += 1
            self.highest = max(self.highest, event.amount)

    async def run(self) -> None:
        amount = 0
        while True:
            await asyncio.sleep(0.1)
            if not self.client.ready or self.client.pending_bids:
                continue
            amount += 1
            with contextlib.suppress(QueueFull, ValueError, ClientClosed):
                await self.client.bid(self.room, amount)


async def room_state(config: Config, token: str, room: str, address: str) -> dict[str, Any]:
    async with connect(f"ws://{address}:{config.app_port}/ws?token={token}", open_timeout=5) as ws:
        await ws.send(json.dumps({"action": "getState", "room": room}))
        while True:
            msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
            if msg["type"] == "state":
                return msg["state"]  # type: ignore[no-any-return]


def cli(workdir: Path, *args: str) -> tuple[int, Any]:
    result = rideout(*args, "-c", "rideout.toml", cwd=workdir, timeout=60)
    try:
        return result.returncode, json.loads(result.stdout)
    except ValueError:
        raise AssertionError(f"{args}: {result.stdout}\n{result.stderr}") from None


def wide_status(workdir: Path) -> str:
    """`rideout status` as a wide terminal shows it."""
    return subprocess.run(
        [sys.executable, "-m", "rideout", "status", "-c", "rideout.toml"],
        cwd=workdir, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "COLUMNS": "250"},
    ).stdout  # fmt: skip


async def test_evacuate_a_zone_and_recover_it(make_workdir: Callable[..., Path]) -> None:
    workdir = make_workdir()
    config = parse_config(
        json.loads(rideout("config", "show", "--json", "-c", "rideout.toml", cwd=workdir).stdout)
    )
    key = SigningKey.load_or_create(config.keys_dir)
    issuer = TokenIssuer(key, config.auth.issuer, config.auth.audience, 3600)
    token = issuer.issue("checker")
    with started(workdir) as up:
        up.wait_ready()
        assert await resolve(config) == [AZ1, AZ2]
        bidders = [Bidder(config, issuer.issue(f"user{i}"), f"evac-{i}") for i in range(CLIENTS)]
        tasks = []
        try:
            for b in bidders:
                b.client.start()
                tasks.append(asyncio.create_task(b.run()))
            await until(lambda: all(b.accepted >= 3 for b in bidders), 60, message="bidding")

            # A dry run plans the change and makes none.
            code, plan = cli(workdir, "evacuate", "--zone-id", "use1-az1", "--dry-run", "--json")
            assert code == 0
            assert [
                (s["resource"], s["after"]) for s in plan["plan"] if s["action"] == "remove"
            ] == [("us-east-1", ["use1-az2"])]
            assert await resolve(config) == [AZ1, AZ2]

            code, outcome = cli(workdir, "evacuate", "--zone-id", "use1-az1", "--json")
            assert code == 0, outcome
            assert [s["resource"] for s in outcome["changed"]] == ["us-east-1"]
            # DNS (the `rideout dns` process, real packets) no longer answers the zone.
            await until(lambda: _answers(config, [AZ2]), 10)
            assert await resolve(config, f"us-east-1.{config.app_domain}") == [AZ2]
            # The zone's clients are drained (1012) and reconnect to the other zone.
            await until(lambda: all(b.address == AZ2 for b in bidders), 60, message="moved")
            counts = {id(b): b.accepted for b in bidders}
            await until(lambda: all(b.accepted > counts[id(b)] + 2 for b in bidders), 60)

            # The region's last zone is refused, and changes nothing.
            code, refused = cli(workdir, "evacuate", "--zone-id", "use1-az2", "--json")
            assert code == 2
            assert "no subnet" in refused["refused"]
            assert await resolve(config) == [AZ2]

            status = json.loads(
                rideout("status", "--json", "-c", "rideout.toml", cwd=workdir).stdout
            )
            zones = {z["name"]: z for r in status["regions"] for z in r["zones"]}
            assert zones["use1-az1"]["evacuation"]["reason"] == "manual"
            assert zones["use1-az2"]["evacuation"] is None
            assert status["dns"]["answer"]["region"] == "us-east-1"
            assert "evacuated (manual" in wide_status(workdir)
            code, ledger = cli(workdir, "evacuate", "list", "--json")
            assert [(r["zone_id"], r["resource"], r["removed"]) for r in ledger] == [
                ("use1-az1", "us-east-1", ["use1-az1"])
            ]

            code, back = cli(workdir, "recover", "--zone-id", "use1-az1", "--json")
            assert code == 0, back
            await until(lambda: _answers(config, [AZ1, AZ2]), 10)
            assert cli(workdir, "evacuate", "list", "--json")[1] == []
            counts = {id(b): b.accepted for b in bidders}
            await until(lambda: all(b.accepted > counts[id(b)] for b in bidders), 60)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # Every bid sent has its ack before the clients stop.
            await until(lambda: not any(b.client.pending_bids for b in bidders), 30)
            await asyncio.gather(*(b.client.stop() for b in bidders), return_exceptions=True)
        # No acknowledged bid lost: every room holds as many bids as its client had acked.
        for b in bidders:
            state = await room_state(config, token, b.room, AZ1)
            assert (state["bids"], state["bid"]) == (b.accepted, b.highest), b.room


async def _answers(config: Config, addresses: list[str]) -> bool:
    return await resolve(config) == addresses
