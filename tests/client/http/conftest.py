"""Both failover clients behind one awaitable interface, for tests run against each."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from rideout.client import (
    AsyncFailoverClient,
    DomainPlan,
    FailoverClient,
)
from tests.client.conftest import Domains
from tests.conftest import FakeClock


class Client:
    """The sync or the async client behind one awaitable interface.

    The sync client runs in a worker thread (the servers share this event loop).
    """

    def __init__(self, kind: str, plan: DomainPlan, **kwargs: Any) -> None:
        self.kind = kind
        fake: FakeClock | None = kwargs.pop("fake", None)
        if fake is not None:
            kwargs["clock"] = fake
            kwargs["sleep"] = fake.sleep if kind == "sync" else fake.asleep
        kwargs.setdefault("trust_env", False)
        self.sync = FailoverClient(plan, "test", **kwargs) if kind == "sync" else None
        self.async_ = AsyncFailoverClient(plan, "test", **kwargs) if kind == "async" else None

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        if self.sync is not None:
            return await asyncio.to_thread(self.sync.request, method, path, **kwargs)
        assert self.async_ is not None
        return await self.async_.request(method, path, **kwargs)

    async def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return await self.request("GET", path, **kwargs)

    async def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return await self.request("POST", path, **kwargs)

    async def close(self) -> None:
        if self.sync is not None:
            self.sync.close()
        if self.async_ is not None:
            await self.async_.aclose()


MakeClient = Callable[..., Client]


@pytest.fixture(params=["sync", "async"])
async def make_client(
    request: pytest.FixtureRequest, domains: Domains
) -> AsyncIterator[MakeClient]:
    made: list[Client] = []

    def make(plan: DomainPlan | None = None, **kwargs: Any) -> Client:
        client = Client(request.param, plan or DomainPlan({"test": domains.urls}), **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()
