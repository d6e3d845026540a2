"""The evacuation ledger in a DynamoDB table (the AWS provider's; the local deployment's
is :class:`~rideout.evacuate.ledger.SqliteLedger`, with the same logical schema).

The seed's table: partition key ``zone_id`` (an AZ id), sort key ``resource`` (ARN or
name), the removed subnets as a list of strings (``removed``), ``kind`` with a global
secondary index on it (``kind-index``, range key ``zone_id``), ``at``, ``operator``,
``before`` (the subnets seen right before the first change), ``seen`` (the rest of the
network configuration seen then: a map of lists, such as ``SecurityGroupIds``) and
``outcome``. It is
created if missing (on-demand capacity) and waited for, unless ``create=False`` (a dry
run): then nothing is ever created and a missing table reads as an empty ledger.

Writes are conditional, so two operators (or an operator and autoshift) never lose each
other's changes:

- ``merge`` reads the row consistently, unites it with the new one
  (:func:`~rideout.evacuate.model.merge_records`: removed subnets are only ever added),
  and writes it back on condition that its ``version`` is still the one read (or that
  there was no row); a lost race is retried from the read, a bounded number of times.
- A zone's lock is an item of its own (partition ``lock#ZONE``, no ``kind``, so the
  index never holds it), written on condition that it does not exist, has expired, or
  is the caller's; a resource's lease likewise (partition ``lease#RESOURCE``).

Queries by zone read the table with strong consistency; a query by kind alone reads the
index, which DynamoDB keeps eventually consistent (a row written a moment ago may be
missing from it for a moment).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from rideout import _validate
from rideout.errors import InvalidArgument
from rideout.evacuate.aws._boundary import AwsSettings, calling
from rideout.evacuate.aws.errors import AwsProviderError
from rideout.evacuate.errors import LedgerError
from rideout.evacuate.model import Record, merge_records, network

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef, WaiterConfigTypeDef

__all__ = ["DEFAULT_TABLE", "KIND_INDEX", "DynamoLedger"]

DEFAULT_TABLE = "rideout-evacuations"
KIND_INDEX = "kind-index"
_LOCK_PREFIX = "lock#"
_LOCK_SORT = "lock"
_LEASE_PREFIX = "lease#"
_LEASE_SORT = "lease"
_CONDITION_FAILED = "ConditionalCheckFailedException"
_NO_TABLE = "ResourceNotFoundException"
# merge's read-unite-write loses a race only to another writer of the same row.
_MERGE_ATTEMPTS = 10


class _ConditionFailed(LedgerError):
    """A conditional write's condition did not hold (control flow inside this module)."""


class _NoTable(LedgerError):
    """The table does not exist (reads find an empty ledger; writes fail)."""


def _attr(value: str | float | list[str]) -> AttributeValueTypeDef:
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, list):
        return {"L": [{"S": v} for v in value]}
    return {"N": repr(float(value))}


