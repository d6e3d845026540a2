"""A load-generating client process, driven by :class:`bench._harness.ClientWorker`.

It reads one JSON command per line on stdin and answers with one JSON line on stdout
(errors as ``{"error": ...}``). It holds WebSocket connections (``websockets`` asyncio
client, compression off, no client pings) across commands, so several of these
processes together can hold thousands of connections:

``open``       connect `count` more connections (bounded concurrency, a few retries)
``subscribe``  send ``getState`` for a room on every connection and await each reply
``loop``       heartbeat or bid request/response loops on every connection until `end`
``collect``    hand over the receive times of every pushed ``update`` (and forget them)
``close``      close every connection
``ceiling``    drive Redis directly (pipelined EVALSHA of rideout's bid script, with or
               without its age check, INCR, or
               rideout's store layer) until `end`: the Redis client's ceiling
``exit``       stop

Times are ``time.monotonic()`` (CLOCK_MONOTONIC, one clock for every process on Linux),
so the orchestrator can compare a send time with these receive times.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from rideout.protocol import parse_retry_hint

HEARTBEAT = '{"action":"heartbeat"}'
UPDATE_PREFIX = '{"type":"update"'

monotonic = time.monotonic


@dataclass(eq=False, slots=True)
class Conn:
    """One client connection and what its reader has seen."""

    index: int
    ws: ClientConnection
    updates: list[tuple[float, str]] = field(default_factory=list)
    waiter: asyncio.Future[str] | None = None
    reader: asyncio.Task[None] | None = None

    async def read(self) -> None:
        """Record pushed updates with their receive time; hand other replies to `waiter`."""
        try:
            async for raw in self.ws:
                now = monotonic()
                text = raw if isinstance(raw, str) else raw.decode()
                if text.startswith(UPDATE_PREFIX):
                    self.updates.append((now, text))
                elif self.waiter is not None and not self.waiter.done():
                    self.waiter.set_result(text)
        except ConnectionClosed:
            pass


@dataclass
class Client:
    conns: list[Conn] = field(default_factory=list)
    closed_early: int = 0

    # ------------------------------------------------------------------ connections

    async def open(
        self,
        url: str,
        count: int,
        sub_prefix: str,
        auth: dict[str, Any] | None = None,
        concurrency: int = 32,
        listen: bool = False,
    ) -> dict[str, Any]:
        tokens: list[str | None] = [None] * count
        if auth is not None:
            from rideout.auth import SigningKey, TokenIssuer

            key = SigningKey.load_or_create(Path(auth["keys_dir"]))
            issuer = TokenIssuer(key, auth["issuer"], auth["audience"], 3600)
            tokens = [issuer.issue(f"{sub_prefix}{os.getpid()}-{i}") for i in range(count)]
        gate = asyncio.Semaphore(concurrency)
        errors: list[str] = []
        started = monotonic()
        first = len(self.conns)

        async def one(i: int, token: str | None) -> Conn | None:
            target = f"{url}/ws?token={token}" if token is not None else url
            async with gate:
                for attempt in range(6):
                    try:
                        ws = await connect(
                            target,
                            compression=None,
                            open_timeout=30,
                            ping_interval=None,
                            close_timeout=2,
                            max_size=2**20,
                            proxy=None,
                        )
                    except (OSError, TimeoutError, ConnectionClosed) as exc:
                        if attempt == 5:
                            errors.append(f"{type(exc).__name__}: {exc}")
                            return None
                        await asyncio.sleep(0.05 * 2**attempt)
                    except Exception as exc:  # a refused handshake: do not retry
                        errors.append(f"{type(exc).__name__}: {exc}")
                        return None
                    else:
                        return Conn(first + i, ws)
            return None

        opened = await asyncio.gather(*(one(i, t) for i, t in enumerate(tokens)))
        new = [c for c in opened if c is not None]
        if listen:
            for conn in new:
                conn.reader = asyncio.create_task(conn.read())
        self.conns.extend(new)
        return {
            "opened": len(new),
            "failed": count - len(new),
            "errors": errors[:3],
            "seconds": monotonic() - started,
        }

    async def subscribe(
        self, room: str, concurrency: int = 64, timeout: float = 60.0
    ) -> dict[str, Any]:
        message = json.dumps({"action": "getState", "room": room})
        gate = asyncio.Semaphore(concurrency)
        failures: list[str] = []
        started = monotonic()

        async def one(conn: Conn) -> None:
            async with gate:
                conn.waiter = asyncio.get_running_loop().create_future()
                try:
                    await conn.ws.send(message)
                    reply = await asyncio.wait_for(conn.waiter, timeout)
                except (ConnectionClosed, TimeoutError) as exc:
                    failures.append(f"{type(exc).__name__}: {exc}")
                    return
                finally:
                    conn.waiter = None
                if not reply.startswith('{"type":"state"'):
                    failures.append(reply[:200])

        await asyncio.gather(*(one(c) for c in self.conns))
        return {
            "subscribed": len(self.conns) - len(failures),
            "failed": len(failures),
            "errors": failures[:3],
            "seconds": monotonic() - started,
        }

    async def close(self, concurrency: int = 200) -> dict[str, Any]:
        gate = asyncio.Semaphore(concurrency)
        started = monotonic()

        async def one(conn: Conn) -> None:
            async with gate:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.ws.close(), 5)
                if conn.reader is not None:
                    conn.reader.cancel()
                    with contextlib.suppress(BaseException):
                        await conn.reader

        conns, self.conns = self.conns, []
        await asyncio.gather(*(one(c) for c in conns))
        return {"closed": len(conns), "seconds": monotonic() - started}

    # ------------------------------------------------------------------ the herd

    async def tickets(self, url: str, tokens: list[str], concurrency: int = 32) -> dict[str, Any]:
        """A resumption ticket for each token (a connection each, closed after)."""
        gate = asyncio.Semaphore(concurrency)
        request = json.dumps({"action": "ticket"})

        async def one(token: str) -> str | None:
            async with gate:
                try:
                    async with connect(
                        f"{url}/ws", additional_headers={"Authorization": f"Bearer {token}"},
                        compression=None, open_timeout=30, ping_interval=None, proxy=None,
                    ) as ws:  # fmt: skip
                        await ws.send(request)
                        reply = json.loads(await asyncio.wait_for(ws.recv(), 30))
                except Exception:
                    return None
                return reply.get("ticket") if reply.get("type") == "ticket" else None

        got = await asyncio.gather(*(one(t) for t in tokens))
        return {"tickets": got}

    async def herd(
        self,
        url: str,
        credentials: list[str],
        room: str,
        since: dict[str, Any] | None,
        concurrency: int = 64,
        retry: bool = True,
    ) -> dict[str, Any]:
        """Every credential reconnects at once (`concurrency` handshakes in flight), and
        each connection sends getState (from `since`) as soon as it is open: when each
        was accepted and answered (seconds from the start), and what went wrong. A
        getState refused with a retry hint (the replay gate) is sent again after it."""
        gate = asyncio.Semaphore(concurrency)
        message = {"action": "getState", "room": room}
        if since is not None:
            message["since"] = since
        request = json.dumps(message)
        accepted: list[float] = []
        answered: list[float] = []
        errors: list[str] = []
        start = monotonic()

        async def one(credential: str) -> None:
            async with gate:
                try:
                    ws = await connect(
                        f"{url}/ws", additional_headers={"Authorization": f"Bearer {credential}"},
                        compression=None, open_timeout=60, ping_interval=None, close_timeout=2,
                        max_size=2**22, proxy=None,
                    )  # fmt: skip
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])
                    return
            accepted.append(monotonic() - start)
            try:
                await ws.send(request)
                while True:
                    text = await asyncio.wait_for(ws.recv(), 60)
                    if isinstance(text, str) and text.startswith('{"type":"state"'):
                        answered.append(monotonic() - start)
                        break
                    if isinstance(text, str) and text.startswith('{"type":"error"'):
                        errors.append(text[:200])
                        hint = parse_retry_hint(json.loads(text).get("message"))
                        if not retry or hint is None:
                            break
                        await asyncio.sleep(
                            hint * (0.5 + random.random() / 2)
                        )  # as rideout's client
                        await ws.send(request)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}"[:200])
            finally:
                self.conns.append(Conn(len(self.conns), ws))

        await asyncio.gather(*(one(c) for c in credentials))
        return {"accepted": accepted, "answered": answered, "errors": errors}

    def collect(self) -> dict[str, Any]:
        """Every update received so far as [receive time, amount], then forget them."""
        updates: list[tuple[float, int]] = []
        for conn in self.conns:
            for t, text in conn.updates:
                updates.append((t, int(json.loads(text)["state"]["bid"])))
            conn.updates.clear()
        alive = sum(1 for c in self.conns if c.reader is None or not c.reader.done())
        return {"updates": updates, "conns": len(self.conns), "alive": alive}

    # ------------------------------------------------------------------ loops

    async def loop(
        self, kind: str, start: float, end: float, room_prefix: str = "room"
    ) -> dict[str, Any]:
        """Request/response on every connection until `end`; count replies in [start, end]."""
        stats: dict[str, Any] = {"count": 0, "accepted": 0, "rejected": 0, "errors": 0}
        samples: list[str] = []
        rtts: list[float] = []

        async def heartbeat(conn: Conn) -> None:
            ws = conn.ws
            while (t0 := monotonic()) < end:
                await ws.send(HEARTBEAT)
                reply = await ws.recv()
                t1 = monotonic()
                if reply != "pong":
                    stats["errors"] += 1
                    if len(samples) < 3:
                        samples.append(str(reply)[:200])
                elif start <= t1 <= end:
                    stats["count"] += 1
                    rtts.append(t1 - t0)

        async def bid(conn: Conn) -> None:
            ws = conn.ws
            room = f"{room_prefix}-{os.getpid()}-{conn.index}"
            amount = 0
            while (t0 := monotonic()) < end:
                amount += 1
                await ws.send(
                    f'{{"action":"bid","room":"{room}","amount":{amount},"id":"b{amount}"}}'
                )
                reply = await ws.recv()
                t1 = monotonic()
                text = reply if isinstance(reply, str) else reply.decode()
                inside = start <= t1 <= end
                if '"accepted":true' in text:
                    if inside:
                        stats["accepted"] += 1
                        stats["count"] += 1
                        rtts.append(t1 - t0)
                elif text.startswith('{"type":"ack"'):
                    stats["rejected"] += int(inside)
                else:
                    stats["errors"] += 1
                    if len(samples) < 3:
                        samples.append(text[:200])

        run: Callable[[Conn], Awaitable[None]] = heartbeat if kind == "heartbeat" else bid
        results = await asyncio.gather(*(run(c) for c in self.conns), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        stats["failed_conns"] = len(failed)
        stats["samples"] = samples + [repr(f)[:200] for f in failed[:3]]
        stats["rtts"] = rtts
        return stats

    async def ceiling(
        self,
        host: str,
        port: int,
        keys_dir: str,
        username: str,
        password: str,
        mode: str,
        start: float,
        end: float,
        tasks: int = 4,
        batch: int = 16,
        prefix: str = "ceiling",
        rooms: int = 64,
    ) -> dict[str, Any]:
        """Drive Redis from this process alone; count successes in [start, end].

        Bids go round-robin to `rooms` rooms (split between the tasks), one bidder per
        room, like the WebSocket load's one room per connection: the bid script's cost
        grows with the length of a room's stream, so both loads should spread alike.
        """
        import redis.asyncio as aioredis

        from rideout.store import keys, scripts
        from rideout.store.acl import RedisRole, load_credentials
        from rideout.store.auction import AuctionSettings, AuctionStore, bid_call
        from rideout.store.client import state_client

        counted = [0]
        if mode == "store":  # rideout's own store layer and user, one bid per round trip
            app = load_credentials(Path(keys_dir), RedisRole.APP)
            client = state_client(host, port, credentials=app, max_connections=tasks)
        else:  # the references, as the benchmark's own user (its keys, INCR)
            client = aioredis.Redis(
                host=host, port=port, decode_responses=True, username=username, password=password
            )
        try:
            epoch = int(await client.get(keys.EPOCH) or 0)
            # The references run the bid script by hand as the benchmark's user; rideout's
            # app user may not load scripts on 7.0+ (it calls the function library).
            sha = "" if mode == "store" else await client.script_load(scripts.BID)
            store = AuctionStore(client, AuctionSettings(), "bench")
            # "noage": the same script with the age-based trim disabled (a history_ttl
            # longer than the epoch makes the cut-off negative, so XREVRANGE is skipped).
            settings = AuctionSettings(
                min_bid=1, max_bid=1_000_000_000, min_increment=1, history_size=1000,
                history_ttl=1e10 if mode == "noage" else 3600.0, ack_ttl=86400.0,
            )  # fmt: skip

            def bid_args(room: str, sub: str, amount: int) -> tuple[int, list[str]]:
                """EVALSHA's arguments after the SHA: the number of keys, then keys and ARGV."""
                script_keys, script_args = bid_call(
                    room, sub, amount, f"b{amount}", epoch, settings
                )
                return len(script_keys), [*script_keys, *script_args]

            async def pipelined(task: int) -> None:
                mine = [f"{prefix}-{os.getpid()}-{task}-{k}" for k in range(max(1, rooms // tasks))]
                amounts = [0] * len(mine)
                turn = 0
                while monotonic() < end:
                    pipe = client.pipeline(transaction=False)
                    for _ in range(batch):
                        if mode == "incr":
                            pipe.incr(f"{prefix}:counter:{task}")
                        else:
                            k = turn = (turn + 1) % len(mine)
                            amounts[k] += 1
                            numkeys, rest = bid_args(mine[k], f"u{mine[k]}", amounts[k])
                            pipe.evalsha(sha, numkeys, *rest)
                    replies = await pipe.execute()
                    if start <= monotonic() <= end:
                        if mode == "incr":
                            counted[0] += len(replies)
                        else:
                            counted[0] += sum('"accepted":true' in r[1] for r in replies)

            async def single(task: int) -> None:
                room = f"{prefix}-{os.getpid()}-{task}"
                sub = f"{prefix}-sub-{os.getpid()}-{task}"
                amount = 0
                while monotonic() < end:
                    amount += 1
                    result = await store.bid(room, sub, amount, f"b{amount}", epoch=epoch)
                    if result.accepted and start <= monotonic() <= end:
                        counted[0] += 1

            worker = single if mode == "store" else pipelined
            await asyncio.gather(*(worker(t) for t in range(tasks)))
        finally:
            await client.aclose()
        return {"count": counted[0]}


async def serve(use_uvloop: bool) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout

    def reply(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj, separators=(",", ":")) + "\n")
        out.flush()

    client = Client()
    reply({"ready": True, "pid": os.getpid(), "uvloop": use_uvloop})
    try:
        while line := await reader.readline():
            args = json.loads(line)
            cmd = args.pop("cmd")
            if cmd == "exit":
                break
            try:
                if cmd == "collect":
                    result = client.collect()
                else:
                    result = await getattr(client, cmd)(**args)
            except Exception as exc:
                result = {"error": f"{type(exc).__name__}: {exc}"}
            reply(result)
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--no-uvloop", action="store_true", help="use asyncio's own loop")
    args = parser.parse_args()
    if args.no_uvloop:
        asyncio.run(serve(False))
    else:
        import uvloop

        uvloop.run(serve(True))


if __name__ == "__main__":
    main()
