"""The canary's datapoints on CloudWatch: PutMetricData, batched, bounded, in the background.

With ``aws.publish_metrics`` the canary gives each round to a :class:`CloudWatchPublisher`
as well as to the control plane. Each round becomes one datapoint per zone (dimensions
``ApiId=<region>``, ``Zone=<zone>``) and one per region (``ApiId=<region>`` alone, the
minimum over its zones: the metric the alarm watches, since CloudWatch treats every
combination of dimensions as a metric of its own), namespace ``App``, metric
``WebSocketHealth`` (seed 000), sent to the alarm region.

Datapoints wait in a bounded queue (the oldest are dropped first, and counted) and one
background task sends them, up to 1,000 per call (the API's limit); botocore retries a
failed call a few times (its ``standard`` mode), after which the batch goes back to the
queue for the next round: CloudWatch accepts datapoints up to two weeks old, and a gap
would count as breaching. Nothing here ever raises into the canary.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rideout._tasks import Supervised, TaskSupervisor
from rideout.aws.desired import alarm_region
from rideout.aws.errors import AwsError
from rideout.aws.session import AwsSession, boundary
from rideout.config import Config
from rideout.health.canary import ProbeResult
from rideout.health.names import METRIC_NAME, NAMESPACE, REGION_DIMENSION, ZONE_DIMENSION

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch.type_defs import MetricDatumTypeDef

__all__ = ["MAX_BATCH", "CloudWatchPublisher", "datums"]

log = logging.getLogger("rideout.canary.cloudwatch")

MAX_BATCH = 1000  # PutMetricData's limit of datums per request


def datums(results: Sequence[ProbeResult]) -> list[MetricDatumTypeDef]:
    """One round's datums: one per zone, and one per region (the minimum of its zones)."""
    out: list[MetricDatumTypeDef] = []
    by_region: dict[str, list[ProbeResult]] = {}
    for r in results:
        by_region.setdefault(r.region, []).append(r)
        out.append(
            {
                "MetricName": METRIC_NAME,
                "Dimensions": [
                    {"Name": REGION_DIMENSION, "Value": r.region},
                    {"Name": ZONE_DIMENSION, "Value": r.zone},
                ],
                "Timestamp": datetime.fromtimestamp(r.timestamp, UTC),
                "Value": 1.0 if r.healthy else 0.0,
                "Unit": "None",
            }
        )
    for region, rs in by_region.items():
        out.append(
            {
                "MetricName": METRIC_NAME,
                "Dimensions": [{"Name": REGION_DIMENSION, "Value": region}],
                "Timestamp": datetime.fromtimestamp(max(r.timestamp for r in rs), UTC),
                "Value": 1.0 if all(r.healthy for r in rs) else 0.0,
                "Unit": "None",
            }
        )
    return out


class CloudWatchPublisher:
    """A :class:`~rideout.health.canary.DatapointPublisher` for CloudWatch (module doc)."""

    def __init__(
        self,
        config: Config,
        session: AwsSession | None = None,
        *,
        max_queued: int = 10 * MAX_BATCH,
    ) -> None:
        self.region = alarm_region(config)
        self.session = session or AwsSession()
        self._queue: deque[MetricDatumTypeDef] = deque()
        self._max_queued = max_queued
        # The sender runs while datapoints wait (started again by every round's
        # publish); one that dies of a bug is logged and restarted by the supervisor.
        self._tasks = TaskSupervisor()
        self._task: Supervised | None = None
        self.sent = 0
        self.dropped = 0
        self.failures = 0

    def publish(self, results: Sequence[ProbeResult]) -> None:
        """Queue a round; start the sender if it is not running (never raises)."""
        for datum in datums(results):
            if len(self._queue) >= self._max_queued:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append(datum)
        if self._task is None or self._task.done():
            self._task = self._tasks.spawn("cloudwatch-sender", self._send, critical=False)

    def _put(self, batch: list[MetricDatumTypeDef]) -> None:
        with boundary(f"PutMetricData in {self.region}"):
            self.session.cloudwatch(self.region).put_metric_data(
                Namespace=NAMESPACE, MetricData=batch
            )

    async def _send(self) -> None:
        while self._queue:
            batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
            try:
                await asyncio.to_thread(self._put, batch)
            except AwsError as exc:
                self.failures += 1
                log.warning(
                    "PutMetricData failed (%s): %d datapoints kept for later", exc, len(batch)
                )
                room = self._max_queued - len(self._queue)
                self.dropped += max(0, len(batch) - room)
                self._queue.extendleft(reversed(batch[:room]))
                return
            self.sent += len(batch)

    async def aclose(self) -> None:
        """Let the sender finish what it is sending (for a clean shutdown)."""
        if self._task is not None:
            await asyncio.wait({self._task.task})

    def stats(self) -> dict[str, Any]:
        """Datapoints sent, dropped and waiting, and failed calls."""
        return {
            "sent": self.sent,
            "dropped": self.dropped,
            "queued": len(self._queue),
            "failures": self.failures,
        }
