"""Who may do what in rideout's Redis: the ACL users, their credentials, the server's files.

Every redis-server rideout starts has its default user switched off: a connection that
has not authenticated gets ``NOAUTH`` for every command, and nobody can authenticate as
it (it keeps every right only for the server's own replay of its append-only file:
:data:`DEFAULT_USER_LINE`). Four users, each allowed only
the commands and keys its part sends (:data:`RULES`; every other command is denied,
CONFIG, DEBUG, MODULE, ACL, FLUSHALL, SAVE, SHUTDOWN, KEYS, MONITOR, MIGRATE and
CLIENT among them):

``rideout-app``
    the app servers: rideout's scripts (:mod:`.scripts`, :mod:`.room_scripts`; on Redis
    7.0+ the functions of rideout's library, called with FCALL, on 6.2 EVALSHA after
    SCRIPT LOAD; followed by WAIT in sync mode), the commands those scripts run (Redis
    checks them with the caller's rights),
    the hub's XREAD, the epoch's GET, a room offset's HGET, ``/health``'s INFO, the
    store probe's script (the canary's key, ``rideout:canary:*``) and the waiting room's
    scripts and reads (its keys only: ``rideout:wr:*``).
``rideout-replication``
    a replica's link to its master (PSYNC, REPLCONF, PING). Every server authenticates
    with it (``masteruser``/``masterauth``): any of them can become a replica.
``rideout-controller``
    the failover controller and the supervisor: REPLICAOF, FAILOVER, INFO, the epoch
    and its copies (GET, SET, the script that raises them), on 7.0+ loading the function library
    (FUNCTION LIST, FUNCTION LOAD: :func:`.functions.ensure_library`) and reading room streams (SCAN, XRANGE,
    XREVRANGE) to count the writes a demotion discards; in external mode also the
    control plane's lease and state (``rideout:{controlplane}:*``, in its own Redis).
``rideout-monitor``
    read-only: PING, INFO, the epoch and room streams (``status``, readiness, the drill).

Passwords are 256 random bits, one file per user (mode 0600) in ``KEYS_DIR/redis/``,
made once and kept, so data and credentials survive ``down``/``up``. The ACL file the
server reads holds only their SHA-256 (``#<hex>``). The server's config file holds the
replication password itself, as ``masterauth`` needs it; it is mode 0600 too and named
by path, so the password never shows in a process list. Both are written anew at every
start from the password files.

Each server reads the ACL file written for what it has (:meth:`ServerAuth.acl_file_for`):

- Redis 7.0+ and Valkey (read-only key patterns and functions): the app user may only
  read the epoch and its copies (``%R~rideout:epoch``, ``%R~rideout:epoch:*``; the
  scripts read a copy by a name passed in ARGV, not in KEYS, which FCALL would count as
  written) and may run rideout's functions (FCALL) but no Lua of its own (no EVAL,
  EVALSHA, SCRIPT LOAD, FUNCTION).
- Redis 6.2 only: the epoch and its copies stay writable by the app user, and it may SCRIPT LOAD
  and EVALSHA any Lua (checked command by command, but an endless loop still blocks the
  server until ``SCRIPT KILL``): 6.2 has neither read-only key patterns nor functions.

docs/redis.md ("ACL users and functions") says per server what is locked down and what stays open.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Final

from rideout._files import create_exclusively, replace_atomically
from rideout.config import Config
from rideout.store import keys
from rideout.store.errors import StoreError

__all__ = [
    "ACL_FILENAME",
    "DEFAULT_USER_LINE",
    "FUNCTIONS_ACL_FILENAME",
    "RULES",
    "SERVER_CONFIG_FILENAME",
    "CredentialsRejected",
    "CredentialsUnavailable",
    "ExtraUser",
    "PermissionDenied",
    "RedisCredentials",
    "RedisRole",
    "RedisUsers",
    "ServerAuth",
    "StoreAuthError",
    "UserRules",
    "acl_file_text",
    "acl_user_line",
    "credentials_dir",
    "credentials_for",
    "denied_message",
    "load_credentials",
    "load_or_create_users",
    "password_file",
    "prepare_server_auth",
    "rejected_message",
    "server_config_text",
]

ACL_FILENAME: Final = "users.acl"  # Redis 6.2's rules
FUNCTIONS_ACL_FILENAME: Final = "users-functions.acl"  # 7.0+'s: read-only epoch, FCALL only
SERVER_CONFIG_FILENAME: Final = "server.conf"
_PASSWORD_SUFFIX: Final = ".password"
_PASSWORD_RE: Final = re.compile(r"[!-~]{32,512}")  # printable ASCII, no spaces
_USERNAME_RE: Final = re.compile(r"[!-~]{1,128}")


# ----------------------------------------------------------------------------- errors


class StoreAuthError(StoreError):
    """Rideout's Redis credentials did not do: missing, rejected, or short of a right."""


