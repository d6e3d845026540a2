"""The drill's records: typed, and as cheap to keep and to ship as the tuples they were."""

from __future__ import annotations

import pickle
import sys
from multiprocessing.reduction import ForkingPickler

from rideout.drill.records import (
    AckRecord,
    AttemptRecord,
    ConnectedRecord,
    DisconnectedRecord,
    DrillRecord,
    GaveUpRecord,
    RejectedRecord,
    RestoredRecord,
    of_kind,
)

RECORDS: list[DrillRecord] = [
    AttemptRecord(7, 100.0, "us-west-2", 99.9),
    ConnectedRecord(7, 100.1, "us-west-2"),
    RestoredRecord(7, 100.2, "us-west-2"),
    AckRecord(7, 100.3, "lot-1", "drill-7", 12, "1700000000000-0", "us-west-2"),
    AckRecord(7, 100.4, "lot-1", "drill-7", 15, None, "?"),
    RejectedRecord(7, 100.5, "too_low"),
    DisconnectedRecord(7, 100.6, "us-west-2"),
    GaveUpRecord(7, 100.7),
]


def test_every_record_starts_with_its_client_and_time() -> None:
    for record in RECORDS:
        assert record[:2] == (record.client, record.t) == (7, record.t)


def test_of_kind_keeps_the_order() -> None:
    assert [a.amount for a in of_kind(RECORDS, AckRecord)] == [12, 15]
    assert of_kind(RECORDS, GaveUpRecord) == [GaveUpRecord(7, 100.7)]
    assert of_kind(RECORDS[:1], RestoredRecord) == []


def test_records_cross_processes_as_they_are() -> None:
    # As a worker's multiprocessing queue pickles a batch.
    batch = pickle.loads(ForkingPickler.dumps(RECORDS))
    assert batch == RECORDS
    assert [type(r) for r in batch] == [type(r) for r in RECORDS]


def test_no_bigger_than_the_tuples_they_replace() -> None:
    # The old records were tuples led by their kind: ("ack", client, t, room, ...).
    for record in RECORDS:
        assert sys.getsizeof(record) <= sys.getsizeof(("kind", *record))
