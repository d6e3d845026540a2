"""What Schemathesis found in the room's API (tests/openapi/test_fuzz.py), each fixed and
kept here as the exact request that found it (a real uvicorn, a real redis-server)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from rideout.waitingroom.model import MAX_EPOCH
from tests.waitingroom.conftest import AUTH, Redis, ServedAPI, fresh_event, served_api

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def room(redis_server: Redis) -> AsyncIterator[ServedAPI]:
    async with served_api(redis_server) as api:
        yield api


async def test_a_time_past_the_year_9999_is_refused_not_a_500(room: ServedAPI) -> None:
    # Found: prequeue_until 4e307 became infinite milliseconds, an OverflowError: 500.
    body = {"event_id": "pZWclHk.u0D_", "validity": 74344.95519852996,
            "prequeue_until": 4.0938759869330197e307}  # fmt: skip
    r = await room.http.post("/private/events", headers=AUTH, json=body)
    assert r.status_code == 400, r.text
    assert "prequeue_until" in r.json()["error"]
    event_id = fresh_event("far")
    r = await room.http.post("/private/events", headers=AUTH, json={"event_id": event_id})
    assert r.status_code == 201, r.text
    for change in (
        {"prequeue_until": 1e300},
        {"inlet": {"start": 1e300}},
        {"inlet": {"end": MAX_EPOCH + 1}},
    ):
        r = await room.http.patch(f"/private/events/{event_id}", headers=AUTH, json=change)
        assert r.status_code == 400, (change, r.text)
    r = await room.http.patch(
        f"/private/events/{event_id}", headers=AUTH, json={"prequeue_until": MAX_EPOCH}
    )
    assert r.status_code == 200, r.text
