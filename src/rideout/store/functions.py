"""rideout's Lua as one Redis Functions library, and the one way the app calls it.

On Redis 7.0+ and Valkey every script the app user runs is a function of the library
``rideout`` (:data:`LIBRARY`), loaded with ``FUNCTION LOAD REPLACE`` by the controller
user (:func:`ensure_library`: ``rideout up`` runs it on each writer it starts; functions
persist in the AOF and replicate to replicas). The app user may then run ``FCALL`` only,
not ``EVAL``/``EVALSHA``/``SCRIPT LOAD``: no Lua but rideout's runs with its rights
(:mod:`.acl`). On Redis 6.2, which has no functions, the same scripts are called with
``EVALSHA`` as before.

Whether a server has functions is decided once per connection pool, from its
``INFO server`` (:func:`runs_functions`; :func:`forget_server` when a pool is pointed at
another server), by the same threshold the local servers' ACL files are chosen by
(:data:`FUNCTIONS_SINCE`).

A function that may write is refused on a read-only replica before it runs (7.0+),
where ``EVALSHA`` ran a script until its first write. So each such routine is also
registered read-only (``no-writes``) as ``NAME_ro``; a call refused with ``READONLY``
runs that twin, which goes as far as the script did under ``EVALSHA`` (a fenced bid
still answers ``stale``, a probe ``replica``), and a write it then attempts is refused
as ``READONLY`` too. A routine that only reads is registered ``no-writes`` alone.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import redis.asyncio as aioredis
from redis.exceptions import ReadOnlyError, ResponseError

from rideout.store import room_scripts, scripts
from rideout.store.errors import StoreError

__all__ = [
    "BID",
    "DEMO_NAME_CLAIM",
    "FUNCTIONS_SINCE",
    "GET_ROOM",
    "GET_SESSION",
    "IDEMPOTENCY_CLAIM",
    "IDEMPOTENCY_FINISH",
    "LAST_OFFSET",
    "LIBRARY",
    "LIBRARY_NAME",
    "OIDC",
    "PROBE",
    "READ_REVOCATIONS",
    "ROOM",
    "ROUTINES",
    "LibraryMissing",
    "Routine",
    "StoreFunction",
    "as_replica_refusal",
    "ensure_library",
    "forget_server",
    "library_text",
    "missing_library",
    "runs_functions",
    "version_runs_functions",
]

FUNCTIONS_SINCE: Final = (7, 0, 0)
"""Redis Functions and read-only key patterns (``%R~``): Redis 7.0 (Valkey reports a
``redis_version`` of 7.2.4)."""

LIBRARY_NAME: Final = "rideout"

# Commands that change nothing: a routine calling no other is registered read-only.
_READS: Final = frozenset({
    "get", "hget", "hmget", "hgetall", "exists", "xlen", "xrange", "xrevrange", "time",
    "ttl", "pttl", "smembers", "zcount", "zcard", "zrange", "zrangebyscore",
})  # fmt: skip
_CALLED_RE: Final = re.compile(r"redis\.p?call\('([A-Za-z]+)'")
_NAME_RE: Final = re.compile(r"[a-z][a-z0-9_]*")
_READ_ONLY_SCRIPT: Final = "not allowed from read-only scripts"
_NOT_FOUND: Final = "Function not found"


class LibraryMissing(StoreError):
    """The server has functions but not rideout's library (or not this version of it)."""


@dataclass(frozen=True, slots=True)
class Routine:
    """One script: its function's name in the library, and its Lua (``KEYS``, ``ARGV``)."""

    name: str
    source: str

    def __post_init__(self) -> None:
        if not _NAME_RE.fullmatch(self.name):
            raise ValueError(f"a function name is lowercase letters, digits and _: {self.name!r}")

    @property
    def read_only(self) -> bool:
        """Whether it calls only commands that change nothing (runs on a replica)."""
        return {c.lower() for c in _CALLED_RE.findall(self.source)} <= _READS

    @property
    def replica_name(self) -> str:
        """The function a read-only replica runs: itself, or its read-only twin."""
        return self.name if self.read_only else self.name + "_ro"


BID: Final = Routine("rideout_bid", scripts.BID)
GET_ROOM: Final = Routine("rideout_get_room", scripts.GET_ROOM)
GET_SESSION: Final = Routine("rideout_get_session", scripts.GET_SESSION)
LAST_OFFSET: Final = Routine("rideout_last_offset", scripts.LAST_OFFSET)
PROBE: Final = Routine("rideout_probe", scripts.PROBE)
READ_REVOCATIONS: Final = Routine("rideout_read_revocations", scripts.READ_REVOCATIONS)
IDEMPOTENCY_CLAIM: Final = Routine("rideout_idempotency_claim", scripts.IDEMPOTENCY_CLAIM)
IDEMPOTENCY_FINISH: Final = Routine("rideout_idempotency_finish", scripts.IDEMPOTENCY_FINISH)
ROOM: Final[Mapping[str, Routine]] = {
    name: Routine(f"rideout_room_{name.lower()}", getattr(room_scripts, name))
    for name in room_scripts.__all__
}
"""The waiting room's scripts (:mod:`.room_scripts`), by their names there."""
OIDC: Final[Mapping[str, Routine]] = {
    name: Routine(f"rideout_oidc_{name.lower()}", getattr(scripts, f"OIDC_{name}"))
    for name in ("TAKE", "TAKE_CODE", "PUT", "READ", "BIND")
}
"""The waiting room's OpenID adapter's one-key scripts."""

DEMO_NAME_CLAIM: Final = Routine("rideout_demo_name_claim", scripts.DEMO_NAME_CLAIM)

