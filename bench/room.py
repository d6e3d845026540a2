"""Waiting-room benchmark: token sets/s against AWS's design, and the room's HTTP paths
against a trivial endpoint of the same app server.

    .venv/bin/python -m bench.room            # full run (~2 minutes on 2 cores)
    .venv/bin/python -m bench.room --quick    # smoke run (~30 s)
    .venv/bin/python -m bench.room --only tokens   # part 1 only, in-process

1. **Token sets/s**, in this process, rounds alternating the order: rideout's
   :class:`~rideout.auth.room_tokens.RoomTokenIssuer` with its key ring loaded once
   (EdDSA, the default; and RS256, to separate the algorithm from the key load) against
   AWS's design: three RS256 (2048-bit) JWTs per set, the private key parsed from its
   stored JWK on every call (AWS's ``generate_token`` reads it from Secrets Manager each
   time; the network fetch is left out here, so AWS's figure is an upper bound; the key
   is validated on load, cryptography's default, which with OpenSSL 3 is most of the cost).
   Also AWS's design with an unchecked key load, a floor no real deployment reaches.
   Goal: rideout EdDSA / AWS >= 10.
2. **HTTP requests/s** through one real ``rideout serve`` process (uvicorn, loopback,
   real Redis) with the waiting room mounted (its event with ``abandon_after`` 300 s,
   so polls do touch the abandonment clock): ``POST /assign_queue_num`` (a new
   position each), ``GET /queue_num``, ``GET /serving_num``, ``POST /generate_token``
   (a served request's set, signed each call) against ``GET /config.json`` of the same
   app (no Redis, a small JSON). ``queue_num`` is polled as a room's visitors poll it:
   over many positions (5,000; 2,000 with ``--quick``), round-robin, so each is polled
   every few seconds (the room page's backoff is 1-8 s), after one warm-up pass (an
   arrival's first poll, amortised over its wait); the position cache's hit share and
   Redis round trips per poll are read from the server's ``/metrics``. The same polls
   go to a second process of the same deployment with ``position_cache_size = 0`` (every
   poll reads Redis). Each row is measured right next to the trivial endpoint of the
   same server (the pair's order alternating by round) and its ratio is the median of
   those per-round ratios, since the shared machine's load moves from one slice to the
   next; the server's and Redis's CPU per request is shown beside it. The client is a
   minimal keep-alive HTTP/1.1 loop on raw asyncio streams (16 connections), so it
   costs far less than the server. Goal: the polled paths (``queue_num``,
   ``serving_num``) >= 0.6 of the trivial endpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import math
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from time import monotonic
from typing import Any

from jwt.algorithms import RSAAlgorithm

from bench._harness import cpu_seconds, median
from bench.realtime import FANOUT_ZONE, HEARTBEAT_ZONE, Run, Settings
from rideout.auth.room_tokens import RoomKeyRing, RoomTokenIssuer
from rideout.config import Config, dump_toml
from rideout.waitingroom.poll_cache import touch_interval

EVENT = "bench"
AWS = "AWS design (RS256, JWK key load per set)"
FLOOR = "AWS design, unchecked key load (a floor)"
_LENGTH = re.compile(rb"content-length:\s*(\d+)", re.IGNORECASE)


# --------------------------------------------------------------------------- 1. tokens


def aws_private_jwk() -> str:
    """An RS256 private JWK as AWS stores it in Secrets Manager (JSON text)."""
    ring = RoomKeyRing.generate("RS256")
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    key = load_pem_private_key(ring.current.to_pem(), password=None)
    jwk: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(key))
    jwk.update({"alg": "RS256", "kid": "aws-style-kid"})
    return json.dumps(jwk)


def aws_token_set(stored_jwk: str, claims: dict[str, Any]) -> tuple[str, str, str]:
    """AWS's generate_token: load the private key, then sign three tokens with it."""
    import jwt

    key = RSAAlgorithm.from_jwk(stored_jwk)  # parsed (and checked) on every call
    headers = {"kid": "aws-style-kid"}
    tokens = [
        jwt.encode({**claims, "token_use": use}, key, algorithm="RS256", headers=headers)
        for use in ("access", "refresh", "id")
    ]
    return tokens[0], tokens[1], tokens[2]


def aws_token_set_unchecked(stored_pem: bytes, claims: dict[str, Any]) -> tuple[str, str, str]:
    """AWS's design with the cheapest possible key load (no RSA key validation): a
    floor for its cost, for comparison (cryptography validates a key by default)."""
    import jwt
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    key = load_pem_private_key(stored_pem, None, unsafe_skip_rsa_key_validation=True)
    headers = {"kid": "aws-style-kid"}
    tokens = [
        jwt.encode({**claims, "token_use": use}, key, algorithm="RS256", headers=headers)  # type: ignore[arg-type]
        for use in ("access", "refresh", "id")
    ]
    return tokens[0], tokens[1], tokens[2]


