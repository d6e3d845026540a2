"""The DynamoDB ledger against moto in server mode: the seed's table (zone id, resource,
a kind index), union merges under a version condition, conditional locks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rideout.evacuate.aws import AwsSettings
from rideout.evacuate.dynamo import KIND_INDEX, DynamoLedger
from rideout.evacuate.errors import LedgerError
from rideout.evacuate.model import Record
from tests.conftest import FakeClock
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


def test_merge_query_delete(aws: AwsSettings) -> None:
    ledger = fast(aws)
    ledger.merge(row("az1", "web", "asg", "s1"))
    merged = ledger.merge(row("az1", "web", "asg", "s2", "s1", at=2.0))
    assert merged.removed == ("s1", "s2")
    assert merged.at == 2.0
    ledger.merge(row("az1", "fn", "lambda", "s1"))
    ledger.merge(row("az2", "web", "asg", "s3"))
    assert ledger.lock("az1", "alice", 60)  # a lock item is never a record
    assert [(r.zone_id, r.resource) for r in ledger.records()] == [
        ("az1", "fn"),
        ("az1", "web"),
        ("az2", "web"),
    ]
    assert [r.resource for r in ledger.records(kind="lambda")] == ["fn"]
    assert [r.zone_id for r in ledger.records(kind="asg")] == ["az1", "az2"]
    assert [r.zone_id for r in ledger.records(kind="asg", zone_id="az2")] == ["az2"]
    assert ledger.records(zone_id="az1", kind="asg") == [merged]
    ledger.delete("az1", "web")
    ledger.delete("az1", "web")  # twice is fine
    assert len(ledger.records()) == 2


def test_an_earlier_runs_subnets_are_never_lost(aws: AwsSettings) -> None:
    """A re-run that removes nothing new, or other subnets, only adds to the row."""
    ledger = fast(aws)
    ledger.merge(row("az1", "web", "asg", "s1", "s2"))
    assert ledger.merge(row("az1", "web", "asg", "s3", at=5.0)).removed == ("s1", "s2", "s3")
    assert ledger.merge(row("az1", "web", "asg", "s2", at=3.0)).removed == ("s1", "s2", "s3")
    (stored,) = ledger.records()
    assert stored.removed == ("s1", "s2", "s3")
    assert stored.at == 5.0


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


def test_locks_are_conditional_and_expire(aws: AwsSettings) -> None:
    clock = FakeClock()
    ledger = fast(aws, clock=clock)
    assert ledger.lock("az1", "alice", 30)
    assert not ledger.lock("az1", "bob", 30)
    assert ledger.lock("az2", "bob", 30)  # another zone
    assert ledger.lock("az1", "alice", 30)  # renewed
    assert ledger.lock_owner("az1") == ("alice", clock.now + 30)
    ledger.unlock("az1", "bob")  # not bob's: nothing happens
    assert not ledger.lock("az1", "bob", 30)
    clock.advance(31)
    assert ledger.lock_owner("az1") is None
    assert ledger.lock("az1", "bob", 30)  # alice's expired
    ledger.unlock("az1", "bob")
    assert ledger.lock_owner("az1") is None
    assert ledger.lock("az1", "carol", 30)
    assert ledger.records() == []


def test_a_table_with_other_keys_is_refused(aws: AwsSettings) -> None:
    SESSION.client("dynamodb").create_table(
        TableName="other",
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
    )
    with pytest.raises(LedgerError, match="not the ledger's"):
        fast(aws, table="other")


def test_an_unreadable_item_is_a_ledger_error(aws: AwsSettings) -> None:
    ledger = fast(aws)
    SESSION.client("dynamodb").put_item(
        TableName=ledger.table,
        Item={"zone_id": {"S": "az1"}, "resource": {"S": "x"}, "kind": {"S": "asg"}},
    )
    with pytest.raises(LedgerError, match="cannot read"):
        ledger.records()


def test_an_unreachable_endpoint_is_a_ledger_error(aws: AwsSettings) -> None:
    # Port 9 (discard) on loopback: nothing listens, the connection is refused.
    dead = AwsSettings(region=aws.region, endpoint_url="http://127.0.0.1:9", max_attempts=1)
    with pytest.raises(LedgerError, match="rideout-evacuations"):
        DynamoLedger(dead)


def test_bad_arguments(aws: AwsSettings) -> None:
    ledger = fast(aws)
    with pytest.raises(ValueError, match="owner"):
        ledger.lock("az1", "", 30)
    with pytest.raises(ValueError, match="ttl"):
        ledger.lock("az1", "alice", -1)
    with pytest.raises(ValueError, match="lock#"):
        ledger.merge(row("lock#az1", "x"))
    with pytest.raises(ValueError, match="settings or a client"):
        DynamoLedger()


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=30)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(resource=names, removed=st.lists(names, min_size=1, max_size=5, unique=True))
def test_any_text_round_trips(aws: AwsSettings, resource: str, removed: list[str]) -> None:
    ledger = fast(aws)  # the first example creates the table, the others find it
    stored = ledger.merge(Record("az1", resource, "lambda", tuple(removed), 1.0, "op"))
    assert stored.removed == tuple(removed)
    assert stored in ledger.records(zone_id="az1")
    ledger.delete("az1", resource)