ROUTINES: Final[tuple[Routine, ...]] = (
    BID, GET_ROOM, GET_SESSION, LAST_OFFSET, PROBE, READ_REVOCATIONS, IDEMPOTENCY_CLAIM,
    IDEMPOTENCY_FINISH, DEMO_NAME_CLAIM, *ROOM.values(), *OIDC.values(),
)  # fmt: skip
"""Every script the app user runs; the controller's own (REVOKE, the epoch's, the
control plane's lease) stay ``EVAL``."""


def library_text(routines: Sequence[Routine] = ROUTINES, name: str = LIBRARY_NAME) -> str:
    """The library's code, for ``FUNCTION LOAD``: each body unchanged, in a function."""
    lines = [
        f"#!lua name={name}",
        "-- rideout's scripts (rideout.store.functions): FUNCTION LOAD REPLACE loads it.",
    ]
    for routine in routines:
        lines += [f"local function {routine.name}(KEYS, ARGV)", routine.source.strip("\n"), "end"]
        names = {routine.name: routine.read_only, routine.replica_name: True}
        for name, read_only in names.items():
            flags = "'no-writes'" if read_only else ""
            lines.append(
                f"redis.register_function{{function_name='{name}', callback={routine.name}, "
                f"flags={{{flags}}}}}"
            )
    return "\n".join(lines) + "\n"


LIBRARY: Final = library_text()
"""The library as this version of rideout loads it."""


# --------------------------------------------------------------- the server's version


def version_runs_functions(version: str) -> bool:
    """Whether a server of ``redis_version`` `version` (``7.0.15``) has functions."""
    parts = tuple(int(p) for p in re.findall(r"\d+", version)[:3])
    return parts >= FUNCTIONS_SINCE


_RUNS_FUNCTIONS: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


async def runs_functions(client: aioredis.Redis) -> bool:
    """Whether `client`'s server has functions: its ``INFO server``, asked once per
    connection pool (the answer is kept until :func:`forget_server`)."""
    pool = client.connection_pool
    known = _RUNS_FUNCTIONS.get(pool)
    if known is None:
        info = await client.info("server")
        known = _RUNS_FUNCTIONS[pool] = version_runs_functions(str(info.get("redis_version", "")))
    return known


def forget_server(client: aioredis.Redis) -> None:
    """`client`'s pool now reaches another server: ask it again."""
    _RUNS_FUNCTIONS.pop(client.connection_pool, None)


# ---------------------------------------------------------------------------- loading


def _where(client: aioredis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis at {kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


def _str(value: object) -> str | None:
    return value.decode() if isinstance(value, bytes) else value if isinstance(value, str) else None


async def ensure_library(client: aioredis.Redis) -> bool:
    """Load :data:`LIBRARY` unless the server has it as it is; whether it was loaded.

    `client` is the controller user's (it may ``FUNCTION LIST`` and ``FUNCTION LOAD``) on
    a writer. On a server without functions (6.2) nothing is done (False).
    """
    if not await runs_functions(client):
        return False
    found: Any = await client.function_list(library=LIBRARY_NAME, withcode=True)
    for library in found or []:
        fields = (
            library
            if isinstance(library, dict)
            else dict(zip(library[::2], library[1::2], strict=True))
        )
        name, code = (_str(fields.get(k)) for k in ("library_name", "library_code"))
        if name == LIBRARY_NAME and code == LIBRARY:
            return False
    await client.function_load(LIBRARY, replace=True)
    return True


# ---------------------------------------------------------------------------- calling


def missing_library(exc: BaseException, routine: Routine, client: aioredis.Redis) -> BaseException:
    """`exc`, or for ``Function not found`` a :class:`LibraryMissing` that says what to do."""
    if isinstance(exc, ResponseError) and _NOT_FOUND in str(exc):
        return LibraryMissing(
            f"function {routine.name} is not on the {_where(client)} (rideout's function "
            f"library '{LIBRARY_NAME}' is missing or older than this rideout): load it as "
            "the controller user, as `rideout up` does on every writer it starts "
            "(rideout.store.functions.ensure_library)"
        )
    return exc


def as_replica_refusal(exc: BaseException) -> BaseException:
    """A replica's refusal of a routine's write as what a replica says of any write
    (:class:`~redis.exceptions.ReadOnlyError`): a read-only twin's refused write, or,
    through ``EVALSHA`` (Redis 6.2), a script's write refused with an error that wraps
    the replica's ``-READONLY`` in "Error running script"."""
    if isinstance(exc, ResponseError) and not isinstance(exc, ReadOnlyError):
        text = str(exc)
        if _READ_ONLY_SCRIPT in text or "READONLY" in text:
            return ReadOnlyError(f"READONLY a read-only replica refused the write ({exc})")
    return exc


class StoreFunction:
    """A routine called on one client: ``FCALL`` where the server has functions (the
    read-only twin after a replica's ``READONLY``), else ``EVALSHA``."""

    def __init__(self, client: aioredis.Redis, routine: Routine) -> None:
        self.client = client
        self.routine = routine
        self.script = client.register_script(routine.source)

    async def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Any:
        if not await runs_functions(self.client):
            try:
                return await self.script(keys=keys, args=args)
            except ResponseError as exc:
                refusal = as_replica_refusal(exc)
                if refusal is exc:
                    raise
                raise refusal from exc
        name = self.routine.name
        while True:
            try:
                return await self.client.fcall(name, len(keys), *keys, *args)
            except ReadOnlyError:
                if name == self.routine.replica_name:
                    raise
                name = self.routine.replica_name  # refused before it ran: the twin
            except ResponseError as exc:
                raise as_replica_refusal(missing_library(exc, self.routine, self.client)) from exc