def rate(work: Callable[[], object], seconds: float) -> float:
    """Calls of `work` per second over about `seconds`."""
    work()  # warm
    count, start = 0, time.perf_counter()
    deadline = start + seconds
    while (now := time.perf_counter()) < deadline:
        work()
        count += 1
    return count / (now - start)


def measure_tokens(rounds: int, seconds: float) -> dict[str, list[float]]:
    now = math.floor(time.time())
    claims = {
        "aud": EVENT, "sub": "1f0c2a9e-6b1d-4c3f-9a2e-0d4b5c6e7f80", "queue_position": 42,
        "iat": now, "nbf": now, "exp": now + 3600, "iss": "https://room.bench",
    }  # fmt: skip
    issue = {
        "event_id": EVENT, "request_id": claims["sub"], "queue_position": 42,
        "issued_at": now, "expires_at": now + 3600,
    }  # fmt: skip
    eddsa = RoomTokenIssuer(RoomKeyRing.generate("EdDSA"), issuer="https://room.bench")
    rs256 = RoomTokenIssuer(RoomKeyRing.generate("RS256"), issuer="https://room.bench")
    stored = aws_private_jwk()
    stored_pem = RoomKeyRing.generate("RS256").current.to_pem()
    runs: dict[str, Callable[[], object]] = {
        "rideout EdDSA": lambda: eddsa.issue(**issue),
        "rideout RS256": lambda: rs256.issue(**issue),
        AWS: lambda: aws_token_set(stored, claims),
        FLOOR: lambda: aws_token_set_unchecked(stored_pem, claims),
    }
    results: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(rounds):
        order = list(runs) if round_ % 2 == 0 else list(reversed(runs))
        for name in order:
            results[name].append(rate(runs[name], seconds))
    return results


# --------------------------------------------------------------------------- 2. HTTP


ABANDON_AFTER = 300.0  # Cloudflare's hold: polls touch the clock every 30 s
TRIVIAL = "GET /config.json (trivial)"
QUEUE_NUM = "GET /queue_num"
UNCACHED = "position_cache_size = 0"


class RoomRun(Run):
    """bench.realtime's processes, with the waiting room on and its inlet off."""

    def _make_config(self) -> Config:
        config = super()._make_config()
        return dataclasses.replace(
            config,
            realtime=dataclasses.replace(config.realtime, workers=1),
            waitingroom=dataclasses.replace(
                config.waitingroom, inlet="none", events=(EVENT,), abandon_after=ABANDON_AFTER
            ),
        )

    async def start_uncached(self, zone: tuple[str, str]) -> int:
        """One more process of the deployment, in `zone`, with the position cache off."""
        config = dataclasses.replace(
            self.config,
            waitingroom=dataclasses.replace(self.config.waitingroom, position_cache_size=0),
        )
        main, self.config_file = self.config_file, self.work_dir / "uncached.toml"
        self.config_file.write_text(dump_toml(config), encoding="utf-8")
        try:
            return (await self.start_rideout(zone, 1))[0].pid
        finally:
            self.config_file = main


async def exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, bytes]:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    found = _LENGTH.search(head)
    body = await reader.readexactly(int(found.group(1))) if found else b""
    return int(head[9:12]), body


def http_request(method: str, path: str, body: dict[str, Any] | None = None) -> bytes:
    payload = json.dumps(body).encode() if body is not None else b""
    lines = [f"{method} {path} HTTP/1.1", "Host: bench", "Accept: application/json"]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


async def hammer(
    host: str, port: int, request: bytes | Iterator[bytes], seconds: float, connections: int
) -> tuple[float, int, int]:
    """Requests/s over `connections` keep-alive connections, how many were not 2xx, and
    how many were sent.
    `request`: the same request every time, or the next of an iterator (shared by the
    connections: round-robin over many request ids)."""
    deadline = monotonic() + seconds
    counts = [0] * connections
    errors = [0] * connections
    requests = itertools.repeat(request) if isinstance(request, bytes) else request

    async def loop(index: int) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while monotonic() < deadline:
                status, _ = await exchange(reader, writer, next(requests))
                counts[index] += 1
                if not 200 <= status < 300:
                    errors[index] += 1
        finally:
            writer.close()

    start = monotonic()
    await asyncio.gather(*(loop(i) for i in range(connections)))
    return sum(counts) / (monotonic() - start), sum(errors), sum(counts)


async def one(host: str, port: int, request: bytes) -> dict[str, Any]:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        status, body = await exchange(reader, writer, request)
    finally:
        writer.close()
    if status >= 300:
        raise RuntimeError(f"HTTP {status}: {body[:200]!r}")
    return dict(json.loads(body))


