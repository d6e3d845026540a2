"""The DynamoDB ledger against moto in server mode: the seed's table (zone id, resource,
a kind index), union merges under a version condition. What both ledgers must do
(merges, queries, conditional locks, round trips) is the contract in
tests/evacuate/test_ledger.py, run against this ledger too."""

from __future__ import annotations

from typing import Any

import pytest

from rideout.evacuate.aws import AwsSettings
from rideout.evacuate.dynamo import KIND_INDEX, DynamoLedger
from rideout.evacuate.errors import LedgerError
from rideout.evacuate.model import Record
from tests.evacuate.aws.conftest import SESSION


def row(zone: str, resource: str, kind: str = "asg", *removed: str, at: float = 1.0) -> Record:
    return Record(zone, resource, kind, removed or ("s1",), at, "op")


def fast(aws: AwsSettings, **kwargs: Any) -> DynamoLedger:
    return DynamoLedger(aws, wait_delay=1, wait_attempts=30, **kwargs)


def test_the_table_has_the_seeds_schema(aws: AwsSettings) -> None:
    ledger = fast(aws, table="evac")
    table = SESSION.client("dynamodb").describe_table(TableName="evac")["Table"]
    assert {k["AttributeName"]: k["KeyType"] for k in table["KeySchema"]} == {
        "zone_id": "HASH",
        "resource": "RANGE",
    }
    (index,) = table["GlobalSecondaryIndexes"]
    assert index["IndexName"] == KIND_INDEX
    assert index["KeySchema"][0] == {"AttributeName": "kind", "KeyType": "HASH"}
    ledger.merge(row("use1-az1", "web"))
    # A second ledger on the existing table finds it and reads the same rows.
    assert fast(aws, table="evac").records() == ledger.records()


class Interloper:
    """A client whose next ``put_item`` lets another writer merge first: the lost race
    a conditional write must detect, made deterministic."""

    def __init__(self, client: Any, other: DynamoLedger, record: Record) -> None:
        self._client = client
        self._other = other
        self._record: Record | None = record
        self.puts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def put_item(self, **kwargs: Any) -> Any:
        self.puts += 1
        if self._record is not None:
            record, self._record = self._record, None
            self._other.merge(record)
        return self._client.put_item(**kwargs)


def test_a_lost_race_is_retried_and_loses_nothing(aws: AwsSettings) -> None:
    first = fast(aws)
    first.merge(row("az1", "web", "asg", "s1"))
    client = Interloper(aws.client("dynamodb"), first, row("az1", "web", "asg", "s2"))
    racing = DynamoLedger(client=client, create=False)  # type: ignore[arg-type]
    merged = racing.merge(row("az1", "web", "asg", "s3"))
    assert client.puts == 2  # the first write's condition failed; the second held
    assert set(merged.removed) == {"s1", "s2", "s3"}
    assert first.records()[0].removed == merged.removed


def test_racing_creators_of_a_new_row_both_count(aws: AwsSettings) -> None:
    first = fast(aws)
    client = Interloper(aws.client("dynamodb"), first, row("az9", "fn", "lambda", "a"))
    racing = DynamoLedger(client=client, create=False)  # type: ignore[arg-type]
    assert set(racing.merge(row("az9", "fn", "lambda", "b")).removed) == {"a", "b"}


def test_a_table_with_other_keys_is_refused(aws: AwsSettings) -> None:
    SESSION.client("dynamodb").create_table(
        TableName="other",
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
    )
    with pytest.raises(LedgerError, match="not the ledger's"):
        fast(aws, table="other")


def test_an_unreachable_endpoint_is_a_ledger_error(aws: AwsSettings) -> None:
    # Port 9 (discard) on loopback: nothing listens, the connection is refused.
    dead = AwsSettings(region=aws.region, endpoint_url="http://127.0.0.1:9", max_attempts=1)
    with pytest.raises(LedgerError, match="rideout-evacuations"):
        DynamoLedger(dead)


def test_bad_arguments(aws: AwsSettings) -> None:
    """DynamoDB's own refusals (the lock's owner and ttl: the ledger contract,
    tests/evacuate/test_ledger.py)."""
    ledger = fast(aws)
    with pytest.raises(ValueError, match="lock#"):
        ledger.merge(row("lock#az1", "x"))
    with pytest.raises(ValueError, match="settings or a client"):
        DynamoLedger()
