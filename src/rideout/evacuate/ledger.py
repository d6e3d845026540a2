"""The evacuation ledger in SQLite (the local deployment's; AWS's is a DynamoDB table with
the same logical schema).

Table ``evacuations``: primary key (zone_id, resource), an index on kind, the removed
subnets as a JSON array, time and operator. Table ``locks``: one row per zone with its
owner and expiry. Every write is one ``BEGIN IMMEDIATE`` transaction, so two processes
(two operators, or an operator and autoshift) never interleave a read-merge-write or
both take a zone's lock. Each call opens its own connection: the ledger can be shared by
threads and survives the file being recreated.
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
from rideout.evacuate.model import Record, merge_records

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
    PRIMARY KEY (zone_id, resource)
);
CREATE INDEX IF NOT EXISTS evacuations_by_kind ON evacuations (kind);
CREATE TABLE IF NOT EXISTS locks (
    zone_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires REAL NOT NULL
);
"""


class SqliteLedger:
    """A :class:`~rideout.evacuate.model.Ledger` in one SQLite file (created if missing)."""

    def __init__(
        self, path: Path, *, clock: Callable[[], float] = time.time, busy_timeout: float = 10.0
    ) -> None:
        self.path = Path(path)
        self._clock = clock
        self._timeout = _validate.seconds("busy_timeout", busy_timeout)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with self._transaction() as db:
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    db.execute(statement)
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

    def _row(self, row: tuple[object, ...]) -> Record:
        zone_id, resource, kind, removed, at, operator = row
        try:
            subnets = json.loads(str(removed))
            return Record(str(zone_id), str(resource), str(kind), tuple(subnets), at, str(operator))  # type: ignore[arg-type]
        except (ValueError, TypeError, InvalidArgument) as exc:
            raise LedgerError(f"the ledger {self.path} holds a row it cannot read: {exc}") from exc

    _COLUMNS = "zone_id, resource, kind, removed, at, operator"

    def merge(self, record: Record) -> Record:
        """Store ``record`` united with the existing row of its zone and resource."""
        with self._transaction() as db:
            found = db.execute(
                f"SELECT {self._COLUMNS} FROM evacuations WHERE zone_id = ? AND resource = ?",
                (record.zone_id, record.resource),
            ).fetchone()
            merged = merge_records(self._row(found) if found else None, record)
            db.execute(
                "INSERT OR REPLACE INTO evacuations VALUES (?, ?, ?, ?, ?, ?)",
                (
                    merged.zone_id,
                    merged.resource,
                    merged.kind,
                    json.dumps(list(merged.removed)),
                    merged.at,
                    merged.operator,
                ),
            )
        return merged

    def records(self, *, kind: str | None = None, zone_id: str | None = None) -> list[Record]:
        """The rows, by zone and resource; only those of ``kind`` / ``zone_id`` if given."""
        where, args = [], []
        if kind is not None:
            where.append("kind = ?")
            args.append(kind)
        if zone_id is not None:
            where.append("zone_id = ?")
            args.append(zone_id)
        query = f"SELECT {self._COLUMNS} FROM evacuations"
        if where:
            query += " WHERE " + " AND ".join(where)
        with self._transaction(write=False) as db:
            rows = db.execute(query + " ORDER BY zone_id, resource", args).fetchall()
        return [self._row(r) for r in rows]

    def delete(self, zone_id: str, resource: str) -> None:
        """Forget one row (nothing happens if there is none)."""
        with self._transaction() as db:
            db.execute(
                "DELETE FROM evacuations WHERE zone_id = ? AND resource = ?", (zone_id, resource)
            )

    def lock(self, zone_id: str, owner: str, ttl: float) -> bool:
        """Take (or renew) ``zone_id``'s lock for ``ttl`` seconds: false if another owner
        holds an unexpired one."""
        _validate.text("owner", owner)
        ttl = _validate.seconds("ttl", ttl)
        now = self._clock()
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT INTO locks VALUES (?, ?, ?) ON CONFLICT (zone_id) DO UPDATE SET"
                " owner = excluded.owner, expires = excluded.expires"
                " WHERE locks.owner = excluded.owner OR locks.expires <= ?",
                (zone_id, owner, now + ttl, now),
            )
            return cursor.rowcount == 1

    def unlock(self, zone_id: str, owner: str) -> None:
        """Release ``zone_id``'s lock if ``owner`` holds it."""
        with self._transaction() as db:
            db.execute("DELETE FROM locks WHERE zone_id = ? AND owner = ?", (zone_id, owner))

    def lock_owner(self, zone_id: str) -> tuple[str, float] | None:
        """Who holds ``zone_id``'s unexpired lock, and until when."""
        with self._transaction(write=False) as db:
            row = db.execute(
                "SELECT owner, expires FROM locks WHERE zone_id = ? AND expires > ?",
                (zone_id, self._clock()),
            ).fetchone()
        return (str(row[0]), float(row[1])) if row else None
