"""The ledger contract, held by both ledgers: the SQLite one (a file in a tmp dir) and
the DynamoDB one (moto in server mode, real boto3 over HTTP, as tests/evacuate/aws/);
then the SQLite ledger's own: its index, a corrupt file, two processes at once."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rideout.evacuate.dynamo import DynamoLedger
from rideout.evacuate.errors import LedgerError
from rideout.evacuate.ledger import SqliteLedger
from rideout.evacuate.model import Record, network
from tests.conftest import FakeClock, examples
from tests.evacuate.aws.conftest import SESSION, aws, moto_server  # noqa: F401 (fixtures)

AnyLedger = SqliteLedger | DynamoLedger


def row(zone: str, resource: str, kind: str = "asg", *removed: str, at: float = 1.0) -> Record:
    return Record(zone, resource, kind, removed or ("s1",), at, "op")


@dataclass
class Backend:
    """One ledger kind: ``open`` makes a ledger object on the same store each call;
    ``plant_unreadable`` writes, behind the ledger's back, a row it cannot read."""

    name: str
    open: Callable[..., AnyLedger]
    plant_unreadable: Callable[[AnyLedger], None]


def _sqlite(tmp_path: Path) -> Backend:
    def plant(ledger: AnyLedger) -> None:
        assert isinstance(ledger, SqliteLedger)
        with sqlite3.connect(ledger.path) as db:
            db.execute(
                "INSERT INTO evacuations (zone_id, resource, kind, removed, at, operator)"
                " VALUES ('az1', 'x', 'asg', '[]', 1.0, 'op')"
            )

    return Backend("sqlite", lambda **kw: SqliteLedger.in_data_dir(tmp_path, **kw), plant)


def _dynamodb(request: pytest.FixtureRequest) -> Backend:
    settings = request.getfixturevalue("aws")  # starts moto only for this backend

    def plant(ledger: AnyLedger) -> None:
        assert isinstance(ledger, DynamoLedger)
        SESSION.client("dynamodb").put_item(
            TableName=ledger.table,
            Item={"zone_id": {"S": "az1"}, "resource": {"S": "x"}, "kind": {"S": "asg"}},
        )

    return Backend(
        "dynamodb",
        lambda **kw: DynamoLedger(settings, wait_delay=1, wait_attempts=30, **kw),
        plant,
    )


