"""Helpers of the evacuation end-to-end tests: DNS packets, bidding clients, the CLI."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import dns.asyncquery
import dns.exception
import dns.message
import dns.rdatatype
from websockets.asyncio.client import connect

from rideout.client.resolve import CachingResolver, NameserverResolver
from rideout.client.ws import Acked, AuctionClient, ClientClosed, Connected, Event, QueueFull
from rideout.config import Config
from rideout.drill.clients import client_settings
from tests.cluster.conftest import rideout
from tests.cluster.test_failover_e2e import answer

AZ1, AZ2 = "127.0.1.1", "127.0.1.2"
CLIENTS = 6


async def resolve(config: Config, name: str | None = None) -> list[str]:
    """The name's addresses (a query that times out is asked again); [] without one."""
    try:
        return await answer(config, name)
    except dns.exception.DNSException:
        return []


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


async def answers(config: Config, addresses: list[str]) -> bool:
    return await resolve(config) == addresses


async def stop_bidders(bidders: list[Bidder], tasks: list[asyncio.Task[None]]) -> None:
    """Stop bidding, wait for every sent bid's ack, stop the clients."""
    from tests.conftest import until

    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await until(lambda: not any(b.client.pending_bids for b in bidders), 30)
    await asyncio.gather(*(b.client.stop() for b in bidders), return_exceptions=True)


async def assert_no_acked_bid_lost(
    config: Config, token: str, bidders: list[Bidder], address: str
) -> None:
    """Every room holds as many bids as its client had acknowledged, the highest last."""
    for b in bidders:
        state = await room_state(config, token, b.room, address)
        assert (state["bids"], state["bid"]) == (b.accepted, b.highest), b.room


async def start_bidders(
    config: Config, issuer: Any, prefix: str
) -> tuple[list[Bidder], list[asyncio.Task[None]]]:
    """CLIENTS bidders, started, each with three bids acknowledged."""
    from tests.conftest import until

    bidders = [Bidder(config, issuer.issue(f"user{i}"), f"{prefix}-{i}") for i in range(CLIENTS)]
    tasks = []
    for b in bidders:
        b.client.start()
        tasks.append(asyncio.create_task(b.run()))
    await until(lambda: all(b.accepted >= 3 for b in bidders), 60, message="bidding")
    return bidders, tasks