class CredentialsUnavailable(StoreAuthError):
    """A credential file is missing, unreadable or malformed, or cannot be made."""


class CredentialsRejected(StoreAuthError):
    """Redis refused the username and password (``WRONGPASS``, ``NOAUTH``)."""


class PermissionDenied(StoreAuthError):
    """The user may not run a command, or touch a key (``NOPERM``)."""


# ------------------------------------------------------------------------------ users


class RedisRole(StrEnum):
    """A part of rideout that talks to Redis, each as a user of its own."""

    APP = "app"
    REPLICATION = "replication"
    CONTROLLER = "controller"
    MONITOR = "monitor"

    @property
    def username(self) -> str:
        return f"rideout-{self.value}"


@dataclass(frozen=True, slots=True)
class RedisCredentials:
    """A Redis user's name and password, and where they came from (named in errors).

    ``source`` is the password file in local mode; credentials from elsewhere (a
    ``redis://user:pass@host`` URL, a mounted secret) name that place instead, never
    the password. The password is left out of ``repr``.
    """

    username: str
    password: str = field(repr=False)
    source: str = "the caller"

    def __post_init__(self) -> None:
        if not isinstance(self.username, str) or not _USERNAME_RE.fullmatch(self.username):
            raise CredentialsUnavailable(
                f"{self.source}: a Redis username is 1 to 128 printable characters without spaces"
            )
        if not isinstance(self.password, str) or not self.password:
            raise CredentialsUnavailable(f"{self.source}: the Redis password is empty")


@dataclass(frozen=True, slots=True)
class RedisUsers:
    """The credentials of a deployment's four Redis users."""

    app: RedisCredentials
    replication: RedisCredentials
    controller: RedisCredentials
    monitor: RedisCredentials

    def __getitem__(self, role: RedisRole) -> RedisCredentials:
        return {
            RedisRole.APP: self.app,
            RedisRole.REPLICATION: self.replication,
            RedisRole.CONTROLLER: self.controller,
            RedisRole.MONITOR: self.monitor,
        }[role]

    def __iter__(self) -> Iterator[tuple[RedisRole, RedisCredentials]]:
        return ((role, self[role]) for role in RedisRole)


@dataclass(frozen=True, slots=True)
class UserRules:
    """What one user may do: these commands (``|`` names a subcommand), these keys.

    ``read_keys`` are read-only on a server with read-only key patterns (``%R~``, 7.0+),
    read and written on 6.2. ``eval_commands`` are granted on 6.2 only,
    ``function_commands`` on 7.0+ only (:data:`~.functions.FUNCTIONS_SINCE`).
    """

    commands: tuple[str, ...]
    keys: tuple[str, ...] = ()
    read_keys: tuple[str, ...] = ()
    eval_commands: tuple[str, ...] = ()
    function_commands: tuple[str, ...] = ()

    def acl(self, *, functions: bool) -> str:
        """The rules in Redis's ACL syntax, starting from nothing allowed, for a server
        with (7.0+) or without (6.2) functions and read-only key patterns."""
        read = "%R~" if functions else "~"
        extra = self.function_commands if functions else self.eval_commands
        return " ".join(
            [*(f"~{pattern}" for pattern in self.keys)]
            + [f"{read}{pattern}" for pattern in self.read_keys]
            + ["-@all"]
            + [f"+{command}" for command in self.commands + extra]
        )


