"""The overload drill's abusers: users with valid tokens who misbehave within their caps.

Each abuser is one user (its own token, issued with the deployment's key) with one
behaviour, taken in turn from :data:`BEHAVIOURS`:

- ``replay``: asks for the whole history of a room again and again (``getState`` since
  its oldest update), waiting only what the server asks (the ``retry-after`` hint);
- ``connect``: opens connections up to its cap and past it, holds them a while, closes
  them and starts again;
- ``bid``: bids in a room of its own as fast as its connection takes them, never waiting
  for an answer;
- ``slow``: watches a busy room and never reads what the server sends.

All of them go straight to the serving region's zones (not through DNS: an attacker picks
its target), alternating between them. What the server made of each attempt is an
:class:`~rideout.drill.records.AbuseRecord`; :func:`run_abusers` is a
:class:`~rideout.drill.clients.ClientFleet` runner, so the abusers run in worker
processes of their own and never starve the drill's own measurements.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from rideout.auth import SigningKey, TokenIssuer
from rideout.config import Config
from rideout.drill.clients import Flag, Sink
from rideout.drill.records import AbuseRecord, DrillRecord
from rideout.store.client import cancel_and_wait

__all__ = ["BEHAVIOURS", "AbuserSpec", "behaviour_of", "run_abusers"]

BEHAVIOURS: Final = ("replay", "connect", "bid", "slow")

_HINT = re.compile(r"retry-after=([0-9.]+)")
_PAUSE: Final = 0.5  # seconds an abuser waits when the server gave no hint


@dataclass(frozen=True, slots=True)
class AbuserSpec:
    """A group of abusers for one worker: ``count`` of them from number ``first``."""

    config: Config
    first: int
    count: int
    prefix: str  # their user names: PREFIX-abuser-N
    history_room: str  # a room with a full history, to replay
    since: dict[str, Any]  # the position of its oldest update
    busy_rooms: tuple[str, ...]  # the ordinary bidders' rooms, for the slow readers
    behaviours: tuple[str, ...] = BEHAVIOURS


def behaviour_of(index: int, behaviours: Sequence[str] = BEHAVIOURS) -> str:
    """The behaviour of abuser number ``index``: each in turn."""
    return behaviours[index % len(behaviours)]


class _Abuser:
    def __init__(self, spec: AbuserSpec, index: int, token: str, out: list[DrillRecord]) -> None:
        config = spec.config
        self.spec = spec
        self.index = index
        self.behaviour = behaviour_of(index, spec.behaviours)
        self.token = token
        self.out = out
        zones = config.primary.zones
        self.url = f"ws://{zones[index % len(zones)].address}:{config.app_port}/ws"
        self.cap = config.realtime.max_connections_per_user

    def record(self, outcome: str) -> None:
        self.out.append(AbuseRecord(self.index, time.time(), self.behaviour, outcome))

    def open(self) -> Any:
        return connect(
            self.url,
            additional_headers={"Authorization": f"Bearer {self.token}"},
            open_timeout=5,
            max_size=None,
            compression=None,
        )

    async def run(self) -> None:
        """Misbehave until cancelled; a refused or closed connection is tried again."""
        act = {"replay": self._replay, "connect": self._connect, "bid": self._bid,
               "slow": self._slow}[self.behaviour]  # fmt: skip
        while True:
            try:
                await act()
            except InvalidStatus as exc:
                self.record(f"refused:{exc.response.status_code}")
            except ConnectionClosed as exc:  # the server's close frame first: its refusal
                by_server = exc.rcvd is not None and exc.rcvd_then_sent
                self.record(f"closed:{exc.rcvd.code}" if by_server and exc.rcvd else "dropped")
            except (OSError, TimeoutError):
                self.record("refused:connect")
            await asyncio.sleep(_PAUSE)

    async def _answer(self, ws: ClientConnection) -> float:
        """Read one reply: record it; the seconds the server asked to wait (0: none)."""
        reply = str(await ws.recv())
        if reply.startswith('{"type":"state"'):  # read no further: it is large
            self.record("served")
            return 0.0
        hint = _HINT.search(reply)
        message = json.loads(reply)
        if message.get("type") == "ack":
            self.record("served" if message.get("accepted") else "refused:rejected")
            return 0.0
        self.record(f"refused:{message.get('code', '?')}" if message.get("code") != "throttled"
                    else "throttled")  # fmt: skip
        return float(hint.group(1)) if hint else _PAUSE

    async def _replay(self) -> None:
        request = json.dumps(
            {"action": "getState", "room": self.spec.history_room, "since": self.spec.since}
        )
        async with self.open() as ws:
            while True:
                await ws.send(request)
                wait = await self._answer(ws)
                if wait:
                    await asyncio.sleep(wait)

    async def _connect(self) -> None:
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(self.cap + 2):
                try:
                    await stack.enter_async_context(self.open())
                except InvalidStatus as exc:
                    self.record(f"refused:{exc.response.status_code}")
                    break
                self.record("served")
            await asyncio.sleep(2.0)

    async def _bid(self) -> None:
        room = f"{self.spec.prefix}-abuse-{self.index}"
        async with self.open() as ws:
            amount = int(time.time() * 1000) % 10**9

            async def answers() -> None:
                while True:
                    await self._answer(ws)

            reader = asyncio.create_task(answers())
            try:
                while not reader.done():
                    amount += 1
                    await ws.send(json.dumps({"action": "bid", "room": room, "amount": amount,
                                              "id": f"a{self.index}-{amount}"}))  # fmt: skip
                    await asyncio.sleep(0.005)  # as fast as a client loop goes, short of a spin
                await reader  # its ConnectionClosed, if that is what ended it
            finally:
                if not reader.done():
                    await cancel_and_wait(reader)

    async def _slow(self) -> None:
        rooms = self.spec.busy_rooms or (self.spec.history_room,)
        async with connect(
            self.url,
            additional_headers={"Authorization": f"Bearer {self.token}"},
            open_timeout=5,
            max_size=None,
            max_queue=1,  # read one message ahead, then let the socket fill
        ) as ws:
            for room in rooms[: self.spec.config.realtime.max_rooms_per_connection]:
                await ws.send(json.dumps({"action": "getState", "room": room}))
            await ws.wait_closed()  # never read: only the server can end this
            # Refused only if the server closed it (its close frame first); a connection
            # that dropped, or that this side closed, says nothing of the server.
            rcvd = ws.protocol.close_rcvd
            by_server = rcvd is not None and ws.protocol.close_rcvd_then_sent
            self.record(f"closed:{rcvd.code}" if by_server and rcvd is not None else "dropped")


async def run_abusers(spec: AbuserSpec, sink: Sink, attacking: Flag, stop: Flag) -> None:
    """Run ``spec``'s abusers while ``attacking`` is set, until ``stop`` is; their
    records go to ``sink`` every 0.1 s. A slow reader never refused is recorded ``held``."""
    config = spec.config
    key = SigningKey.load_or_create(config.keys_dir)
    a = config.auth
    issuer = TokenIssuer(key, a.issuer, a.audience, max(a.token_ttl, 3600.0))
    out: list[DrillRecord] = []
    abusers = [
        _Abuser(spec, i, issuer.issue(f"{spec.prefix}-abuser-{i}"), out)
        for i in range(spec.first, spec.first + spec.count)
    ]
    # The flags are multiprocessing Events (the workers are processes): polled, not awaited.
    while not attacking.is_set() and not stop.is_set():  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    tasks = [asyncio.create_task(abuser.run()) for abuser in abusers]
    try:
        while not stop.is_set():
            if out:
                sink(out[:])
                out.clear()
            await asyncio.sleep(0.1)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for abuser in abusers:
            if abuser.behaviour == "slow":
                abuser.record("held")  # its connection was still open at the end
        if out:
            sink(out[:])