async def send_all(
    host: str, port: int, requests: list[bytes], connections: int
) -> list[dict[str, Any]]:
    """Each request once, over `connections` connections; the answers (each must be 200)."""
    pending = iter(requests)
    answers: list[dict[str, Any]] = []

    async def loop() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            for request in pending:
                status, body = await exchange(reader, writer, request)
                if status != 200:
                    raise RuntimeError(f"HTTP {status}: {body[:200]!r}")
                answers.append(json.loads(body))
        finally:
            writer.close()

    await asyncio.gather(*(loop() for _ in range(connections)))
    return answers


def metric(text: str, name: str) -> float:
    """A counter's value in a Prometheus exposition (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def position_counters(host: str, port: int) -> tuple[float, float, float]:
    """The server's queue_num polls, loads from Redis and separate touches so far."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        _, body = await exchange(reader, writer, http_request("GET", "/metrics"))
    finally:
        writer.close()
    text = body.decode()
    names = ("polls", "loads", "touches")
    p, lo, t = (metric(text, f"rideout_room_position_{n}_total") for n in names)
    return p, lo, t


async def measure_http(
    work_dir: Path, rounds: int, seconds: float, connections: int, positions: int
) -> dict[str, Any]:
    run = RoomRun(Settings(), work_dir)
    try:
        await run.start_redis()
        cached_pid = (await run.start_rideout(HEARTBEAT_ZONE, 1))[0].pid
        uncached_pid = await run.start_uncached(FANOUT_ZONE)
        assert run.redis is not None
        host, port = HEARTBEAT_ZONE[1], run.config.app_port
        other = FANOUT_ZONE[1]
        admin = (run.config.keys_dir / "admin-token").read_text().strip()
        # A served request, for generate_token; then the positions that poll.
        assigned = await one(
            host, port, http_request("POST", "/assign_queue_num", {"event_id": EVENT})
        )
        request_id = assigned["api_request_id"]
        bump = http_request(
            "POST", "/private/increment_serving_counter", {"event_id": EVENT, "increment_by": 1}
        ).replace(b"Host: bench", f"Host: bench\r\nAuthorization: Bearer {admin}".encode())
        await one(host, port, bump)
        assign = http_request("POST", "/assign_queue_num", {"event_id": EVENT})
        polls = [
            http_request("GET", f"/queue_num?event_id={EVENT}&request_id={a['api_request_id']}")
            for a in await send_all(host, port, [assign] * positions, connections)
        ]
        for server in (host, other):  # each arrival's first poll, before the rounds
            await send_all(server, port, polls, connections)
        trivial = http_request("GET", "/config.json")
        # name: (server, its pid, request(s)); each measured right next to the trivial
        # endpoint of the same server, the pair's order alternating by round
        cases: dict[str, tuple[str, int, bytes | Iterator[bytes]]] = {
            "GET /serving_num": (host, cached_pid, http_request("GET", f"/serving_num?event_id={EVENT}")),
            QUEUE_NUM: (host, cached_pid, itertools.cycle(polls)),
            f"{QUEUE_NUM}, {UNCACHED}": (other, uncached_pid, itertools.cycle(polls)),
            "POST /assign_queue_num": (host, cached_pid, assign),
            "POST /generate_token": (
                host, cached_pid,
                http_request("POST", "/generate_token", {"event_id": EVENT, "request_id": request_id}),
            ),
        }  # fmt: skip
        redis_pid = run.redis.pid
        rates: dict[str, list[float]] = {name: [] for name in [TRIVIAL, *cases]}
        ratios: dict[str, list[float]] = {name: [] for name in cases}
        cpu: dict[str, list[float]] = {name: [] for name in [TRIVIAL, *cases]}
        cpu_ratios: dict[str, list[float]] = {name: [] for name in cases}
        errors: dict[str, int] = dict.fromkeys(rates, 0)

        async def slice_(
            server: str, pid: int, request: bytes | Iterator[bytes]
        ) -> tuple[float, float, int]:
            used = cpu_seconds([pid, redis_pid])
            per_second, failed, sent = await hammer(server, port, request, seconds, connections)
            return per_second, (cpu_seconds([pid, redis_pid]) - used) / max(1, sent), failed

        for server in (host, other):  # warm
            await hammer(server, port, trivial, 1.0, connections)
        before = await position_counters(host, port)
        for round_ in range(rounds):
            order = list(cases) if round_ % 2 == 0 else list(reversed(cases))
            for name in order:
                server, pid, request = cases[name]
                pair = [(TRIVIAL, trivial), (name, request)]
                measured = {}
                for label, what in pair if round_ % 2 == 0 else reversed(pair):
                    measured[label] = await slice_(server, pid, what)
                    errors[label] += measured[label][2]
                (base, base_cpu, _), (rate, per, _) = measured[TRIVIAL], measured[name]
                rates[TRIVIAL].append(base)
                cpu[TRIVIAL].append(base_cpu)
                rates[name].append(rate)
                cpu[name].append(per)
                ratios[name].append(rate / base)
                cpu_ratios[name].append(base_cpu / per if per else math.inf)
        after = await position_counters(host, port)
        p, lo, t = (a - b for a, b in zip(after, before, strict=True))
        return {
            "rates": rates, "ratios": ratios, "cpu": cpu, "cpu_ratios": cpu_ratios,
            "errors": errors, "positions": positions,
            "hit_share": 1 - lo / p if p else 0.0, "touches_per_poll": t / p if p else 0.0,
        }  # fmt: skip
    finally:
        await run.close()


