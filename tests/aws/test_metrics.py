"""The canary's CloudWatch publisher against moto's server (PutMetricData is real there:
moto stores the datapoints and answers GetMetricStatistics from them), and the canary's
publisher port."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

import boto3
import pytest

from rideout.aws.metrics import MAX_BATCH, CloudWatchPublisher, datums
from rideout.config import Config
from rideout.health.canary import Canary, ProbeResult
from tests.conftest import FakeClock, free_port, until

NOW = 1_700_000_040.0


def round_of(healthy: Sequence[bool], at: float = NOW) -> list[ProbeResult]:
    return [
        ProbeResult("us-east-1", f"use1-az{i + 1}", ok, 0.01, None if ok else "down", at)
        for i, ok in enumerate(healthy)
    ]


def stored(statistics: list[str]) -> tuple[set[tuple[str, ...]], list[dict[str, Any]]]:
    """What moto's CloudWatch (the alarm region, us-west-2) holds of WebSocketHealth: the
    dimension values of its metrics, and the region's datapoints around NOW."""
    cw = boto3.client("cloudwatch", region_name="us-west-2")
    # (moto lists a metric once per datapoint: compare the set)
    metrics = cw.list_metrics(Namespace="App", MetricName="WebSocketHealth")["Metrics"]
    dims = {tuple(sorted(d["Value"] for d in m["Dimensions"])) for m in metrics}
    stats = cw.get_metric_statistics(
        Namespace="App",
        MetricName="WebSocketHealth",
        Dimensions=[{"Name": "ApiId", "Value": "us-east-1"}],
        StartTime=dt.datetime.fromtimestamp(NOW - 60, dt.UTC),
        EndTime=dt.datetime.fromtimestamp(NOW + 120, dt.UTC),
        Period=60,
        Statistics=statistics,  # type: ignore[arg-type]
    )["Datapoints"]
    return dims, stats  # type: ignore[return-value]


ZONES_AND_REGION = {("us-east-1",), ("us-east-1", "use1-az1"), ("us-east-1", "use1-az2")}


def test_a_round_is_one_datum_per_zone_and_one_for_the_region() -> None:
    out = datums(round_of([True, False]))
    assert len(out) == 3
    region = out[-1]
    assert region["Dimensions"] == [{"Name": "ApiId", "Value": "us-east-1"}]
    assert region["Value"] == 0.0  # the minimum: one zone failed
    assert [d["Value"] for d in out[:2]] == [1.0, 0.0]
    assert {d["MetricName"] for d in out} == {"WebSocketHealth"}


async def test_publishes_to_the_alarm_region(
    moto_endpoint: str, make_config: Callable[..., Config]
) -> None:
    config = make_config(aws={"publish_metrics": True})
    publisher = CloudWatchPublisher(config)
    assert publisher.region == "us-west-2"  # the secondary's: where the alarms live
    publisher.publish(round_of([True, True]))
    publisher.publish(round_of([True, False], NOW + 60))
    await until(lambda: publisher.stats()["sent"] == 6, 30, message="datapoints sent")
    await publisher.aclose()
    dims, stats = stored(["Minimum"])
    assert dims == ZONES_AND_REGION
    assert sorted(p["Minimum"] for p in stats) == [0.0, 1.0]


async def test_a_dead_endpoint_keeps_the_datapoints_bounded(
    monkeypatch: pytest.MonkeyPatch, make_config: Callable[..., Config]
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port('127.0.0.1')}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    config = make_config(aws={"publish_metrics": True})
    publisher = CloudWatchPublisher(config, max_queued=4)
    publisher.publish(round_of([True, True]))  # 3 datums
    publisher.publish(round_of([True, True]))  # 3 more: the 2 oldest dropped
    await until(lambda: publisher.stats()["failures"] >= 1, 60, message="a failed call")
    await publisher.aclose()
    stats = publisher.stats()
    assert stats["sent"] == 0
    assert stats["queued"] == 4  # kept for the next round, within the bound
    assert stats["dropped"] == 2


def test_batches_hold_at_most_the_api_limit() -> None:
    assert MAX_BATCH == 1000


async def test_the_canary_gives_each_round_to_its_publishers(
    make_config: Callable[..., Config],
) -> None:
    """The port: publish() is called once per round with that round's results (the
    probe and the control plane are stubbed out here; tests/health/test_canary.py runs
    them for real)."""
    config = make_config()
    rounds: list[list[ProbeResult]] = []

    class Recorder:
        def publish(self, results: Sequence[ProbeResult]) -> None:
            rounds.append(list(results))

    async def healthy(url: str, token: str, timeout: float) -> tuple[bool, str | None]:
        return True, None

    time = FakeClock(1000.0)
    canary = Canary(
        config, "us-east-1", probe_zone=healthy, clock=time, sleep=time.asleep,
        publishers=[Recorder()],
    )  # fmt: skip
    await canary.run(rounds=2)  # the control plane is not running: pushes fail, logged
    assert len(rounds) == 2
    assert [sorted(r.zone for r in rs) for rs in rounds] == [["use1-az1", "use1-az2"]] * 2
    await asyncio.sleep(0)


async def test_a_real_canary_publishes_real_probes_to_cloudwatch(
    moto_endpoint: str, make_config: Callable[..., Config]
) -> None:
    """Real app servers and Redis, the real canary probing them, and its rounds in
    moto's CloudWatch (the control plane is not running: its push fails, logged)."""
    from tests.realtime.conftest import running_deployment

    # A probe timeout a loaded machine meets (the fast profile's 0.4 s is not always),
    # and the rounds on a fake clock, so the test does not wait for periods.
    config = make_config(
        aws={"publish_metrics": True}, timing={"canary_interval": 10.0, "canary_timeout": 8.0}
    )
    time = FakeClock(NOW)
    async with running_deployment(config):
        publisher = CloudWatchPublisher(config)
        canary = Canary(config, "us-east-1", publishers=[publisher], clock=time, sleep=time.asleep)
        await canary.run(rounds=2)
        await until(lambda: publisher.stats()["sent"] == 6, 60, message="6 datapoints sent")
        await publisher.aclose()
    dims, stats = stored(["Minimum", "SampleCount"])
    assert dims == ZONES_AND_REGION
    # 2 rounds: 2 regional datapoints and 4 zonal ones. moto counts all 6 here, since it
    # matches every datapoint that *has* the asked dimensions; CloudWatch matches the
    # exact set, and would count the 2 regional ones the alarm watches.
    assert sum(p["SampleCount"] for p in stats) == 6
    assert min(p["Minimum"] for p in stats) == 1.0  # both zones answered pong
