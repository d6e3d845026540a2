"""What the partition drill runs *inside* the lab's hosts (``python -m
rideout.drill.partition_agent COMMAND``): the caller's namespace cannot reach a lab
address, and a client must sit on one side of a partition to see what that side sees.

- ``bid``: N bidding clients (rideout's own :class:`~rideout.client.ws.AuctionClient`,
  resolving the app's name at the control plane's DNS as any client does), one room
  each, each bidding the next amount in turn; every attempt is one JSON line (a
  :class:`~rideout.drill.partition_check.BidAttempt`), written as it ends. SIGTERM lets
  each client finish the bid it is waiting for, so no attempt goes unrecorded. With
  ``--restores PATH``, each time a client's room state is restored (a
  :class:`~rideout.client.ws.StateRestored` event: after every connect) is one line
  there too: ``client``, ``restored`` (wall clock), ``region``.
- ``poll``: the control planes' ``/v1/summary`` every interval, one JSON line each:
  writer, epoch, DNS answer, ``lost_writes``, moves, alarms, evacuated zones, until
  SIGTERM.
- ``read``: every Redis of the deployment as the monitor user over TLS: its role, its
  epoch and the drill's rooms' histories, as one JSON document.

Lines are flushed one by one: what was written before a SIGKILL is kept.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from pathlib import Path
from typing import IO, Any

from rideout._signals import stop_on_signals

# The agent runs until the drill stops it (SIGTERM), or Ctrl-C when run by hand.
_AGENT_STOP = (signal.SIGTERM, signal.SIGINT)

__all__ = ["main"]

BID_TIMEOUT = 8.0
"""Seconds a client waits for one bid's ack before calling its outcome unknown."""


def _line(out: IO[str], data: dict[str, Any]) -> None:
    out.write(json.dumps(data, separators=(",", ":")) + "\n")
    out.flush()


# ------------------------------------------------------------------------------ bid


async def _record_restores(events: Any, bidder: str, out: IO[str]) -> None:
    from rideout.client.ws import StateRestored

    async for event in events:
        if isinstance(event, StateRestored):
            _line(out, {"client": bidder, "restored": time.time(), "region": event.region})


async def _bidder(index: int, args: argparse.Namespace, out: IO[str], stop: asyncio.Event,
                  restores: IO[str] | None = None) -> None:  # fmt: skip
    from rideout.auth import SigningKey, TokenIssuer
    from rideout.client.resolve import CachingResolver, NameserverResolver
    from rideout.client.ws import AuctionClient, ClientSettings
    from rideout.config import load_config

    config = load_config(Path(args.config), env={})
    key = SigningKey.load_or_create(config.keys_dir)
    issuer = TokenIssuer(key, config.auth.issuer, config.auth.audience, 600.0)
    bidder = f"{args.prefix}-{index}"
    room = f"{args.prefix}-room-{index}"
    resolver = CachingResolver(NameserverResolver(args.dns, args.dns_port, timeout=2.0))
    client = AuctionClient(
        config.app_domain,
        port=config.app_port,
        token=lambda: issuer.issue(bidder),
        resolver=resolver,
        rooms=[room],
        settings=ClientSettings.from_config(config),
    )
    # The events before the client starts: the first restore is one of them.
    watch = None if restores is None else asyncio.ensure_future(
        _record_restores(client.events(), bidder, restores))  # fmt: skip
    try:
        async with client:
            amount = config.realtime.min_bid
            with contextlib.suppress(TimeoutError):
                await client.wait_ready(30)
            while not stop.is_set():
                _line(out, await _attempt(client, bidder, room, amount))
                amount += config.realtime.min_increment
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), args.interval)
    finally:
        if watch is not None:
            watch.cancel()


async def _attempt(client: Any, bidder: str, room: str, amount: int) -> dict[str, Any]:
    """One bid and what came of it, as one record."""
    record: dict[str, Any] = {"client": bidder, "room": room, "bidder": bidder,
                              "amount": amount, "sent": time.time()}  # fmt: skip
    try:
        acked = await client.bid_and_wait(room, amount, timeout=BID_TIMEOUT)
    except TimeoutError:
        record.update(acked=None, accepted=None, reason="timeout")
    except Exception as exc:  # the client stopped: the outcome is unknown
        record.update(acked=None, accepted=None, reason=type(exc).__name__)
    else:
        decided = acked.position is not None  # an error code ends it unpositioned
        record.update(
            acked=time.time() if decided else None,
            accepted=acked.accepted if decided else None,
            reason=acked.reason,
            region=acked.region,
            epoch=acked.position.epoch if acked.position else None,
            offset=acked.position.offset if acked.position else None,
        )
    return record


async def _bid(args: argparse.Namespace, out: IO[str], restores: IO[str] | None) -> None:
    with stop_on_signals(_AGENT_STOP) as stop:
        await asyncio.gather(*(_bidder(i, args, out, stop.event, restores)
                               for i in range(args.clients)))  # fmt: skip