# Commands the Lua scripts run (store/scripts.py, store/room_scripts.py): Redis checks
# each redis.call() against the rights of the user that called FCALL (or EVALSHA).
_SCRIPT_COMMANDS: Final = (
    "get", "set", "del", "pexpire", "time",
    "hset", "hmget", "hgetall",
    "xadd", "xlen", "xrange", "xrevrange", "xtrim",
    # the waiting room's (rideout.store.room_scripts)
    "exists", "hincrby", "sadd", "srem", "unlink",
    "zadd", "zrem", "zcount", "zcard", "zrange", "zrangebyscore", "zremrangebyscore",
)  # fmt: skip
_APP_COMMANDS: Final = (
    "ping", "info", "hget", "xread", "wait",  # /health, LAST_OFFSET, the hub, sync mode
    "expire", "ttl",  # a demo sign-in's name claim (realtime/demo.py)
    "smembers",  # the waiting room's event index (RoomStore.list_events)
)  # fmt: skip
_CONTROLLER_COMMANDS: Final = (
    "ping", "info", "replicaof", "failover",
    "get", "set",  # the epoch: read, set once (raised by a script: EVALSHA below)
    "eval",  # `token revoke` (store/revocations.py)
    "scan", "xrange", "xrevrange", "dbsize",  # count_unreplicated, compare
    "wait", "hget", "hset", "hdel", "hgetall", "hlen", "pexpireat",  # `token revoke`
    "evalsha", "script|load", "script|exists",  # its scripts, through redis-py's Script
    "incr", "pttl", "pexpire", "del",  # the control plane's lease (controlplane/lease.py)
)  # fmt: skip
# How the app runs its scripts: on 6.2 any Lua, through redis-py's Script (EVALSHA, and
# SCRIPT LOAD after NOSCRIPT); on 7.0+ only the functions of rideout's library.
_APP_EVAL: Final = ("evalsha", "script|load", "script|exists")
_APP_FUNCTIONS: Final = ("fcall",)

RULES: Final[Mapping[RedisRole, UserRules]] = {
    RedisRole.APP: UserRules(
        _APP_COMMANDS + _SCRIPT_COMMANDS,
        (
            keys.ROOM_KEYS,
            keys.USER_KEYS,
            keys.IDEMPOTENCY_KEYS,
            keys.REVOCATION_KEYS,
            keys.WAITINGROOM_KEYS,
            keys.CANARY_KEYS,
            keys.DEMO_KEYS,
        ),  # revocations: read by each app server's follower; canary: the store probe;
        # demo: the demo sign-in's quotas (realtime/demo.py)
        read_keys=(keys.EPOCH, keys.EPOCH_COPIES),  # read by name, never in KEYS
        eval_commands=_APP_EVAL,
        function_commands=_APP_FUNCTIONS,
    ),
    RedisRole.REPLICATION: UserRules(("psync", "replconf", "ping")),
    RedisRole.CONTROLLER: UserRules(
        _CONTROLLER_COMMANDS,
        (
            keys.EPOCH,
            keys.EPOCH_COPIES,
            keys.ROOM_STREAMS,
            keys.REVOCATION_KEYS,
            keys.CONTROL_PLANE_KEYS,
        ),
        # rideout's function library (store.functions.ensure_library), and its reads of
        # the revocations (`token revoke`: READ_REVOCATIONS) as EVALSHA does on 6.2
        function_commands=("function|list", "function|load", "fcall"),
    ),
    RedisRole.MONITOR: UserRules(
        ("ping", "info", "get", "xrange"), read_keys=(keys.EPOCH, keys.ROOM_STREAMS)
    ),
}
"""Each role's rights; nothing else is allowed (the default user is off)."""

ExtraUser = tuple[RedisCredentials, UserRules]
"""A user besides rideout's own, and what it may do (:func:`prepare_server_auth`)."""


# ------------------------------------------------------------------------ credentials


def credentials_dir(keys_dir: Path) -> Path:
    """Where a deployment's Redis passwords, ACL file and server config live."""
    return Path(keys_dir) / "redis"


def password_file(keys_dir: Path, role: RedisRole) -> Path:
    """Where `role`'s password lives in a keys directory (``redis/ROLE.password``)."""
    return credentials_dir(keys_dir) / f"{role.value}{_PASSWORD_SUFFIX}"


