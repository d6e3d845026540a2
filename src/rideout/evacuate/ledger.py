"""The evacuation ledger in SQLite (the local deployment's; AWS's is a DynamoDB table with
the same logical schema).

Table ``evacuations``: primary key (zone_id, resource), an index on kind, the removed
subnets and the subnets seen before the change as JSON arrays, the rest of the network
configuration seen then (``seen``, a JSON object of arrays), time, operator and outcome. Table ``locks``: one row per zone with its owner and expiry; table ``leases``:
the same per resource (one writer per resource). Every write is one ``BEGIN IMMEDIATE``
transaction, so two processes (two operators, or an operator and autoshift) never
interleave a read-merge-write or both take a lock or a lease. Each call opens its own
connection: the ledger can be shared by threads and survives the file being recreated.
``create=False`` (a dry run) never creates or changes the file: a missing file reads as
an empty ledger.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rideout import _validate
from rideout.errors import InvalidArgument
from rideout.evacuate.errors import LedgerError
from rideout.evacuate.model import Record, merge_records, network

__all__ = ["LEDGER_FILE", "SqliteLedger"]

LEDGER_FILE = "evacuations.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS evacuations (
    zone_id TEXT NOT NULL,
    resource TEXT NOT NULL,
    kind TEXT NOT NULL,
    removed TEXT NOT NULL,
    at REAL NOT NULL,
    operator TEXT NOT NULL,
    before TEXT NOT NULL DEFAULT '[]',
    outcome TEXT NOT NULL DEFAULT '',
    seen TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (zone_id, resource)
);
CREATE INDEX IF NOT EXISTS evacuations_by_kind ON evacuations (kind);
CREATE TABLE IF NOT EXISTS locks (
    zone_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS leases (
    resource TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires REAL NOT NULL
);
"""
# Columns added since the first schema: (name, definition), added to older files.
_ADDED = (
    ("before", "TEXT NOT NULL DEFAULT '[]'"),
    ("outcome", "TEXT NOT NULL DEFAULT ''"),
    ("seen", "TEXT NOT NULL DEFAULT '{}'"),
)
_COLUMNS = (
    "zone_id", "resource", "kind", "removed", "at", "operator", "before", "outcome", "seen"
)  # fmt: skip