# ------------------------------------------------------------------------------ poll


def _acting(body: dict[str, Any]) -> bool | None:
    """Whether this control plane holds the lease (None: it does not say)."""
    role = (body.get("lease") or {}).get("role")
    return None if role is None else role == "active"


def _row(body: dict[str, Any]) -> dict[str, Any]:
    failover = body.get("failover") or {}
    return {
        "writer": failover.get("writer"),
        "writer_redis": failover.get("writer_redis"),
        "acting": _acting(body),
        "replication": failover.get("replication"),
        "epoch": failover.get("epoch"),
        "dns": (body.get("dns") or {}).get("region"),
        "lost_writes": failover.get("lost_writes"),
        "failovers": failover.get("failovers"),
        "failbacks": failover.get("failbacks"),
        "alarms": {k: (v or {}).get("state") for k, v in (body.get("alarms") or {}).items()},
        "evacuated": sorted(z["zone"] for z in body.get("zones") or [] if z.get("evacuated")),
        "events": [
            f"{e.get('kind')}: {e.get('message')}" for e in (failover.get("events") or [])[-3:]
        ],
    }


async def _poll(args: argparse.Namespace, out: IO[str]) -> None:
    with stop_on_signals(_AGENT_STOP) as request:
        await _poll_until(args, out, request.event)


async def _poll_until(args: argparse.Namespace, out: IO[str], stop: asyncio.Event) -> None:
    import httpx

    from rideout import _http

    async with _http.async_client(timeout=args.interval * 4) as http:
        while not stop.is_set():
            for url in args.urls.split(","):
                row: dict[str, Any] = {"t": time.time(), "cp": url}
                try:
                    response = await http.get(url + "/v1/summary")
                    row.update(status=response.status_code, **_row(response.json()))
                except (httpx.HTTPError, ValueError) as exc:
                    row.update(status=None, error=type(exc).__name__)
                _line(out, row)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), args.interval)


# ------------------------------------------------------------------------------ read


async def _read(args: argparse.Namespace) -> dict[str, Any]:
    from rideout.config import load_config
    from rideout.failover.topology import nodes
    from rideout.store.acl import RedisRole, credentials_for
    from rideout.store.client import probe_client
    from rideout.store.keys import room_stream
    from rideout.store.replication import read_epoch, replication_status

    config = load_config(Path(args.config), env={})
    credentials = credentials_for(config, RedisRole.MONITOR)
    rooms = [r for r in args.rooms.split(",") if r]
    found: dict[str, Any] = {}
    for key, node in nodes(config).items():
        client = probe_client(node.address, node.port, credentials=credentials, timeout=3.0,
                              tls=config.region(node.region).redis.tls)  # fmt: skip
        view: dict[str, Any] = {"address": node.address}
        try:
            status = await replication_status(client)
            view.update(reachable=status.reachable, role=status.role, master=status.master,
                        epoch=await read_epoch(client))  # fmt: skip
            entries = []
            for room in rooms:
                found_entries: Any = await client.xrange(room_stream(room), "-", "+")
                for entry_id, fields in found_entries or []:
                    entries.append([room, str(entry_id), dict(fields or {})])
            view["entries"] = entries
        except Exception as exc:  # unreachable, refused: said, not raised
            view.update(error=f"{type(exc).__name__}: {exc}")
        finally:
            await client.aclose()
        found[key] = view
    return found


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m rideout.drill.partition_agent")
    sub = parser.add_subparsers(dest="command", required=True)
    bid = sub.add_parser("bid")
    bid.add_argument("--config", required=True)
    bid.add_argument("--dns", required=True)
    bid.add_argument("--dns-port", type=int, required=True)
    bid.add_argument("--clients", type=int, required=True)
    bid.add_argument("--prefix", required=True)
    bid.add_argument("--interval", type=float, default=0.2)
    bid.add_argument("--restores", default=None)
    bid.add_argument("--out", required=True)
    poll = sub.add_parser("poll")
    poll.add_argument("--urls", required=True)
    poll.add_argument("--interval", type=float, default=0.25)
    poll.add_argument("--out", required=True)
    read = sub.add_parser("read")
    read.add_argument("--config", required=True)
    read.add_argument("--rooms", required=True)
    read.add_argument("--out", required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "read":
        found = asyncio.run(_read(args))
        Path(args.out).write_text(json.dumps(found) + "\n", encoding="utf-8")
        return 0
    with contextlib.ExitStack() as files:
        out = files.enter_context(open(args.out, "a", encoding="utf-8"))
        if args.command == "poll":
            asyncio.run(_poll(args, out))
            return 0
        restores = None
        if args.restores is not None:
            restores = files.enter_context(open(args.restores, "a", encoding="utf-8"))
        asyncio.run(_bid(args, out, restores))
    return 0


if __name__ == "__main__":
    sys.exit(main())
