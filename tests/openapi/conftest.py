"""A live zone (the auction, the waiting room with an OpenID client) and a live control
plane on loopback over a real primary Redis and its replica, for the document tests and
the fuzzer. They run in a thread of their own with its own event loop: Schemathesis's
calls are synchronous, and would block a loop that the servers shared with the test."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette

from rideout.auth.admin import load_or_create_admin_token
from rideout.config import Config, parse_config
from rideout.controlplane.app import create_app as control_plane_app
from rideout.realtime.app import ZoneApp, create_app
from rideout.store.acl import load_or_create_users
from rideout.store.client import probe_client
from rideout.store.replication import ensure_epoch
from rideout.waitingroom.extension import WaitingRoom
from tests.conftest import TEST_ADMIN, config_data, replicated, running_redis_pair, serving

CALLBACK = "https://rp.example/oidc/callback"


def live_config(data_dir: Path) -> Config:
    """The default topology, the room with one event and its OpenID client."""
    config = parse_config(
        config_data(
            data_dir,
            waitingroom={
                "inlet": "none",
                "events": ["auction"],
                "oidc_clients": [f"auction {CALLBACK}"],
            },
        )
    )
    load_or_create_users(config.keys_dir)
    return config


@dataclass
class Live:
    """The running servers: their base URLs, apps and the admin token's header."""

    config: Config
    zone: str
    control_plane: str
    zone_app: ZoneApp
    room: WaitingRoom
    control_plane_app: Starlette
    admin: dict[str, str]


class _Servers(threading.Thread):
    """The servers in this thread's event loop until :meth:`stop`."""

    def __init__(self, config: Config) -> None:
        super().__init__(name="openapi-live", daemon=True)
        self.config = config
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.room = WaitingRoom(config)
        self.zone_app = create_app(
            config, config.primary.name, config.primary.zones[0].name, extensions=[self.room]
        )
        self.control_plane_app = control_plane_app(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to the test's thread
            self.error = exc
        finally:
            self.ready.set()

    async def _main(self) -> None:
        config = self.config
        self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
        p, cp = config.primary, config.control_plane
        async with running_redis_pair(config), contextlib.AsyncExitStack() as stack:
            writer = probe_client(
                p.redis.address, p.redis.port, credentials=TEST_ADMIN, timeout=6.0
            )
            try:
                await ensure_epoch(writer)
                await replicated(writer)
            finally:
                await writer.aclose()
            await stack.enter_async_context(serving(self.control_plane_app, cp.address, cp.port))
            await stack.enter_async_context(
                serving(self.zone_app, p.zones[0].address, config.app_port)
            )
            self.ready.set()
            await self._stopping.wait()

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self.join(60)


# Module-scoped: "package" scope outlives the directory where it is no Python package
# (tests/ has no __init__.py), so the live servers ran in their thread beside every
# later test of the worker (a zone's store probes, a Redis pair), and a slot test took
# the probes for its own calls.
@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    config = live_config(tmp_path_factory.mktemp("openapi") / ".rideout")
    servers = _Servers(config)
    servers.start()
    try:
        assert servers.ready.wait(60), "the live servers did not start within 60 s"
        if servers.error is not None:
            raise servers.error
        token = load_or_create_admin_token(config.keys_dir)
        cp = config.control_plane
        yield Live(
            config,
            zone=f"http://{config.primary.zones[0].address}:{config.app_port}",
            control_plane=f"http://{cp.address}:{cp.port}",
            zone_app=servers.zone_app,
            room=servers.room,
            control_plane_app=servers.control_plane_app,
            admin={"Authorization": f"Bearer {token}"},
        )
    finally:
        servers.stop()
    if servers.error is not None:
        raise servers.error


def operations(document: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (METHOD, path) a document describes."""
    return [
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method in {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
    ]
