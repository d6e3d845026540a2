"""Sync replication's rule (rideout.store.sync): pure decision tables and a property,
then real redis-servers in the shape `rideout up` gives them (a writer with its
in-region replica and the other region's replica)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.config import Config, parse_config
from rideout.store.acl import RedisRole, load_or_create_users
from rideout.store.auction import AuctionSettings, AuctionStore
from rideout.store.client import probe_client, state_client
from rideout.store.embedded import EmbeddedRedis, RedisSpec
from rideout.store.replication import ensure_epoch
from rideout.store.sync import Placement, ReplicaAck, judge, placements, replica_acks, rule_for
from tests.conftest import config_data, credentials, free_port, load_library, locked_auth, until

# Replication, failover and restarts: on every server of the supported matrix (issue #27).
pytestmark = pytest.mark.usefixtures("matrix_server")

A1, A2, B1, B2 = "127.0.1.100:1", "127.0.1.101:1", "127.0.2.100:1", "127.0.2.101:1"
WHERE = {
    A1: Placement("us-east-1", "use1-az1"),
    A2: Placement("us-east-1", "use1-az2"),
    B1: Placement("us-west-2", "usw2-az1"),
    B2: Placement("us-west-2", "usw2-az2"),
}


def acks(*items: tuple[str, int, bool]) -> list[ReplicaAck]:
    return [ReplicaAck(a, o, up) for a, o, up in items]


def primary_writer(before: list[ReplicaAck], after: list[ReplicaAck], offset: int = 100) -> Any:
    return judge(offset, before, after, writer=WHERE[A1], writer_is_primary=True, placements=WHERE)


def secondary_writer(before: list[ReplicaAck], after: list[ReplicaAck], offset: int = 100) -> Any:
    return judge(offset, before, after, writer=WHERE[B1], writer_is_primary=False, placements=WHERE)


# --------------------------------------------------------------------------- the table


@pytest.mark.parametrize(
    ("before", "after", "replicated", "reason"),
    [
        # both replicas online, both acked: replicated
        ([(A2, 90, True), (B1, 90, True)], [(A2, 100, True), (B1, 120, True)], True, "replicated"),
        # both online, only the in-region one acked in time: WAIT 1 would have said yes
        ([(A2, 90, True), (B1, 90, True)], [(A2, 100, True), (B1, 99, True)], False,
         "not-acknowledged"),
        # the other region's replica down: the in-region one alone proves nothing cross-region
        ([(A2, 90, True)], [(A2, 100, True)], False, "no-replica"),
        # the in-region replica down, the other region acked: replicated
        ([(B1, 90, True)], [(B1, 100, True)], True, "replicated"),
        # a replica still syncing (not online) is not required, and not counted
        ([(A2, 0, False), (B1, 90, True)], [(A2, 0, False), (B1, 100, True)], True, "replicated"),
        # the cross-region replica dropped between the two INFO reads: refused
        ([(B1, 90, True)], [], False, "not-acknowledged"),
        # no replica at all
        ([], [], False, "no-replica"),
        # an address the topology does not know counts for nothing
        ([("10.0.0.9:1", 90, True)], [("10.0.0.9:1", 100, True)], False, "no-replica"),
    ],
)  # fmt: skip
def test_a_primary_writer_needs_the_other_region(
    before: list[tuple[str, int, bool]],
    after: list[tuple[str, int, bool]],
    replicated: bool,
    reason: str,
) -> None:
    verdict = primary_writer(acks(*before), acks(*after))
    assert (verdict.replicated, verdict.reason) == (replicated, reason)


@pytest.mark.parametrize(
    ("before", "after", "replicated", "reason"),
    [
        # after a failover: the region's other zone is a second failure domain
        ([(B2, 90, True)], [(B2, 100, True)], True, "replicated"),
        # the old primary back as a replica too: it must have the write as well
        ([(B2, 90, True), (A1, 90, True)], [(B2, 100, True), (A1, 100, True)], True, "replicated"),
        ([(B2, 90, True), (A1, 90, True)], [(B2, 100, True), (A1, 50, True)], False,
         "not-acknowledged"),
        # only the old primary: another zone (and region) as well
        ([(A1, 90, True)], [(A1, 100, True)], True, "replicated"),
        ([], [], False, "no-replica"),
    ],
)  # fmt: skip
def test_a_secondary_writer_needs_another_zone(
    before: list[tuple[str, int, bool]],
    after: list[tuple[str, int, bool]],
    replicated: bool,
    reason: str,
) -> None:
    verdict = secondary_writer(acks(*before), acks(*after))
    assert (verdict.replicated, verdict.reason) == (replicated, reason)


def test_no_offset_is_never_replicated() -> None:
    verdict = judge(
        None, acks((B1, 1, True)), acks((B1, 10**9, True)),
        writer=WHERE[A1], writer_is_primary=True, placements=WHERE,
    )  # fmt: skip
    assert not verdict.replicated


_replica = st.tuples(
    st.sampled_from([A2, B1, B2, "10.0.0.9:1"]), st.integers(0, 200), st.booleans()
)


@given(
    before=st.lists(_replica, max_size=3, unique_by=lambda r: r[0]),
    after=st.lists(_replica, max_size=3, unique_by=lambda r: r[0]),
    offset=st.integers(0, 200),
    primary=st.booleans(),
)
def test_replicated_means_every_online_replica_has_it_and_one_is_elsewhere(
    before: list[tuple[str, int, bool]],
    after: list[tuple[str, int, bool]],
    offset: int,
    primary: bool,
) -> None:
    writer = WHERE[A1]
    verdict = judge(
        offset, acks(*before), acks(*after),
        writer=writer, writer_is_primary=primary, placements=WHERE,
    )  # fmt: skip
    holding = {a for a, o, _ in after if o >= offset}
    if verdict.replicated:
        assert all(a in holding for a, _, up in before if up)
        elsewhere = [WHERE[a] for a, _, up in before if up and a in WHERE and a in holding]
        if primary:
            assert any(p.region != writer.region for p in elsewhere)
        else:
            assert any(p.zone != writer.zone for p in elsewhere)


def test_replica_acks_reads_redis_info() -> None:
    info = {
        "role": "master",
        "connected_slaves": 2,
        "master_repl_offset": 4242,
        "slave0": {"ip": "127.0.1.101", "port": 6390, "state": "online", "offset": 4242, "lag": 0},
        "slave1": {"ip": "127.0.2.100", "port": 6390, "state": "wait_bgsave", "offset": 0},
        "slave2": "garbage",
    }
    offset, replicas = replica_acks(info)
    assert offset == 4242
    assert replicas == [
        ReplicaAck("127.0.1.101:6390", 4242, True),
        ReplicaAck("127.0.2.100:6390", 0, False),
    ]


def test_the_default_topology_places_each_redis_in_its_zone() -> None:
    config = Config()
    where = placements(config)
    assert where["127.0.1.100:6390"] == Placement("us-east-1", "use1-az1")
    assert where["127.0.1.101:6390"] == Placement("us-east-1", "use1-az2")
    assert where["127.0.2.101:6390"] == Placement("us-west-2", "usw2-az2")
    assert rule_for(config, config.secondary).writer_is_primary is False


# --------------------------------------------------------------------------- real servers


def _topology(tmp_path: Path) -> Config:
    data = config_data(tmp_path / ".rideout")
    port = free_port("127.0.1.100", "127.0.1.101", "127.0.2.100", "127.0.2.101")
    for region, prefix in zip(data["regions"], ("127.0.1", "127.0.2"), strict=True):
        region["redis"] = {
            "address": f"{prefix}.100", "port": port,
            "replica": {"address": f"{prefix}.101", "port": port},
        }  # fmt: skip
    config = parse_config(data)
    load_or_create_users(config.keys_dir)
    return config


@contextlib.asynccontextmanager
async def _three(config: Config) -> AsyncIterator[dict[str, EmbeddedRedis]]:
    """A1 (writer), A2 (its in-region replica), B1 (the other region's replica)."""
    auth = locked_auth(config.keys_dir)
    p, s = config.primary, config.secondary
    assert p.replica is not None
    a1 = (p.redis.address, p.redis.port)

    def spec(name: str, address: str, port: int, follows: tuple[str, int] | None) -> RedisSpec:
        return RedisSpec(
            name, address, port, config.data_dir / "data" / name,
            config.logs_dir / f"{name}.log", replica_of=follows, auth=auth,
        )  # fmt: skip

    servers = {
        "A1": EmbeddedRedis(spec("a1", *a1, None)),
        "A2": EmbeddedRedis(spec("a2", p.replica.address, p.replica.port, a1)),
        "B1": EmbeddedRedis(spec("b1", s.redis.address, s.redis.port, a1)),
    }
    async with contextlib.AsyncExitStack() as stack:
        for server in servers.values():
            await stack.enter_async_context(server)
        await load_library(servers["A1"].spec)
        # A replica's link is up before its writer counts it online (Redis 7.0 waits for
        # its first REPLCONF ACK), and WAIT counts only those: CI saw a bid's WAIT answered
        # by one replica of two on 7.0. Both online first, as the tests assume.
        writer = probe_client(*a1, credentials=credentials(config, RedisRole.CONTROLLER))
        stack.push_async_callback(writer.aclose)

        async def both_online() -> bool:
            _, found = replica_acks(await writer.info("replication"))
            return sum(r.online for r in found) == 2

        await until(both_online, message="the writer counts both replicas online")
        yield servers


async def test_a_bid_answered_only_in_region_is_not_called_replicated(tmp_path: Path) -> None:
    """Before: ``WAIT 1`` after the bid, and one replica counted as the other region.
    With the other region's replica gone, the in-region replica answers WAIT 1 and the
    bid was acknowledged as replicated; now it is not."""
    config = _topology(tmp_path)
    async with _three(config) as servers:
        p = config.primary
        client = state_client(p.redis.address, p.redis.port, credentials=credentials(config))
        store = AuctionStore(client, AuctionSettings(), p.name)
        rule = rule_for(config, p)
        controller = credentials(config, RedisRole.CONTROLLER)
        epoch_client = probe_client(p.redis.address, p.redis.port, credentials=controller)
        assert await ensure_epoch(epoch_client) == 1
        await epoch_client.aclose()
        try:
            first = await store.bid("r", "alice", 10, "b1", epoch=1, wait_timeout=2.0, sync=rule)
            assert first.accepted
            assert first.sync is not None
            assert (first.sync.replicated, first.sync.acked) == (True, 2)
            assert rule.expected == 2

            await servers["B1"].stop()

            # The writer notices the cross-region replica is gone (its link closes).
            async def one_replica() -> bool:
                info = await client.info("replication")
                return int(info["connected_slaves"]) == 1

            await until(one_replica, 30, message="A1 still counts B1")
            second = await store.bid("r", "alice", 20, "b2", epoch=1, wait_timeout=0.5, sync=rule)
            assert second.accepted
            assert second.sync is not None
            assert second.sync.replicated is False
            assert second.sync.reason == "no-replica"
            assert second.sync.acked == 1  # the in-region replica has it: WAIT 1 said yes
        finally:
            await store.close()
            await client.aclose()
