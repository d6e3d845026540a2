"""The controller's ElastiCache provider (`--provider aws`).

moto has no Global Datastore API (every call answers HTTP 500, "not implemented"), so
these tests cannot show AWS moving a writer. They check instead that the requests
rideout sends are the documented ones (botocore's Stubber validates each against the
ElastiCache service model and against the exact parameters expected here), in order,
and what the controller does around them with real Redis servers: the epoch fence after
the move, and no REPLICAOF or FAILOVER of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from botocore.stub import Stubber

from rideout.aws import AwsSession
from rideout.aws.writer import ElastiCacheWriter
from rideout.config import Config
from rideout.failover.controller import FailoverController
from rideout.store.replication import ReplicationError, ensure_epoch, read_epoch, replication_status
from tests.aws.stubs import datastore, stubbed
from tests.conftest import ADMIN, running_redis_pair

P, S = "us-east-1", "us-west-2"
GLOBAL_ID = "ldgnf-auction"
AWS = {
    "global_datastore": "auction",
    "regions": {P: {"replication_group": "auction-use1"}, S: {"replication_group": "auction-usw2"}},
}


def before() -> dict[str, Any]:
    return datastore(GLOBAL_ID, [("auction-use1", P, "PRIMARY"), ("auction-usw2", S, "SECONDARY")])


def after() -> dict[str, Any]:
    return datastore(GLOBAL_ID, [("auction-use1", P, "SECONDARY"), ("auction-usw2", S, "PRIMARY")])


DESCRIBE = {"ShowMemberInfo": True}


def expect_move_start(stub: Stubber) -> None:
    """What every move reads first: the datastore (found from the target's region), and
    the target's role in it (not primary yet)."""
    for _ in range(2):
        stub.add_response("describe_global_replication_groups", before(), DESCRIBE)


def moving(make_config: Callable[..., Config]) -> tuple[Config, AwsSession, Stubber]:
    """A config with a Global Datastore, a session whose ElastiCache client in the
    target region is stubbed, and the reads every move starts with expected."""
    config = make_config(aws=AWS)
    session = AwsSession()
    stub = stubbed(session, "elasticache", S)
    expect_move_start(stub)
    return config, session, stub


FAILOVER = {
    "GlobalReplicationGroupId": GLOBAL_ID,
    "PrimaryRegion": S,
    "PrimaryReplicationGroupId": "auction-usw2",
}


async def test_a_planned_move_fails_the_datastore_over_and_waits_for_it(
    make_config: Callable[..., Config],
) -> None:
    config, session, stub = moving(make_config)
    stub.add_response("failover_global_replication_group", {"GlobalReplicationGroup": {}}, FAILOVER)
    stub.add_response("describe_global_replication_groups", before(), DESCRIBE)  # not yet
    stub.add_response("describe_global_replication_groups", after(), DESCRIBE)
    sleeps: list[float] = []
    writer = ElastiCacheWriter(config, session, sleep=sleeps.append)
    how = await writer.move(P, S, old_reachable=True)
    assert "FailoverGlobalReplicationGroup" in how
    assert sleeps == [1.0]  # polled until AWS said so
    stub.assert_no_pending_responses()


async def test_the_primary_region_down_detaches_the_secondary(
    make_config: Callable[..., Config],
) -> None:
    config, session, stub = moving(make_config)
    stub.add_client_error(
        "failover_global_replication_group",
        service_error_code="InvalidGlobalReplicationGroupState",
        service_message="the primary is not available",
        expected_params=FAILOVER,
    )
    stub.add_response(
        "disassociate_global_replication_group",
        {"GlobalReplicationGroup": {}},
        {
            "GlobalReplicationGroupId": GLOBAL_ID,
            "ReplicationGroupId": "auction-usw2",
            "ReplicationGroupRegion": S,
        },
    )
    stub.add_response(
        "describe_global_replication_groups",
        datastore(GLOBAL_ID, [("auction-use1", P, "PRIMARY")]),
        DESCRIBE,
    )
    writer = ElastiCacheWriter(config, session, sleep=lambda _: None)
    how = await writer.move(P, S, old_reachable=False)
    assert "standalone primary" in how
    stub.assert_no_pending_responses()


async def test_a_refused_planned_move_is_a_replication_error(
    make_config: Callable[..., Config],
) -> None:
    config, session, stub = moving(make_config)
    stub.add_client_error(
        "failover_global_replication_group", service_error_code="AccessDenied",
        expected_params=FAILOVER,
    )  # fmt: skip
    writer = ElastiCacheWriter(config, session, sleep=lambda _: None)
    with pytest.raises(ReplicationError, match="AccessDenied"):
        await writer.move(P, S, old_reachable=True)


def test_the_provider_needs_a_global_datastore(make_config: Callable[..., Config]) -> None:
    from rideout.aws import AwsError

    with pytest.raises(AwsError, match="global_datastore"):
        ElastiCacheWriter(make_config())


class _AwsEffect:
    """The stubbed ElastiCacheWriter, and then what ElastiCache would do to the local
    Redis pair (the target becomes a master): the part no test here can get from AWS."""

    def __init__(self, writer: ElastiCacheWriter, target: aioredis.Redis) -> None:
        self.writer = writer
        self.target = target
        self.moves: list[tuple[str, str]] = []

    async def move(self, old: str, new: str, *, old_reachable: bool) -> str:
        how = await self.writer.move(old, new, old_reachable=old_reachable)
        await self.target.execute_command("REPLICAOF", "NO", "ONE")
        self.moves.append((old, new))
        return how


async def test_the_controller_moves_through_the_provider_then_fences(
    make_config: Callable[..., Config],
) -> None:
    config, session, stub = moving(make_config)
    stub.add_response("failover_global_replication_group", {"GlobalReplicationGroup": {}}, FAILOVER)
    stub.add_response("describe_global_replication_groups", after(), DESCRIBE)
    async with running_redis_pair(config) as _:
        p = aioredis.Redis(
            host=config.primary.redis.address, port=config.primary.redis.port, **ADMIN
        )
        s = aioredis.Redis(
            host=config.secondary.redis.address, port=config.secondary.redis.port, **ADMIN
        )
        try:
            await ensure_epoch(p)
            effect = _AwsEffect(ElastiCacheWriter(config, session, sleep=lambda _: None), s)
            controller = FailoverController(config, managed=effect)
            await controller.tick({P: True, S: True})
            assert controller.writer == P
            assert effect.moves == []
            decision = await controller.tick({P: False, S: True})  # P's alarm fired
            assert decision.move == "fail-over"
            assert effect.moves == [(P, S)]
            assert controller.writer == S
            assert controller.epoch == 2
            assert await read_epoch(s) == 2  # the fence, on the new writer
            events = [e.message for e in controller.state.events] if controller.state else []
            assert any("FailoverGlobalReplicationGroup" in m for m in events)
            # The controller left replication to the provider: the old writer was not
            # demoted by REPLICAOF (ElastiCache refuses the command; AWS demotes it).
            assert (await replication_status(p)).role == "master"
            await controller.tick({P: False, S: True})  # steady: no second move
            assert effect.moves == [(P, S)]
            stub.assert_no_pending_responses()
            await controller.close()
        finally:
            await p.aclose()
            await s.aclose()