# --------------------------------------------------------------------------- report


def table(title: str, rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [title]
    for row in rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    return "\n".join(lines)


def report_tokens(results: dict[str, list[float]]) -> str:
    aws, floor = median(results[AWS]), median(results[FLOOR])
    rows = [("", "token sets/s", "vs AWS design", "vs its floor", "goal")]
    for name, rates in results.items():
        value = median(rates)
        goal = ""
        if name == "rideout EdDSA":
            goal = ">= 10 vs AWS (PASS)" if value / aws >= 10 else ">= 10 vs AWS (MISS)"
        rows.append((name, f"{value:,.0f}", f"{value / aws:.1f}x", f"{value / floor:.1f}x", goal))
    return table("Token sets per second (median of rounds, one core)", rows)


def report_http(measured: dict[str, Any]) -> str:
    rates: dict[str, list[float]] = measured["rates"]
    cpu: dict[str, list[float]] = measured["cpu"]
    rows = [
        (
            "",
            "requests/s",
            "vs trivial",
            "CPU/request",
            "trivial's CPU / its",
            "goal (polled paths)",
        )
    ]
    for name, values in rates.items():
        ratio = median(measured["ratios"][name]) if name != TRIVIAL else 1.0
        cpu_ratio = median(measured["cpu_ratios"][name]) if name != TRIVIAL else 1.0
        polled = name.startswith(("GET /serving_num", QUEUE_NUM))
        goal = (">= 0.6 (PASS)" if ratio >= 0.6 else ">= 0.6 (MISS)") if polled else ""
        rows.append((
            name, f"{median(values):,.0f}", f"{ratio:.2f}", f"{median(cpu[name]) * 1e6:,.0f} us",
            f"{cpu_ratio:.2f}", goal,
        ))  # fmt: skip
    errors = {name: n for name, n in measured["errors"].items() if n}
    every = measured["positions"] / median(rates[QUEUE_NUM])
    interval = touch_interval(ABANDON_AFTER) or 0.0
    out = table(
        "HTTP requests per second, one `rideout serve` process (medians of rounds; each"
        " ratio is the row against the trivial endpoint of the same server measured right"
        " next to it; CPU: the server's and Redis's, per request)", rows,
    )  # fmt: skip
    out += (
        f"\n{QUEUE_NUM}: {measured['positions']:,} positions round-robin (each polled about"
        f" every {every:.1f} s while its row runs); position cache hit share"
        f" {measured['hit_share']:.1%}, touches per poll {measured['touches_per_poll']:.3f}"
        f" (queued, written in batches; the cached server over every round; {UNCACHED}:"
        f" a read and a touch per poll, one round trip). Polled without a pause, each"
        f" position is touched once per {interval:g} s: {min(1.0, every / interval):.3f}"
        f" touches per poll at this rate; here the positions rest while other rows run,"
        f" so more of their polls find a touch due"
    )
    return out + (f"\nnon-2xx answers: {errors}" if errors else "\nevery answer 2xx")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small, fast smoke run")
    parser.add_argument("--only", choices=["tokens", "http"], help="one part only")
    parser.add_argument("--rounds", type=int, help="rounds (default 5; --quick 2)")
    parser.add_argument("--seconds", type=float, help="seconds per slice (default 3; --quick 1)")
    args = parser.parse_args(argv)
    rounds, seconds = (2, 1.0) if args.quick else (5, 3.0)
    rounds, seconds = args.rounds or rounds, args.seconds or seconds
    positions = 2_000 if args.quick else 5_000
    if args.only in (None, "tokens"):
        print(report_tokens(measure_tokens(rounds, seconds)), flush=True)
    if args.only in (None, "http"):
        with tempfile.TemporaryDirectory(prefix="rideout-bench-room-") as work_dir:
            measured = asyncio.run(measure_http(Path(work_dir), rounds, seconds, 16, positions))
        print(report_http(measured), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