class SqliteLedger:
    """A :class:`~rideout.evacuate.model.Ledger` in one SQLite file (created if missing)."""

    def __init__(
        self,
        path: Path,
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 10.0,
        create: bool = True,
    ) -> None:
        self.path = Path(path)
        self._clock = clock
        self._timeout = _validate.seconds("busy_timeout", busy_timeout)
        if not create:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with self._transaction() as db:
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    db.execute(statement)
                have = {row[1] for row in db.execute("PRAGMA table_info(evacuations)")}
                for name, definition in _ADDED:
                    if name not in have:
                        db.execute(f"ALTER TABLE evacuations ADD COLUMN {name} {definition}")
            os.chmod(self.path, 0o600)  # what recovery restores: the operator's alone
        except OSError as exc:
            raise LedgerError(f"cannot create the ledger {self.path}: {exc}") from exc

    @classmethod
    def in_data_dir(cls, data_dir: Path, **kwargs: object) -> SqliteLedger:
        """The ledger of the deployment whose data directory is ``data_dir``."""
        return cls(Path(data_dir) / LEDGER_FILE, **kwargs)  # type: ignore[arg-type]

    @contextmanager
    def _transaction(self, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        try:
            db = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
            db.row_factory = sqlite3.Row
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open the ledger {self.path}: {exc}") from exc
        try:
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            yield db
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise LedgerError(f"the ledger {self.path} failed: {exc}") from exc
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    def _row(self, row: sqlite3.Row) -> Record:
        try:
            names = row.keys()
            return Record(
                str(row["zone_id"]), str(row["resource"]), str(row["kind"]),
                tuple(json.loads(str(row["removed"]))), row["at"], str(row["operator"]),
                tuple(json.loads(str(row["before"]))) if "before" in names else (),
                str(row["outcome"]) if "outcome" in names else "",
                network(json.loads(str(row["seen"]))) if "seen" in names else (),
            )  # fmt: skip
        except (ValueError, TypeError, InvalidArgument) as exc:
            raise LedgerError(f"the ledger {self.path} holds a row it cannot read: {exc}") from exc

    @staticmethod
    def _write(db: sqlite3.Connection, r: Record) -> None:
        db.execute(
            f"INSERT OR REPLACE INTO evacuations ({', '.join(_COLUMNS)}) VALUES"
            f" ({', '.join('?' * len(_COLUMNS))})",
            (r.zone_id, r.resource, r.kind, json.dumps(list(r.removed)), r.at, r.operator,
             json.dumps(list(r.before)), r.outcome,
             json.dumps({name: list(values) for name, values in r.seen})),
        )  # fmt: skip

    def _find(self, db: sqlite3.Connection, zone_id: str, resource: str) -> Record | None:
        found = db.execute(
            "SELECT * FROM evacuations WHERE zone_id = ? AND resource = ?", (zone_id, resource)
        ).fetchone()
        return self._row(found) if found else None

    def merge(self, record: Record) -> Record:
        """Store ``record`` united with the existing row of its zone and resource."""
        with self._transaction() as db:
            merged = merge_records(self._find(db, record.zone_id, record.resource), record)
            self._write(db, merged)
        return merged

    def put(self, record: Record) -> None:
        """Store ``record`` as it is."""
        with self._transaction() as db:
            self._write(db, record)

    def get(self, zone_id: str, resource: str) -> Record | None:
        """The row of ``zone_id`` and ``resource``, if any."""
        if not self.path.exists():
            return None
        with self._transaction(write=False) as db:
            return self._find(db, zone_id, resource)

    def records(self, *, kind: str | None = None, zone_id: str | None = None) -> list[Record]:
        """The rows, by zone and resource; only those of ``kind`` / ``zone_id`` if given."""
        where, args = [], []
        if kind is not None:
            where.append("kind = ?")
            args.append(kind)
        if zone_id is not None:
            where.append("zone_id = ?")
            args.append(zone_id)
        query = "SELECT * FROM evacuations"
        if where:
            query += " WHERE " + " AND ".join(where)
        if not self.path.exists():
            return []
        with self._transaction(write=False) as db:
            rows = db.execute(query + " ORDER BY zone_id, resource", args).fetchall()
        return [self._row(r) for r in rows]

    def delete(self, zone_id: str, resource: str) -> None:
        """Forget one row (nothing happens if there is none)."""
        with self._transaction() as db:
            db.execute(
                "DELETE FROM evacuations WHERE zone_id = ? AND resource = ?", (zone_id, resource)
            )

    def _claim(self, table: str, key: str, value: str, owner: str, ttl: float) -> bool:
        """Take or renew the row ``value`` of ``table`` (a lock or a lease) for
        ``owner``: false if another owner holds an unexpired one."""
        _validate.text(key, value)
        _validate.text("owner", owner)
        ttl = _validate.seconds("ttl", ttl)
        now = self._clock()
        with self._transaction() as db:
            cursor = db.execute(
                f"INSERT INTO {table} VALUES (?, ?, ?) ON CONFLICT ({key}) DO UPDATE SET"
                " owner = excluded.owner, expires = excluded.expires"
                f" WHERE {table}.owner = excluded.owner OR {table}.expires <= ?",
                (value, owner, now + ttl, now),
            )
            return cursor.rowcount == 1

    def _free(self, table: str, key: str, value: str, owner: str) -> None:
        with self._transaction() as db:
            db.execute(f"DELETE FROM {table} WHERE {key} = ? AND owner = ?", (value, owner))

    def lock(self, zone_id: str, owner: str, ttl: float) -> bool:
        """Take (or renew) ``zone_id``'s lock for ``ttl`` seconds: false if another owner
        holds an unexpired one."""
        return self._claim("locks", "zone_id", zone_id, owner, ttl)

    def unlock(self, zone_id: str, owner: str) -> None:
        """Release ``zone_id``'s lock if ``owner`` holds it."""
        self._free("locks", "zone_id", zone_id, owner)

    def lease(self, resource: str, owner: str, ttl: float) -> bool:
        """Take (or renew) ``resource``'s lease for ``ttl`` seconds: false if another
        owner holds an unexpired one."""
        return self._claim("leases", "resource", resource, owner, ttl)

    def release(self, resource: str, owner: str) -> None:
        """Release ``resource``'s lease if ``owner`` holds it."""
        self._free("leases", "resource", resource, owner)

    def lock_owner(self, zone_id: str) -> tuple[str, float] | None:
        """Who holds ``zone_id``'s unexpired lock, and until when."""
        if not self.path.exists():
            return None
        with self._transaction(write=False) as db:
            row = db.execute(
                "SELECT owner, expires FROM locks WHERE zone_id = ? AND expires > ?",
                (zone_id, self._clock()),
            ).fetchone()
        return (str(row[0]), float(row[1])) if row else None