@pytest.fixture(params=["sqlite", pytest.param("dynamodb", marks=pytest.mark.aws)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return _sqlite(tmp_path) if request.param == "sqlite" else _dynamodb(request)


def test_merge_query_delete(backend: Backend) -> None:
    ledger = backend.open()
    ledger.merge(row("az1", "web", "asg", "s1"))
    merged = ledger.merge(row("az1", "web", "asg", "s2", "s1", at=2.0))
    assert merged.removed == ("s1", "s2")
    assert merged.at == 2.0
    ledger.merge(row("az1", "fn", "lambda", "s1"))
    ledger.merge(row("az2", "web", "asg", "s3"))
    assert ledger.lock("az1", "alice", 60)  # a lock is never a record
    assert [(r.zone_id, r.resource) for r in ledger.records()] == [
        ("az1", "fn"), ("az1", "web"), ("az2", "web"),
    ]  # fmt: skip
    assert [r.resource for r in ledger.records(kind="lambda")] == ["fn"]
    assert [r.zone_id for r in ledger.records(kind="asg")] == ["az1", "az2"]
    assert [r.zone_id for r in ledger.records(kind="asg", zone_id="az2")] == ["az2"]
    assert ledger.records(zone_id="az1", kind="asg") == [merged]
    ledger.delete("az1", "web")
    ledger.delete("az1", "web")  # twice is fine
    assert len(ledger.records()) == 2
    # A second ledger object on the same store sees the same rows.
    assert backend.open().records() == ledger.records()


def test_what_the_first_change_saw_is_stored_and_kept(backend: Backend) -> None:
    """``before`` and ``seen`` (security groups, public IP) round-trip and stay the first
    change's: a later merge that saw the resource changed does not replace them."""
    ledger = backend.open()
    seen = network({"securityGroups": ["sg-1", "sg-2"], "assignPublicIp": "DISABLED"})
    first = Record("az1", "svc", "ecs", ("s1",), 1.0, "alice", ("s1", "s2"), "pending", seen)
    assert ledger.merge(first) == first
    later = Record("az1", "svc", "ecs", ("s3",), 2.0, "bob", ("s2", "s3"), "removed")
    (stored,) = backend.open().records()
    assert stored == first
    stored = ledger.merge(later)
    assert (stored.before, stored.seen, stored.outcome) == (("s1", "s2"), seen, "removed")
    assert ledger.get("az1", "svc") == stored


def test_an_earlier_runs_subnets_are_never_lost(backend: Backend) -> None:
    """A re-run that removes nothing new, or other subnets, only adds to the row."""
    ledger = backend.open()
    ledger.merge(row("az1", "web", "asg", "s1", "s2"))
    assert ledger.merge(row("az1", "web", "asg", "s3", at=5.0)).removed == ("s1", "s2", "s3")
    assert ledger.merge(row("az1", "web", "asg", "s2", at=3.0)).removed == ("s1", "s2", "s3")
    (stored,) = ledger.records()
    assert stored.removed == ("s1", "s2", "s3")
    assert stored.at == 5.0


def test_locks_are_conditional_and_expire(backend: Backend) -> None:
    clock = FakeClock()
    ledger = backend.open(clock=clock)
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


def test_leases_are_per_resource_conditional_and_expire(backend: Backend) -> None:
    """One writer per resource (issue #30): the lease the engine holds while it reads,
    checks and writes a resource, apart from the zones' locks."""
    clock = FakeClock()
    ledger = backend.open(clock=clock)
    assert ledger.lease("asg/web", "alice", 30)
    assert not ledger.lease("asg/web", "bob", 30)
    assert ledger.lease("ecs/api", "bob", 30)  # another resource
    assert ledger.lock("az1", "bob", 30)  # a zone's lock is not a resource's lease
    assert ledger.lease("asg/web", "alice", 30)  # renewed
    ledger.release("asg/web", "bob")  # not bob's: nothing happens
    assert not ledger.lease("asg/web", "bob", 30)
    clock.advance(31)
    assert ledger.lease("asg/web", "bob", 30)  # alice's expired
    ledger.release("asg/web", "bob")
    assert ledger.lease("asg/web", "carol", 30)
    assert ledger.records() == []


def test_a_lock_refuses_bad_arguments(backend: Backend) -> None:
    ledger = backend.open()
    with pytest.raises(ValueError, match="owner"):
        ledger.lock("az1", "", 30)
    with pytest.raises(ValueError, match="ttl"):
        ledger.lock("az1", "alice", -1)


def test_an_unreadable_row_is_a_ledger_error(backend: Backend) -> None:
    ledger = backend.open()
    backend.plant_unreadable(ledger)
    with pytest.raises(LedgerError, match="cannot read"):
        ledger.records()


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=30)


@settings(
    max_examples=examples(15),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(resource=names, removed=st.lists(names, min_size=1, max_size=5, unique=True))
def test_any_text_round_trips(backend: Backend, resource: str, removed: list[str]) -> None:
    ledger = backend.open()  # the first example creates the store, the others find it
    stored = ledger.merge(Record("az1", resource, "lambda", tuple(removed), 1.0, "op"))
    assert stored.removed == tuple(removed)
    assert stored in ledger.records(zone_id="az1")
    ledger.delete("az1", resource)


# ------------------------------------------------------------------ SQLite's own


def test_the_kind_index_exists(tmp_path: Path) -> None:
    ledger = SqliteLedger.in_data_dir(tmp_path)
    with sqlite3.connect(ledger.path) as db:
        plan = db.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM evacuations WHERE kind = 'asg'"
        ).fetchall()
    assert "evacuations_by_kind" in str(plan)


def test_a_corrupt_file_is_a_ledger_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(LedgerError, match=r"bad\.sqlite3"):
        SqliteLedger(path)


def test_a_file_of_the_first_schema_is_brought_up_to_date(tmp_path: Path) -> None:
    """A ledger written before rows recorded ``before``, ``outcome`` and ``seen`` keeps
    its rows: the columns are added, the old rows read with them empty."""
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE evacuations (zone_id TEXT NOT NULL, resource TEXT NOT NULL,"
            " kind TEXT NOT NULL, removed TEXT NOT NULL, at REAL NOT NULL,"
            " operator TEXT NOT NULL, PRIMARY KEY (zone_id, resource))"
        )
        db.execute("INSERT INTO evacuations VALUES ('az1', 'web', 'asg', '[\"s1\"]', 1.0, 'al')")
    (row,) = SqliteLedger(path).records()
    assert row == Record("az1", "web", "asg", ("s1",), 1.0, "al")
    seen = network({"SecurityGroupIds": ["sg-1"]})
    merged = SqliteLedger(path).merge(
        Record("az1", "web", "asg", ("s2",), 2.0, "bo", ("s2", "s3"), "removed", seen)
    )
    assert (merged.removed, merged.before, merged.seen) == (("s1", "s2"), ("s2", "s3"), seen)


HAMMER = """
import sys
from pathlib import Path
from rideout.evacuate.ledger import SqliteLedger
from rideout.evacuate.model import Record
ledger = SqliteLedger(Path(sys.argv[1]))
for i in range(40):
    ledger.merge(Record("az1", "shared", "asg", (f"{sys.argv[2]}-{i}",), float(i), sys.argv[2]))
"""

GRAB = """
import sys
from pathlib import Path
from rideout.evacuate.ledger import SqliteLedger
print(SqliteLedger(Path(sys.argv[1])).lock("az1", sys.argv[2], 60))
"""


def _run_all(script: str, path: Path, owners: list[str]) -> list[str]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(path), o], stdout=subprocess.PIPE, text=True
        )
        for o in owners
    ]
    outputs = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        outputs.append(out.strip())
    return outputs


def test_two_processes_merging_the_same_row_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    SqliteLedger(path)
    _run_all(HAMMER, path, ["w0", "w1"])
    (record,) = SqliteLedger(path).records()
    assert len(record.removed) == 80


def test_of_processes_racing_for_a_lock_one_wins(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    SqliteLedger(path)
    owners = [f"p{i}" for i in range(4)]
    won = [o for o, out in zip(owners, _run_all(GRAB, path, owners), strict=True) if out == "True"]
    assert len(won) == 1
    assert SqliteLedger(path).lock_owner("az1")[0] == won[0]  # type: ignore[index]
