"""The controller's ports: the writer mover it moves the writer with, and the guard it
asks before every act (the control plane's lease), on a real primary/replica pair."""

from __future__ import annotations

from rideout.failover.controller import FailoverController
from rideout.failover.mover import ReplicationMover
from rideout.store.replication import replication_status
from tests.conftest import until
from tests.failover.conftest import Pair
from tests.failover.test_controller import P, S, _in_sync


class RecordingMover:
    """Rideout's own mover, noting each call (as a managed-service provider would act)."""

    def __init__(self, inner: ReplicationMover) -> None:
        self.inner = inner
        self.calls: list[tuple[str, ...]] = []

    async def hand_over(self, old: str, new: str, *, timeout: float) -> None:
        self.calls.append(("hand_over", old, new))
        await self.inner.hand_over(old, new, timeout=timeout)

    async def promote(self, new: str) -> None:
        self.calls.append(("promote", new))
        await self.inner.promote(new)


async def test_the_move_goes_through_the_mover_then_the_epoch_fence(pair: Pair) -> None:
    config, p, s = pair.config, pair.p, pair.s
    controller = FailoverController(config)
    mover = RecordingMover(controller.mover)  # type: ignore[arg-type]
    controller.mover = mover
    try:
        await controller.tick({P: True, S: True})
        await until(lambda: _in_sync(s, p), message="the replica follows")
        await controller.tick({P: False, S: True})
        assert mover.calls == [("hand_over", P, S)]
        assert (controller.writer, controller.epoch) == (S, 2)
        assert (await replication_status(s)).role == "master"
    finally:
        await controller.close()


async def test_a_refusing_guard_stops_every_act(pair: Pair) -> None:
    config, s = pair.config, pair.s
    refusal: list[str | None] = [None]

    async def guard() -> str | None:
        return refusal[0]

    controller = FailoverController(config, guard=guard)
    try:
        await controller.tick({P: True, S: True})
        refusal[0] = "standby: lease held by cp-b"
        await s.replicaof("NO", "ONE")  # reconcile would make it follow again: refused too
        await controller.tick({P: False, S: True})
        assert controller.writer == P
        assert (await replication_status(s)).role == "master"
        last = controller.status()["events"][-1]
        assert (last["kind"], last["message"]) == (
            "error",
            "not acting: standby: lease held by cp-b",
        )
    finally:
        await controller.close()
