"""The Redis clients rideout makes: bounded timeouts, bounded retries, a blocking pool."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Iterator

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from rideout.store.client import (
    cancel_and_wait,
    check_cancelled,
    probe_client,
    retarget,
    state_client,
)
from rideout.store.embedded import EmbeddedRedis, RedisSpec
from tests.conftest import TEST_ADMIN, free_port
from tests.store.conftest import writer_spec

pytestmark = pytest.mark.asyncio(loop_scope="module")


@contextlib.contextmanager
def socket_that_never_answers() -> Iterator[int]:
    """A port whose connections the kernel accepts and nobody ever reads."""
    with socket.socket() as silent:
        silent.bind(("127.0.1.100", 0))
        silent.listen()
        yield silent.getsockname()[1]


async def test_both_clients_talk_to_a_real_server(redis_server: RedisSpec) -> None:
    for client in (
        probe_client(redis_server.address, redis_server.port, credentials=TEST_ADMIN),
        state_client(redis_server.address, redis_server.port, credentials=TEST_ADMIN),
    ):
        try:
            assert await client.ping()
            await client.set("k", "v")
            assert await client.get("k") == "v"  # decoded to str
        finally:
            await client.aclose()


async def test_closing_is_not_failed_by_a_slow_close(
    redis_server: RedisSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py waits for a closed socket's end within the connect timeout and raises
    TimeoutError past it: on a loaded machine, a restored Redis that answered its
    readiness PING was reported failed by the probe client's close (a drill's "restore
    ... Timed out closing connection after 0.5"). The socket is closed either way."""
    client = probe_client(
        redis_server.address, redis_server.port, credentials=TEST_ADMIN, timeout=0.05
    )
    assert await client.ping()

    async def slow_wait_closed(self: asyncio.StreamWriter) -> None:
        await asyncio.sleep(1.0)  # a loop too busy to see the close through in time

    monkeypatch.setattr(asyncio.StreamWriter, "wait_closed", slow_wait_closed)
    await client.aclose()  # no TimeoutError
    assert all(not c.is_connected for c in client.connection_pool._available_connections)


async def test_a_probe_of_a_dead_server_fails_at_once_without_retrying() -> None:
    client = probe_client(
        "127.0.1.100", free_port("127.0.1.100"), timeout=0.5, credentials=TEST_ADMIN
    )
    started = time.monotonic()
    try:
        with pytest.raises(RedisConnectionError):
            await client.ping()
    finally:
        await client.aclose()
    assert time.monotonic() - started < 1.0  # redis-py's default retries take seconds


async def test_a_silent_server_times_out_within_the_timeout() -> None:
    with socket_that_never_answers() as port:
        client = probe_client("127.0.1.100", port, timeout=0.3, credentials=TEST_ADMIN)
        started = time.monotonic()
        try:
            with pytest.raises((RedisTimeoutError, RedisConnectionError)):
                await client.ping()
        finally:
            await client.aclose()
        assert time.monotonic() - started < 2.0


async def test_the_state_pool_queues_past_its_limit_instead_of_failing(
    redis_server: RedisSpec,
) -> None:
    client = state_client(
        redis_server.address, redis_server.port, max_connections=2, credentials=TEST_ADMIN
    )
    try:
        replies = await asyncio.gather(*(client.blpop(["nothing"], timeout=0.1) for _ in range(4)))
        assert replies == [None] * 4  # four calls through two connections, none refused
    finally:
        await client.aclose()


async def test_check_cancelled_raises_only_when_a_cancellation_is_pending() -> None:
    check_cancelled()  # nothing pending: returns

    async def swallows_then_checks() -> None:
        # What redis-py sometimes does inside its timeout blocks: swallow it.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(10)
        check_cancelled()

    task = asyncio.create_task(swallows_then_checks())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancel_and_wait_reports_what_did_not_stop_cleanly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def refuses_to_stop() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await release.wait()  # ignores its cancellation until the test lets it go

    async def fails_when_cancelled() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise OSError("boom") from None

    stubborn = asyncio.create_task(refuses_to_stop(), name="stubborn")
    failing = asyncio.create_task(fails_when_cancelled(), name="failing")
    await asyncio.sleep(0)
    with caplog.at_level(logging.ERROR, logger="rideout.store"):
        await cancel_and_wait(stubborn, timeout=0.05)
        await cancel_and_wait(failing)
    assert "stubborn did not stop within 0.05 s of being cancelled" in caplog.text
    assert "failing failed: OSError('boom')" in caplog.text
    release.set()
    await stubborn


async def test_a_caller_cancelled_while_it_waits_stays_cancelled() -> None:
    """`with suppress(CancelledError): await task` after ``task.cancel()`` swallows the
    caller's own cancellation too, if it comes while the task winds down; the caller then
    carries on as if nobody had asked it to stop. cancel_and_wait lets it through."""
    winding_down = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            winding_down.set()
            await asyncio.sleep(0.2)  # a flush, a goodbye: it takes a moment
            raise

    async def caller(how: str) -> str:
        child = asyncio.create_task(slow_to_stop())
        await asyncio.sleep(0)
        if how == "suppress":
            child.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await child
        else:
            await cancel_and_wait(child)
        return "carried on"

    for how, stays_cancelled in (("suppress", False), ("cancel_and_wait", True)):
        winding_down.clear()
        task = asyncio.create_task(caller(how))
        await winding_down.wait()
        task.cancel()  # the caller is asked to stop while its child winds down
        outcome = await asyncio.gather(task, return_exceptions=True)
        assert isinstance(outcome[0], asyncio.CancelledError) is stays_cancelled, (how, outcome)


async def test_retarget_moves_every_pooled_connection_to_the_other_server(
    redis_server: RedisSpec, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """An app server follows its region's writer to the region's other Redis (an
    in-region promotion): connections already pooled must not keep talking to the old
    one (redis-py reconnects each connection to its own host)."""
    other = writer_spec(tmp_path_factory.mktemp("redis-other"), "127.0.1.101", "redis-other")
    client = state_client(redis_server.address, redis_server.port, credentials=TEST_ADMIN)
    async with EmbeddedRedis(other):
        try:
            await client.set("where", "first")
            # several pooled connections, some idle, one held by a pipeline
            await asyncio.gather(*(client.get("where") for _ in range(5)))
            assert await retarget(client, other.address, other.port)
            assert not await retarget(client, other.address, other.port)  # no change
            results = await asyncio.gather(*(client.get("where") for _ in range(5)))
            assert results == [None] * 5  # every call went to the other server
            await client.set("where", "second")
            seen = probe_client(other.address, other.port, credentials=TEST_ADMIN)
            assert await seen.get("where") == "second"
            await seen.aclose()
        finally:
            await client.aclose()
