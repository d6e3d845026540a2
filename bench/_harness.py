"""Shared plumbing for the benchmarks: child processes, ports, /proc readings, statistics.

Every process a benchmark starts goes through :class:`Child`: it runs in a session (and
so a process group) of its own, asks the kernel for SIGKILL when the benchmark dies
(``PR_SET_PDEATHSIG``), and :meth:`Child.stop` signals the whole group (SIGTERM, then
SIGKILL), so a forked helper (redis-server's AOF rewrite) goes too.

:class:`ClientWorker` is a load-generating client process (:mod:`bench._client`) driven
over JSON lines on its stdin/stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import math
import os
import random
import resource
import secrets
import signal
import socket
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from rideout.store.acl import RedisCredentials, ServerAuth, UserRules, prepare_server_auth

__all__ = [
    "BENCH_ROOT",
    "Child",
    "ClientWorker",
    "bench_env",
    "cpu_seconds",
    "free_port",
    "machine_busy_seconds",
    "median",
    "own_cpu_seconds",
    "percentile",
    "rss_kib",
    "wait_for_log",
]

# The directory that holds the `bench` package (the project root): children run here.
BENCH_ROOT = Path(__file__).resolve().parent.parent

_PR_SET_PDEATHSIG = 1
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def bench_env() -> dict[str, str]:
    """The environment for children: no RIDEOUT_* overrides, no proxies, unbuffered."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RIDEOUT_") and k.lower() not in ("http_proxy", "https_proxy")
    }
    env["PYTHONUNBUFFERED"] = "1"
    env["NO_PROXY"] = "*"
    return env


class Child:
    """One child process in its own process group, stopped with its whole group."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_file: Path,
        *,
        pipes: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_file = log_file
        self._pipes = pipes
        self._env = dict(env) if env is not None else bench_env()
        self.proc: asyncio.subprocess.Process | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"{self.name} was not started")
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_file.open("ab")
        pipe = asyncio.subprocess.PIPE
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=pipe if self._pipes else asyncio.subprocess.DEVNULL,
            stdout=pipe if self._pipes else self._log,
            stderr=self._log,
            cwd=BENCH_ROOT,
            env=self._env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
            limit=256 * 1024 * 1024,  # one JSON line of results can be large
        )

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    async def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM to the process group, SIGKILL to it after `timeout` seconds."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        try:
            if self.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGTERM)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.proc.wait(), timeout)
        finally:
            # Whatever is left of the group (the leader, or a child it forked) is killed.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            if self.proc.returncode is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.proc.wait(), 5.0)
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            if self._log is not None:
                self._log.close()
                self._log = None


async def wait_for_log(child: Child, marker: str, timeout: float = 30.0) -> None:
    """Wait until `child`'s log holds `marker`; RuntimeError if it exits or times out."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError):
            if marker in child.log_file.read_text(encoding="utf-8", errors="replace"):
                return
        if not child.running:
            raise RuntimeError(f"{child.name} exited while starting:\n{child.log_tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{child.name} did not log {marker!r} within {timeout:g} s:\n{child.log_tail()}"
            )
        await asyncio.sleep(0.05)


async def wait_for_redis(child: Child, client: Any, timeout: float = 15.0) -> None:
    """Wait until the Redis `child` runs answers `client`'s PING; RuntimeError, with
    its log's tail, if it exits or does not answer in time."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            await client.ping()
            return
        except Exception:  # any refusal while it starts (connection, LOADING, auth)
            if not child.running or time.monotonic() > deadline:
                raise RuntimeError(f"{child.name} did not start:\n{child.log_tail()}") from None
            await asyncio.sleep(0.05)


class ClientWorker(Child):
    """A :mod:`bench._client` process: send it a command, get its JSON answer."""

    def __init__(self, name: str, log_file: Path, *, uvloop: bool = True) -> None:
        argv = [sys.executable, "-m", "bench._client"]
        if not uvloop:
            argv.append("--no-uvloop")
        super().__init__(name, argv, log_file, pipes=True)
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        await super().start()
        reply = await self._read()
        if reply.get("ready") is not True:
            raise RuntimeError(f"{self.name} did not start: {reply}")

    async def _read(self) -> dict[str, Any]:
        assert self.proc is not None
        assert self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if not line:
            await self.proc.wait()
            raise RuntimeError(
                f"{self.name} exited (code {self.proc.returncode}):\n{self.log_tail()}"
            )
        reply: dict[str, Any] = json.loads(line)
        return reply

    async def call(self, cmd: str, **args: Any) -> dict[str, Any]:
        """Run one command in the client process; RuntimeError if it failed."""
        async with self._lock:
            assert self.proc is not None
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"cmd": cmd, **args}).encode() + b"\n")
            await self.proc.stdin.drain()
            reply = await self._read()
        if "error" in reply:
            raise RuntimeError(f"{self.name} {cmd}: {reply['error']}")
        return reply

    async def stop(self, timeout: float = 5.0) -> None:
        if self.running and self.proc is not None and self.proc.stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                self.proc.stdin.write(b'{"cmd": "exit"}\n')
                await self.proc.stdin.drain()
                self.proc.stdin.close()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.proc.wait(), timeout)
        await super().stop(timeout)


def free_port(*addresses: str, udp: bool = False) -> int:
    """A port that is free on every one of `addresses` right now (TCP, and UDP too with
    `udp`)."""
    rng = random.Random()
    kinds = (socket.SOCK_STREAM, socket.SOCK_DGRAM) if udp else (socket.SOCK_STREAM,)
    for _ in range(200):
        port = rng.randrange(20000, 32000)  # below the ephemeral range (32768-60999)
        try:
            for address in addresses:
                for kind in kinds:
                    with socket.socket(socket.AF_INET, kind) as sock:
                        sock.bind((address, port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no free port on {addresses}")


def rss_kib(pid: int) -> int:
    """The resident set size of `pid` (VmRSS in /proc/PID/status), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU time of `pids` so far (their own threads, not children)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / _CLK_TCK


def machine_busy_seconds() -> float:
    """CPU time every process of the machine has used since boot (/proc/stat), in seconds."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / _CLK_TCK


def own_cpu_seconds() -> float:
    """CPU time of this process and of every child it has reaped so far."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0-100) of `values` by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def locked_redis(keys_dir: Path) -> tuple[ServerAuth, RedisCredentials]:
    """Rideout's Redis users (as `rideout up` makes them) and a superuser of the
    benchmark's own, for what no rideout user may do (CONFIG RESETSTAT, reference loads
    on keys of its own); the servers rideout starts have no such user."""
    bench = RedisCredentials("rideout-bench", secrets.token_hex(32), "bench/_harness.py")
    superuser = UserRules(commands=("@all",), keys=("*",))
    return prepare_server_auth(keys_dir, extra_users=[(bench, superuser)]), bench