def load_credentials(keys_dir: Path, role: RedisRole) -> RedisCredentials:
    """`role`'s credentials from ``keys_dir/redis/ROLE.password``; never creates them.

    Raises :class:`CredentialsUnavailable` naming the file when it cannot be used.
    """
    path = password_file(keys_dir, role)
    try:
        password = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise CredentialsUnavailable(
            f"{path}: no Redis password for {role.username}; `rideout up` creates the "
            "deployment's credentials (is this the data directory of a deployment?)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialsUnavailable(f"{path}: cannot read it: {exc}") from exc
    if not _PASSWORD_RE.fullmatch(password):
        raise CredentialsUnavailable(
            f"{path}: not a usable password (32 to 512 printable characters without "
            "spaces); remove it, and the next `rideout up` makes a new one"
        )
    return RedisCredentials(role.username, password, str(path))


def load_or_create_users(keys_dir: Path) -> RedisUsers:
    """Every role's credentials, creating a missing password file (0600, 256 bits) once."""
    for role in RedisRole:
        path = password_file(keys_dir, role)
        if path.exists():
            continue
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            create_exclusively(path, (secrets.token_hex(32) + "\n").encode("ascii"))
        except OSError as exc:
            raise CredentialsUnavailable(
                f"{path}: cannot create it: {exc.strerror or exc}"
            ) from exc
    return RedisUsers(*(load_credentials(keys_dir, role) for role in RedisRole))


def credentials_for(config: Config, role: RedisRole) -> RedisCredentials:
    """The credentials `role` reaches the deployment's Redis with.

    Local mode: the keys directory's password files (`rideout up` makes them). External
    mode: ``[redis] ROLE_user`` with the password in ``ROLE_password_file``, else in
    ``password_file``, else in ``KEYS_DIR/redis/ROLE.password`` (the mounted secrets
    directory, laid out as local mode lays it out).
    """
    if config.mode != "external":
        return load_credentials(config.keys_dir, role)
    if role == RedisRole.REPLICATION:
        raise CredentialsUnavailable(
            "external mode: replication credentials belong in the servers' own config "
            "(masteruser/masterauth); rideout's parts never use them"
        )
    access = config.redis
    user: str = getattr(access, f"{role.value}_user")
    own: str = getattr(access, f"{role.value}_password_file")
    if not own and not access.password_file:
        path = password_file(config.keys_dir, role)
        if not path.exists():
            raise CredentialsUnavailable(
                f"no Redis password for {user}: set [redis] {role.value}_password_file "
                f"(RIDEOUT_REDIS__{role.value.upper()}_PASSWORD_FILE) or password_file, or "
                f"put it in {path}"
            )
        found = load_credentials(config.keys_dir, role)
        return RedisCredentials(user, found.password, found.source)
    key = f"redis.{role.value}_password_file" if own else "redis.password_file"
    file = own or access.password_file
    try:
        password = Path(file).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialsUnavailable(f"{file} (config {key}): cannot read it: {exc}") from exc
    return RedisCredentials(user, password, f"{file} (config {key})")


# --------------------------------------------------------------------- server's files


def acl_user_line(credentials: RedisCredentials, rules: UserRules, *, functions: bool) -> str:
    """One ``user`` line of an ACL file (for a server with functions, 7.0+, or not): the
    password only as its SHA-256."""
    digest = hashlib.sha256(credentials.password.encode("utf-8")).hexdigest()
    return f"user {credentials.username} reset on #{digest} {rules.acl(functions=functions)}"


DEFAULT_USER_LINE: Final = "user default reset off ~* &* +@all"
"""The default user: off, so no connection can authenticate as it and an
unauthenticated one gets ``NOAUTH``; with every right, because the server replays its
own append-only file as this user. Redis 7.x and Valkey 8.x re-check a transaction's
commands against it at ``EXEC`` while loading (redis/redis#14541, valkey-io/valkey#3983),
and they write every script's effects as ``MULTI``/``EXEC``: a default user without
rights made the restarted server drop every write a script had made, silently."""


def acl_file_text(
    users: RedisUsers, extra_users: Sequence[ExtraUser] = (), *, functions: bool
) -> str:
    """The ACL file of a server with functions (7.0+) or without (6.2): the default user
    (:data:`DEFAULT_USER_LINE`), each role's user, then `extra_users`.

    No plaintext password: each is given as its SHA-256.
    """
    pairs = [(credentials, RULES[role]) for role, credentials in users] + list(extra_users)
    lines = [DEFAULT_USER_LINE]
    lines += [acl_user_line(who, rules, functions=functions) for who, rules in pairs]
    return "\n".join(lines) + "\n"


def _quoted(value: str) -> str:
    """A Redis config argument in double quotes (its parser's escapes)."""
    out = []
    for char in value:
        if char in '"\\':
            out.append("\\" + char)
        elif " " <= char <= "~":
            out.append(char)
        else:
            out.extend(f"\\x{byte:02x}" for byte in char.encode("utf-8"))
    return '"' + "".join(out) + '"'


def server_config_text(replication: RedisCredentials) -> str:
    """The config file every server starts with: how it authenticates to a master."""
    return (
        f"# Written by rideout at every start, from {replication.source}: do not edit.\n"
        "# Any server may become a replica after a failover, so each has these.\n"
        f"masteruser {_quoted(replication.username)}\n"
        f"masterauth {_quoted(replication.password)}\n"
    )


@dataclass(frozen=True, slots=True)
class ServerAuth:
    """What a locked redis-server starts with, and who checks that it is ready.

    ``acl_file`` holds the rules for 6.2, ``functions_acl_file`` those for a server with
    functions and read-only key patterns (7.0+); a server reads the one
    :meth:`acl_file_for` gives it.
    """

    acl_file: Path
    config_file: Path
    probe: RedisCredentials
    functions_acl_file: Path | None = None

    def acl_file_for(self, functions: bool) -> Path:
        """The ACL file a server with (7.0+) or without (6.2) functions reads."""
        if functions and self.functions_acl_file is not None:
            return self.functions_acl_file
        return self.acl_file


def _write_private(path: Path, text: str) -> None:
    """Replace `path` atomically with `text`, mode 0600 (a reader sees old or new)."""
    replace_atomically(path, text.encode("utf-8"))


def prepare_server_auth(keys_dir: Path, *, extra_users: Sequence[ExtraUser] = ()) -> ServerAuth:
    """Make the credentials if need be, and write the ACL file and the server config.

    `extra_users` are users besides rideout's own, for a harness that runs servers of
    its own (the tests' superuser, a benchmark's); `rideout up` adds none.
    """
    users = load_or_create_users(keys_dir)
    directory = credentials_dir(keys_dir)
    auth = ServerAuth(
        directory / ACL_FILENAME,
        directory / SERVER_CONFIG_FILENAME,
        users.monitor,
        directory / FUNCTIONS_ACL_FILENAME,
    )
    try:
        for functions in (False, True):
            _write_private(
                auth.acl_file_for(functions), acl_file_text(users, extra_users, functions=functions)
            )
        _write_private(auth.config_file, server_config_text(users.replication))
    except OSError as exc:
        raise CredentialsUnavailable(
            f"{directory}: cannot write the Redis ACL and config files: {exc}"
        ) from exc
    return auth


# ---------------------------------------------------------------------------- messages

_DENIED_COMMAND_RE: Final = re.compile(r"run the '([^']+)' command")


def rejected_message(credentials: RedisCredentials, server: str, detail: str) -> str:
    """What to say when `server` refuses `credentials` (``WRONGPASS``, ``NOAUTH``)."""
    return (
        f"credentials in {credentials.source} (user {credentials.username}) are rejected "
        f"by redis at {server} ({detail.strip()}): was the data directory copied from "
        "another deployment, or its keys changed while redis ran? `rideout down` and "
        "`rideout up` make redis read them again"
    )


def denied_message(username: str, detail: str) -> str:
    """What to say when `username` was refused a command or key (``NOPERM``)."""
    detail = detail.strip()
    if detail.startswith("NOPERM: user "):
        return detail  # said already
    command = _DENIED_COMMAND_RE.search(detail)
    if command:
        what = "run " + command[1].replace("|", " ").upper()
    elif "key" in detail:
        what = "touch a key this command names"
    else:
        what = "run a command the Lua script calls"
    return f"NOPERM: user {username} cannot {what} ({detail})"