class DynamoLedger:
    """A :class:`~rideout.evacuate.model.Ledger` in one DynamoDB table."""

    def __init__(
        self,
        settings: AwsSettings | None = None,
        *,
        table: str = DEFAULT_TABLE,
        client: DynamoDBClient | None = None,
        clock: Callable[[], float] = time.time,
        create: bool = True,
        wait_delay: int = 2,
        wait_attempts: int = 60,
    ) -> None:
        if client is None:
            if settings is None:
                raise InvalidArgument("DynamoLedger needs settings or a client")
            client = settings.client("dynamodb")
        self.table = _validate.text("table", table)
        self._client = client
        self._clock = clock
        self._wait: WaiterConfigTypeDef = {
            "Delay": _validate.count("wait_delay", wait_delay, low=1),
            "MaxAttempts": _validate.count("wait_attempts", wait_attempts, low=1),
        }
        if create:
            self.ensure_table()

    @contextlib.contextmanager
    def _call(self, operation: str) -> Iterator[None]:
        try:
            with calling("dynamodb", operation):
                yield
        except AwsProviderError as exc:
            if exc.code == _CONDITION_FAILED:
                raise _ConditionFailed(str(exc)) from exc
            if exc.code == _NO_TABLE:
                raise _NoTable(
                    f"the ledger table {self.table} does not exist: {exc} (it is created by"
                    " the first evacuation that is not a dry run)"
                ) from exc
            raise LedgerError(f"the ledger table {self.table}: {exc}") from exc

    # ------------------------------------------------------------------ the table

    def ensure_table(self) -> None:
        """Create the table (and its index) if it does not exist; wait until it is active;
        refuse a table of the same name with another key schema."""
        try:
            with self._call("DescribeTable"):
                described = self._client.describe_table(TableName=self.table)["Table"]
        except _NoTable:
            self._create()
            return
        keys = {k["AttributeName"]: k["KeyType"] for k in described.get("KeySchema", [])}
        if keys != {"zone_id": "HASH", "resource": "RANGE"}:
            raise LedgerError(
                f"the table {self.table} exists with keys {keys}, not the ledger's"
                " (zone_id HASH, resource RANGE): name another table"
            )
        if described.get("TableStatus") != "ACTIVE":
            self._wait_active()

    def _create(self) -> None:
        try:
            with self._call("CreateTable"):
                self._client.create_table(
                    TableName=self.table,
                    BillingMode="PAY_PER_REQUEST",
                    AttributeDefinitions=[
                        {"AttributeName": "zone_id", "AttributeType": "S"},
                        {"AttributeName": "resource", "AttributeType": "S"},
                        {"AttributeName": "kind", "AttributeType": "S"},
                    ],
                    KeySchema=[
                        {"AttributeName": "zone_id", "KeyType": "HASH"},
                        {"AttributeName": "resource", "KeyType": "RANGE"},
                    ],
                    GlobalSecondaryIndexes=[
                        {
                            "IndexName": KIND_INDEX,
                            "KeySchema": [
                                {"AttributeName": "kind", "KeyType": "HASH"},
                                {"AttributeName": "zone_id", "KeyType": "RANGE"},
                            ],
                            "Projection": {"ProjectionType": "ALL"},
                        }
                    ],
                )
        except LedgerError as exc:
            if "ResourceInUseException" not in str(exc):  # another process is creating it
                raise
        self._wait_active()

    def _wait_active(self) -> None:
        with self._call("DescribeTable (waiting for the table)"):
            self._client.get_waiter("table_exists").wait(
                TableName=self.table,
                WaiterConfig=self._wait,
            )

    # ------------------------------------------------------------------ rows

    def _record(self, item: Mapping[str, Any]) -> Record:
        try:
            return Record(
                zone_id=item["zone_id"]["S"],
                resource=item["resource"]["S"],
                kind=item["kind"]["S"],
                removed=tuple(v["S"] for v in item["removed"]["L"]),
                at=float(Decimal(item["at"]["N"])),
                operator=item["operator"]["S"],
                before=tuple(v["S"] for v in item.get("before", {}).get("L", [])),
                outcome=item.get("outcome", {}).get("S", ""),
                seen=network(
                    {
                        k: [v["S"] for v in x["L"]]
                        for k, x in item.get("seen", {}).get("M", {}).items()
                    }
                ),
            )
        except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
            raise LedgerError(
                f"the ledger table {self.table} holds an item it cannot read"
                f" ({item.get('zone_id')}, {item.get('resource')}): {exc!r}"
            ) from exc

    def _get(self, zone_id: str, resource: str) -> tuple[Record, str] | None:
        try:
            with self._call("GetItem"):
                answer = self._client.get_item(
                    TableName=self.table,
                    Key={"zone_id": {"S": zone_id}, "resource": {"S": resource}},
                    ConsistentRead=True,
                )
        except _NoTable:
            return None
        item = answer.get("Item")
        if item is None:
            return None
        return self._record(item), item.get("version", {}).get("N", "0")

    def get(self, zone_id: str, resource: str) -> Record | None:
        """The row of ``zone_id`` and ``resource``, read consistently."""
        found = self._get(zone_id, resource)
        return found[0] if found else None

    def merge(self, record: Record) -> Record:
        """Store ``record`` united with the existing row of its zone and resource, and
        return what is stored (removed subnets are only ever added)."""
        return self._write(record, lambda found: merge_records(found, record))

    def put(self, record: Record) -> None:
        """Store ``record`` as it is (replacing the row, whatever it holds)."""
        self._write(record, lambda _: record)

    def _write(self, record: Record, new: Callable[[Record | None], Record]) -> Record:
        """Write ``new(row read)`` on condition that the row is still the one read."""
        if not isinstance(record, Record):
            raise InvalidArgument(f"the ledger stores Records, not {record!r}")
        if record.zone_id.startswith((_LOCK_PREFIX, _LEASE_PREFIX)):
            raise InvalidArgument(
                f"zone_id must not start with {_LOCK_PREFIX!r} or {_LEASE_PREFIX!r}"
            )
        for _ in range(_MERGE_ATTEMPTS):
            found = self._get(record.zone_id, record.resource)
            merged = new(found[0] if found else None)
            version = int(found[1]) if found else 0
            item: dict[str, AttributeValueTypeDef] = {
                "zone_id": _attr(merged.zone_id),
                "resource": _attr(merged.resource),
                "kind": _attr(merged.kind),
                "removed": _attr(list(merged.removed)),
                "at": _attr(merged.at),
                "operator": _attr(merged.operator),
                "before": _attr(list(merged.before)),
                "outcome": _attr(merged.outcome),
                "seen": {"M": {name: _attr(list(values)) for name, values in merged.seen}},
                "version": {"N": str(version + 1)},
            }
            condition: dict[str, Any] = (
                {"ConditionExpression": "attribute_not_exists(zone_id)"}
                if found is None
                else {
                    "ConditionExpression": "#v = :v",
                    "ExpressionAttributeNames": {"#v": "version"},
                    "ExpressionAttributeValues": {":v": {"N": str(version)}},
                }
            )
            try:
                with self._call("PutItem"):
                    self._client.put_item(TableName=self.table, Item=item, **condition)
            except _ConditionFailed:
                continue  # another writer got there first: read its row and unite again
            return merged
        raise LedgerError(
            f"the ledger table {self.table}: {record.zone_id} {record.resource} changed"
            f" under {_MERGE_ATTEMPTS} writes in a row; try again"
        )

    def records(self, *, kind: str | None = None, zone_id: str | None = None) -> list[Record]:
        """The rows, by zone and resource; only those of ``kind`` / ``zone_id`` if given."""
        names = {"#k": "kind"}
        items: list[Mapping[str, Any]] = []
        if zone_id is not None:
            args: dict[str, Any] = {
                "TableName": self.table,
                "KeyConditionExpression": "zone_id = :z",
                "ExpressionAttributeValues": {":z": {"S": zone_id}},
                "ConsistentRead": True,
            }
            if kind is not None:
                args["FilterExpression"] = "#k = :k"
                args["ExpressionAttributeNames"] = names
                args["ExpressionAttributeValues"][":k"] = {"S": kind}
            operation, method = "Query", "query"
        elif kind is not None:
            args = {
                "TableName": self.table,
                "IndexName": KIND_INDEX,
                "KeyConditionExpression": "#k = :k",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": {":k": {"S": kind}},
            }
            operation, method = "Query", "query"
        else:
            args = {
                "TableName": self.table,
                "FilterExpression": "attribute_exists(#k)",
                "ExpressionAttributeNames": names,
                "ConsistentRead": True,
            }
            operation, method = "Scan", "scan"
        try:
            with self._call(operation):
                for page in self._client.get_paginator(method).paginate(**args):  # type: ignore[call-overload]
                    items.extend(page.get("Items", []))
        except _NoTable:
            return []
        found = [self._record(i) for i in items if "kind" in i]
        return sorted(found, key=lambda r: (r.zone_id, r.resource))

    def delete(self, zone_id: str, resource: str) -> None:
        """Forget one row (nothing happens if there is none)."""
        with self._call("DeleteItem"):
            self._client.delete_item(
                TableName=self.table,
                Key={"zone_id": {"S": zone_id}, "resource": {"S": resource}},
            )

    # ------------------------------------------------------------------ locks

    @staticmethod
    def _key(prefix: str, name: str, sort: str) -> dict[str, AttributeValueTypeDef]:
        return {"zone_id": {"S": prefix + name}, "resource": {"S": sort}}

    def _claim(self, key: dict[str, AttributeValueTypeDef], owner: str, ttl: float) -> bool:
        """Put the lock or lease item ``key`` for ``owner`` if it is absent, expired or
        ``owner``'s already; false if another owner holds it."""
        _validate.text("owner", owner)
        ttl = _validate.seconds("ttl", ttl)
        now = self._clock()
        try:
            with self._call("PutItem (lock)"):
                self._client.put_item(
                    TableName=self.table,
                    Item={**key, "owner": _attr(owner), "expires": _attr(now + ttl)},
                    ConditionExpression=("attribute_not_exists(zone_id) OR #o = :o OR #e <= :now"),
                    ExpressionAttributeNames={"#o": "owner", "#e": "expires"},
                    ExpressionAttributeValues={":o": _attr(owner), ":now": _attr(now)},
                )
        except _ConditionFailed:
            return False
        return True

    def _free(self, key: dict[str, AttributeValueTypeDef], owner: str) -> None:
        try:
            with self._call("DeleteItem (lock)"):
                self._client.delete_item(
                    TableName=self.table,
                    Key=key,
                    ConditionExpression="#o = :o",
                    ExpressionAttributeNames={"#o": "owner"},
                    ExpressionAttributeValues={":o": _attr(owner)},
                )
        except _ConditionFailed:
            pass  # not held, or held by another: theirs to release

    def lock(self, zone_id: str, owner: str, ttl: float) -> bool:
        """Take (or renew) ``zone_id``'s lock for ``ttl`` seconds: false if another owner
        holds an unexpired one."""
        key = self._key(_LOCK_PREFIX, _validate.text("zone_id", zone_id), _LOCK_SORT)
        return self._claim(key, owner, ttl)

    def unlock(self, zone_id: str, owner: str) -> None:
        """Release ``zone_id``'s lock if ``owner`` holds it."""
        self._free(self._key(_LOCK_PREFIX, zone_id, _LOCK_SORT), owner)

    def lease(self, resource: str, owner: str, ttl: float) -> bool:
        """Take (or renew) ``resource``'s lease for ``ttl`` seconds: false if another
        owner holds an unexpired one."""
        key = self._key(_LEASE_PREFIX, _validate.text("resource", resource), _LEASE_SORT)
        return self._claim(key, owner, ttl)

    def release(self, resource: str, owner: str) -> None:
        """Release ``resource``'s lease if ``owner`` holds it."""
        self._free(self._key(_LEASE_PREFIX, resource, _LEASE_SORT), owner)

    def lock_owner(self, zone_id: str) -> tuple[str, float] | None:
        """Who holds ``zone_id``'s unexpired lock, and until when."""
        try:
            with self._call("GetItem (lock)"):
                item = self._client.get_item(
                    TableName=self.table,
                    Key=self._key(_LOCK_PREFIX, zone_id, _LOCK_SORT),
                    ConsistentRead=True,
                ).get("Item")
        except _NoTable:
            return None
        if item is None:
            return None
        expires = float(Decimal(item["expires"]["N"]))
        if expires <= self._clock():
            return None
        return item["owner"]["S"], expires
