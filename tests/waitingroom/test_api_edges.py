"""The room's small edges over HTTP (a real uvicorn on loopback, a real redis-server):
integers only where the private API takes a number, what a refused token says, and a
large event deleted without blocking Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.waitingroom.conftest import AUTH, Redis, ServedAPI, served_api

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def room(redis_server: Redis) -> AsyncIterator[ServedAPI]:
    async with served_api(redis_server) as api:
        yield api


async def test_the_private_api_takes_integers_only(room: ServedAPI) -> None:
    event_id, rid = await room.served_position("edges", validity=600)
    await room.store.claim_token(event_id, rid)
    for status in (1.0, -1.0, True, "1"):
        r = await room.http.post("/private/update_session", headers=AUTH,
                                 json={"event_id": event_id, "request_id": rid, "status": status})  # fmt: skip
        assert r.status_code == 400, (status, r.text)
        assert "integer" in r.json()["error"]
    for by in (2.0, True, "2"):
        r = await room.http.post("/private/increment_serving_counter", headers=AUTH,
                                 json={"event_id": event_id, "increment_by": by})  # fmt: skip
        assert r.status_code == 400, (by, r.text)
        assert "integer" in r.json()["error"]
    r = await room.http.post("/private/update_session", headers=AUTH,
                             json={"event_id": event_id, "request_id": rid, "status": 1})  # fmt: skip
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(("status", "word"), [(1, "completed"), (-1, "abandoned")])
async def test_a_token_for_an_ended_session_says_what_happened(
    room: ServedAPI, status: int, word: str
) -> None:
    event_id, rid = await room.served_position("edges", validity=600)
    body = {"event_id": event_id, "request_id": rid}
    assert (await room.http.post("/generate_token", json=body)).status_code == 200
    await room.store.update_session(event_id, rid, status)
    r = await room.http.post("/generate_token", json=body)
    assert r.status_code == 410
    message = r.json()["error"]
    assert word in message
    assert "expired" not in message


async def test_an_event_is_deleted_with_unlink(room: ServedAPI, redis_server: Redis) -> None:
    event_id, _ = await room.served_position("edges")
    before = await redis_server.admin.info("commandstats")
    r = await room.http.post("/private/reset_initial_state", headers=AUTH,
                             json={"event_id": event_id})  # fmt: skip
    assert r.status_code == 200, r.text
    r = await room.http.request("DELETE", f"/private/events/{event_id}", headers=AUTH)
    assert r.status_code == 204
    after = await redis_server.admin.info("commandstats")

    def calls(stats: dict[str, dict[str, int]], command: str) -> int:
        return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))

    assert calls(after, "unlink") > calls(before, "unlink")
    assert calls(after, "del") == calls(before, "del")
