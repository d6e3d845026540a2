"""The SQLite ledger: merge, queries, deletes, locks; two processes at once."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from rideout.evacuate.errors import LedgerError
from rideout.evacuate.ledger import SqliteLedger
from rideout.evacuate.model import Record
from tests.conftest import FakeClock


def row(zone: str, resource: str, kind: str = "asg", *removed: str, at: float = 1.0) -> Record:
    return Record(zone, resource, kind, removed or ("s1",), at, "op")


def test_merge_query_delete(tmp_path: Path) -> None:
    ledger = SqliteLedger.in_data_dir(tmp_path)
    ledger.merge(row("az1", "web", "asg", "s1"))
    merged = ledger.merge(row("az1", "web", "asg", "s2", "s1", at=2.0))
    assert merged.removed == ("s1", "s2")
    ledger.merge(row("az1", "fn", "lambda", "s1"))
    ledger.merge(row("az2", "web", "asg", "s3"))
    assert [(r.zone_id, r.resource) for r in ledger.records()] == [
        ("az1", "fn"), ("az1", "web"), ("az2", "web"),
    ]  # fmt: skip
    assert [r.resource for r in ledger.records(kind="lambda")] == ["fn"]
    assert [r.zone_id for r in ledger.records(kind="asg", zone_id="az2")] == ["az2"]
    assert ledger.records(zone_id="az1", kind="asg") == [merged]
    ledger.delete("az1", "web")
    ledger.delete("az1", "web")  # twice is fine
    assert len(ledger.records()) == 2
    # A second ledger object on the same file sees the same rows.
    assert SqliteLedger.in_data_dir(tmp_path).records() == ledger.records()


def test_the_kind_index_exists(tmp_path: Path) -> None:
    ledger = SqliteLedger.in_data_dir(tmp_path)
    with sqlite3.connect(ledger.path) as db:
        plan = db.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM evacuations WHERE kind = 'asg'"
        ).fetchall()
    assert "evacuations_by_kind" in str(plan)


def test_locks_are_conditional_and_expire(tmp_path: Path) -> None:
    clock = FakeClock()
    ledger = SqliteLedger(tmp_path / "l.sqlite3", clock=clock)
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
    assert ledger.lock("az1", "carol", 30)


def test_a_corrupt_file_is_a_ledger_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(LedgerError, match=r"bad\.sqlite3"):
        SqliteLedger(path)


def test_an_unreadable_row_is_a_ledger_error(tmp_path: Path) -> None:
    ledger = SqliteLedger.in_data_dir(tmp_path)
    with sqlite3.connect(ledger.path) as db:
        db.execute("INSERT INTO evacuations VALUES ('az1', 'x', 'asg', '[]', 1.0, 'op')")
    with pytest.raises(LedgerError, match="cannot read"):
        ledger.records()


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
