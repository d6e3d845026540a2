"""Automatic pipelining of script calls, against a real Redis primary and replica."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from rideout.config import parse_config
from rideout.store.client import state_client
from rideout.store.functions import Routine, StoreFunction, library_text, runs_functions
from rideout.store.pipelining import ScriptPipeliner
from tests.conftest import TEST_ADMIN, config_data, free_port, running_redis_pair

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Appends ARGV[1] to a list and returns the list's length; fails on purpose for "boom".
SCRIPT = """
if ARGV[1] == 'boom' then return redis.error_reply('ERR boom') end
return redis.call('RPUSH', KEYS[1], ARGV[1])
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def redis_pair(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[aioredis.Redis]:
    data_dir: Path = tmp_path_factory.mktemp("pipelining") / ".rideout"
    config = parse_config(config_data(data_dir))
    async with running_redis_pair(config):
        p = config.primary.redis
        # The pipeliner itself, with a script and keys of the tests' own: the superuser.
        client = state_client(p.address, p.port, credentials=TEST_ADMIN)
        try:
            if await runs_functions(client):  # FCALL: the tests' script as a function
                await client.function_load(library_text([PUSH], "rideout_test"), replace=True)
            yield client
        finally:
            await client.aclose()


@pytest_asyncio.fixture(loop_scope="module")
async def client(redis_pair: aioredis.Redis) -> aioredis.Redis:
    await redis_pair.flushall()
    await redis_pair.script_flush()
    return redis_pair


PUSH = Routine("rideout_test_push", SCRIPT)


async def script_stat(client: aioredis.Redis) -> str:
    """The command the pipeliner sends: FCALL where the server has functions."""
    return "cmdstat_fcall" if await runs_functions(client) else "cmdstat_evalsha"


def pipeliner(client: aioredis.Redis, **kw: int) -> ScriptPipeliner:
    return ScriptPipeliner(client, StoreFunction(client, PUSH), **kw)


async def test_calls_in_one_loop_iteration_run_in_order_in_one_pipeline(
    client: aioredis.Redis,
) -> None:
    runner = pipeliner(client)
    await runner.call(["warm-up"], ["loads the script"])
    replies = await asyncio.gather(*(runner.call(["list"], [str(i)]) for i in range(40)))
    assert replies == [(i + 1, None) for i in range(40)]
    assert await client.lrange("list", 0, -1) == [str(i) for i in range(40)]
    await runner.close()


async def test_an_error_reaches_only_its_own_caller(client: aioredis.Redis) -> None:
    runner = pipeliner(client)
    results = await asyncio.gather(
        runner.call(["list"], ["a"]), runner.call(["list"], ["boom"]), runner.call(["list"], ["b"]),
        return_exceptions=True,
    )  # fmt: skip
    assert results[0] == (1, None)
    assert isinstance(results[1], ResponseError)
    assert "boom" in str(results[1])
    assert results[2] == (2, None)


async def test_a_flushed_script_cache_is_reloaded_and_the_calls_run_once(
    client: aioredis.Redis,
) -> None:
    runner = pipeliner(client)
    assert await runner.call(["list"], ["first"]) == (1, None)
    await client.script_flush()
    replies = await asyncio.gather(*(runner.call(["list"], [str(i)]) for i in range(5)))
    assert replies == [(i + 2, None) for i in range(5)]
    assert await client.llen("list") == 6  # nothing ran twice


async def test_a_burst_larger_than_a_batch_is_split(client: aioredis.Redis) -> None:
    runner = pipeliner(client, max_batch=4)
    await client.config_resetstat()
    replies = await asyncio.gather(*(runner.call(["list"], [str(i)]) for i in range(10)))
    # Three pipelines on their own connections: order holds within each, not across.
    assert sorted(r for r, _ in replies) == list(range(1, 11))
    stats = await client.info("commandstats")
    assert stats[await script_stat(client)]["calls"] >= 10
    with pytest.raises(ValueError, match="max_batch"):
        pipeliner(client, max_batch=0)


async def test_one_wait_covers_the_batch_and_every_caller_gets_its_count(
    client: aioredis.Redis,
) -> None:
    runner = pipeliner(client)
    await runner.call(["list"], ["loads the script"])
    await client.config_resetstat()
    replies = await asyncio.gather(
        *(runner.call(["list"], [str(i)], wait=(1, 2000)) for i in range(10))
    )
    assert [waited.acked for _, waited in replies if waited is not None] == [1] * 10
    calls = await client.info("commandstats")
    assert calls["cmdstat_wait"]["calls"] == 1
    assert calls[await script_stat(client)]["calls"] == 10


async def test_an_observed_wait_reads_the_replication_info_around_it(
    client: aioredis.Redis,
) -> None:
    """Sync replication's rule (store.sync) needs the writer's offset just after the
    batch and each replica's acknowledged offset just after the WAIT: one INFO each,
    in the same pipeline, once per batch."""
    runner = pipeliner(client)
    await runner.call(["list"], ["loads the script"])
    await client.config_resetstat()
    replies = await asyncio.gather(
        *(runner.call(["list"], [str(i)], wait=(1, 2000, True)) for i in range(5))
    )
    waited = {id(w) for _, w in replies}
    assert len(waited) == 1  # one WAIT, one reply shared by the batch
    reply = replies[0][1]
    assert reply is not None
    assert reply.acked == 1
    assert reply.before is not None
    assert reply.after is not None
    assert reply.before["role"] == "master"
    replica = reply.after["slave0"]
    assert replica["offset"] >= reply.before["master_repl_offset"]
    calls = await client.info("commandstats")
    assert calls["cmdstat_info"]["calls"] == 2
    assert calls["cmdstat_wait"]["calls"] == 1


async def test_a_cancelled_caller_does_not_disturb_the_others(client: aioredis.Redis) -> None:
    runner = pipeliner(client)
    first = asyncio.create_task(runner.call(["list"], ["cancelled"]))
    second = asyncio.create_task(runner.call(["list"], ["kept"]))
    await asyncio.sleep(0)  # both joined the batch
    first.cancel()
    assert await second == (2, None)  # the cancelled call had been sent already
    assert first.cancelled()
    await runner.close()


async def test_close_sends_the_open_batch_and_later_calls_fail(client: aioredis.Redis) -> None:
    """A call made in the iteration of the close is answered before close returns (it
    used to be sent after it, on a closed client); a call after close is refused."""
    runner = pipeliner(client)
    await runner.call(["warm-up"], ["loads the script"])
    late = asyncio.create_task(runner.call(["list"], ["in the last iteration"]))
    await asyncio.sleep(0)  # joined a batch that is not sent yet
    await runner.close()
    assert late.done()
    assert late.result() == (1, None)
    assert not runner._running
    with pytest.raises(RedisConnectionError, match="closed"):
        await runner.call(["list"], ["after"])
    assert await client.lrange("list", 0, -1) == ["in the last iteration"]


async def test_an_unreachable_server_fails_every_call_of_the_batch() -> None:
    port = free_port()
    client = aioredis.Redis(
        host="127.0.0.1", port=port, socket_connect_timeout=0.5, decode_responses=True
    )
    runner = pipeliner(client)
    try:
        results = await asyncio.gather(
            *(runner.call(["list"], [str(i)], wait=(1, 100)) for i in range(3)),
            return_exceptions=True,
        )
    finally:
        await client.aclose()
    assert all(isinstance(r, RedisConnectionError) for r in results)
