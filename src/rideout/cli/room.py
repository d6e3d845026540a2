"""`rideout room ...`: the waiting room's events, counters and keys on a running deployment.

Every command but ``rotate-key`` talks to the room's private API on the app servers
(the writer region's first, then the others), with the deployment admin token read from
the keys directory: it is never fetched over HTTP. ``events`` reads the event's stream
from the region's Redis with the app user's credentials from the same directory.
``rotate-key`` works on the key ring file itself; running servers pick the new key up
within a second.

Exit status: 0 done; 1 the room refused (an unknown event, a bad setting: its message is
printed); 2 bad usage; 3 the deployment is not running (no app server answered); 4 the
admin token was refused (401: a keys directory from another deployment).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, NoReturn, cast

import httpx
import typer
from rich.table import Table

from rideout import _http, routes
from rideout.cli._core import ConfigOption, app, console, err, fail, load
from rideout.config import Config

__all__ = ["EXIT_NOT_RUNNING", "EXIT_REFUSED", "EXIT_UNAUTHORIZED", "room_app"]

EXIT_REFUSED = 1
EXIT_NOT_RUNNING = 3
EXIT_UNAUTHORIZED = 4

room_app = typer.Typer(
    rich_markup_mode="markdown",
    help=(
        "The waiting room of a running deployment: events, counters, keys. "
        "Exit status: 0 done, 1 refused by the room, 2 bad usage, 3 the deployment is "
        "not running, 4 the admin token was refused."
    ),
    no_args_is_help=True,
)
app.add_typer(room_app, name="room")

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
EventArgument = Annotated[str, typer.Argument(help="The event id.", show_default=False)]


class _CommandError(Exception):
    """A room command could not be done; ``code`` is the exit status."""

    def __init__(self, message: str, code: int) -> None:
        self.code = code
        super().__init__(message)


@dataclass(frozen=True)
class _RoomClient:
    """The room's private API over HTTP, on the deployment's app servers in order:
    the writer region's zones first (per the control plane, else the primary)."""

    config: Config
    admin_token: str
    timeout: float = 5.0

    def bases(self, writer: str | None) -> list[str]:
        regions = sorted(self.config.regions, key=lambda r: (r.name != writer, r.role != "primary"))
        return [routes.zone_url(self.config, z.address) for r in regions for z in r.zones]

    async def request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """The JSON answer of the first app server that can do it (a replica's 503 and
        a server that does not answer pass to the next); _CommandError otherwise."""
        headers = {"Authorization": f"Bearer {self.admin_token}"}
        async with _http.async_client(timeout=self.timeout) as http:
            writer = await _writer_region(http, self.config)
            tried: list[str] = []
            last: httpx.Response | None = None
            for base in self.bases(writer):
                try:
                    response = await http.request(method, base + path, json=body, headers=headers)
                except httpx.TransportError:
                    tried.append(base)
                    continue
                if response.status_code in (502, 503, 504):
                    last = response
                    continue
                return _answer(response)
        if last is not None:
            raise _CommandError(f"the waiting room is unavailable: {_error(last)}", 1)
        raise _CommandError(
            f"the deployment is not running: no app server answered ({', '.join(tried)}); "
            "is rideout up?",
            EXIT_NOT_RUNNING,
        )


async def _writer_region(http: httpx.AsyncClient, config: Config) -> str | None:
    try:
        response = await http.get(routes.control_plane_url(config, routes.WRITER), timeout=1.0)
        region = response.json().get("region") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return region if isinstance(region, str) else None


def _answer(response: httpx.Response) -> Any:
    if response.status_code == 401:
        raise _CommandError(
            "the admin token was refused (401): this keys directory is not the running "
            "deployment's (check --config / data_dir)",
            EXIT_UNAUTHORIZED,
        )
    if response.status_code >= 400:
        raise _CommandError(_error(response), EXIT_REFUSED)
    if response.status_code == 204 or not response.content:
        return None
    return response.json()


def _error(response: httpx.Response) -> str:
    try:
        message = response.json().get("error")
    except (ValueError, AttributeError):
        message = None
    return f"{message or response.text.strip()[:200]} (HTTP {response.status_code})"


def _client(config: Config) -> _RoomClient:
    from rideout.auth.admin import AdminTokenError, load_admin_token

    try:
        token = load_admin_token(config.keys_dir)
    except AdminTokenError as exc:
        fail(f"cannot read the deployment's admin token: {exc}", EXIT_NOT_RUNNING)
    return _RoomClient(config, token)


def _call(config: Config, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
    try:
        return asyncio.run(_client(config).request(method, path, body))
    except _CommandError as exc:
        _fail(exc)


def _fail(exc: _CommandError) -> NoReturn:
    fail(str(exc), exc.code)


def _event_path(template: str, event_id: str) -> str:
    from urllib.parse import quote

    return template.format(event_id=quote(event_id, safe=""))


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _settings_rows(settings: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for name, value in settings.items():
        if isinstance(value, Mapping):
            for inner, item in value.items():
                yield f"{name}.{inner}", str(item)
        else:
            yield name, str(value)


def _table(title: str, rows: Iterator[tuple[str, str]] | list[tuple[str, str]]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("setting")
    table.add_column("value", overflow="fold")
    for name, value in rows:
        table.add_row(name, value)
    return table


# ------------------------------------------------------------------------ commands


@room_app.command("create")
def room_create(
    event_id: EventArgument,
    validity: Annotated[float | None, typer.Option(help="Seconds a token lives.")] = None,
    expiry: Annotated[
        float | None, typer.Option(help="Seconds a servable position stays claimable (0: never).")
    ] = None,
    abandon_after: Annotated[
        float | None, typer.Option(help="Seconds without a poll before a position is abandoned.")
    ] = None,
    closed: Annotated[bool, typer.Option("--closed", help="Create it closed to arrivals.")] = False,
    settings: Annotated[
        str | None,
        typer.Option(
            "--settings", help='More settings as a JSON object, e.g. \'{"inlet": {"kind": ...}}\'.'
        ),
    ] = None,
    as_json: JsonOption = False,
    config_path: ConfigOption = None,
) -> None:
    """Create an event's waiting room (exit 1 if it exists or a setting is refused)."""
    body: dict[str, Any] = {}
    if settings is not None:
        try:
            extra = json.loads(settings)
        except ValueError as exc:
            raise typer.BadParameter(f"--settings is not JSON: {exc}") from None
        if not isinstance(extra, dict):
            raise typer.BadParameter("--settings must be a JSON object")
        body.update(extra)
    body["event_id"] = event_id
    for name, value in (
        ("validity", validity),
        ("expiry", expiry),
        ("abandon_after", abandon_after),
    ):
        if value is not None:
            body[name] = value
    if closed:
        body["open"] = False
    created = _call(load(config_path), "POST", routes.ROOM_PRIVATE_EVENTS, body)
    if as_json:
        _print_json(created)
    else:
        console.print(_table(f"created {event_id}", _settings_rows(created)))


@room_app.command("list")
def room_list(as_json: JsonOption = False, config_path: ConfigOption = None) -> None:
    """The deployment's events."""
    events = cast("dict[str, Any]", _call(load(config_path), "GET", routes.ROOM_PRIVATE_EVENTS))
    listed = events.get("events", [])
    if as_json:
        _print_json(listed)
        return
    table = Table(title=f"{len(listed)} event(s)", title_justify="left")
    for column in ("event", "open", "validity", "expiry", "abandon after", "inlet"):
        table.add_column(column)
    for event in listed:
        inlet = event.get("inlet", {})
        table.add_row(
            str(event.get("event_id")), "yes" if event.get("open") else "no",
            f"{event.get('validity')} s", f"{event.get('expiry')} s",
            f"{event.get('abandon_after')} s", str(inlet.get("kind", "none")),
        )  # fmt: skip
    console.print(table)


@room_app.command("show")
def room_show(
    event_id: EventArgument, as_json: JsonOption = False, config_path: ConfigOption = None
) -> None:
    """An event's settings and counters (exit 1 for an unknown event)."""
    shown = _call(load(config_path), "GET", _event_path(routes.ROOM_PRIVATE_EVENT, event_id))
    if as_json:
        _print_json(shown)
        return
    console.print(_table(f"event {event_id}", _settings_rows(shown.get("event", {}))))
    counters = [(name, str(value)) for name, value in shown.get("counters", {}).items()]
    counters += [
        ("active_tokens", str(shown.get("active_tokens"))),
        ("holding", str(shown.get("holding"))),
    ]
    console.print(_table("counters", counters))


def _set_open(event_id: str, state: str, as_json: bool, config_path: Any) -> None:
    template = (
        routes.ROOM_PRIVATE_EVENT_OPEN if state == "open" else routes.ROOM_PRIVATE_EVENT_CLOSE
    )
    event = _call(load(config_path), "POST", _event_path(template, event_id))
    if as_json:
        _print_json(event)
    else:
        console.print(f"{event_id}: {'open to arrivals' if event.get('open') else 'closed'}")


@room_app.command("open")
def room_open(
    event_id: EventArgument, as_json: JsonOption = False, config_path: ConfigOption = None
) -> None:
    """Take arrivals again."""
    _set_open(event_id, "open", as_json, config_path)


@room_app.command("close")
def room_close(
    event_id: EventArgument, as_json: JsonOption = False, config_path: ConfigOption = None
) -> None:
    """Refuse new arrivals; the positions already queued are kept."""
    _set_open(event_id, "close", as_json, config_path)


@room_app.command("increment")
def room_increment(
    event_id: EventArgument,
    by: Annotated[int, typer.Option("--by", help="Positions to admit (negative: take back).")] = 1,
    as_json: JsonOption = False,
    config_path: ConfigOption = None,
) -> None:
    """Move the serving counter by --by (never below its floor, never negative)."""
    answer = _call(
        load(config_path), "POST", routes.ROOM_PRIVATE_INCREMENT,
        {"event_id": event_id, "increment_by": by},
    )  # fmt: skip
    if as_json:
        _print_json(answer)
    else:
        console.print(f"{event_id}: serving counter {answer.get('serving_num')}")


@room_app.command("rotate-key")
def room_rotate_key(
    algorithm: Annotated[
        str | None,
        typer.Option(help="EdDSA, ES256 or RS256 (default: the current key's algorithm)."),
    ] = None,
    as_json: JsonOption = False,
    config_path: ConfigOption = None,
) -> None:
    """Give the room a new signing key; the current one stays as the previous.

    Tokens signed with the previous key keep verifying until they expire; those signed
    with the key before it stop. Running servers (every region shares the keys
    directory) sign with the new key within a second, without a restart. Works whether
    or not the deployment runs.
    """
    from rideout.auth import KeyFileError
    from rideout.auth.keys import Algorithm
    from rideout.auth.room_tokens import RoomKeyRing

    if algorithm is not None and algorithm not in ("EdDSA", "ES256", "RS256"):
        raise typer.BadParameter(f"--algorithm must be EdDSA, ES256 or RS256, not {algorithm!r}")
    config = load(config_path)
    first = cast("Algorithm", config.waitingroom.token_algorithm)
    try:
        rotated = RoomKeyRing.load_or_create(config.keys_dir, first).rotate(
            cast("Algorithm | None", algorithm)
        )
    except KeyFileError as exc:
        fail(f"cannot rotate the room's key: {exc}", EXIT_REFUSED)
    previous = rotated.previous.kid if rotated.previous else None
    if as_json:
        _print_json(
            {"kid": rotated.current_kid, "algorithm": rotated.algorithm, "previous_kid": previous}
        )
        return
    console.print(
        f"new room key {rotated.current_kid} ({rotated.algorithm}); previous {previous}; "
        "servers sign with it within a second"
    )


@room_app.command("events")
def room_events(
    event_id: EventArgument,
    follow: Annotated[
        bool,
        typer.Option("--follow", "-f", help="Keep printing new entries until Ctrl-C (exit 0)."),
    ] = False,
    count: Annotated[int, typer.Option(help="Entries to print (the latest), 1-10000.")] = 20,
    as_json: JsonOption = False,
    config_path: ConfigOption = None,
) -> None:
    """The event's stream: token_generated, session_updated, metrics, ...

    Read from the primary region's Redis (else the other's) with the keys directory's
    credentials; --json prints one JSON object a line.
    """
    if not 1 <= count <= 10_000:
        raise typer.BadParameter("--count must be from 1 to 10000")
    config = load(config_path)
    try:
        asyncio.run(_show_events(config, event_id, follow=follow, count=count, as_json=as_json))
    except _CommandError as exc:
        _fail(exc)


async def _show_events(
    config: Config, event_id: str, *, follow: bool, count: int, as_json: bool
) -> None:
    from rideout.store.acl import CredentialsUnavailable, RedisRole, load_credentials
    from rideout.store.client import state_client
    from rideout.store.errors import StoreError
    from rideout.waitingroom.model import check_event_id

    try:
        check_event_id(event_id)
    except ValueError as exc:
        raise _CommandError(f"{event_id!r} is not an event id: {exc}", EXIT_REFUSED) from None
    try:
        credentials = load_credentials(config.keys_dir, RedisRole.APP)
    except CredentialsUnavailable as exc:
        raise _CommandError(f"cannot read the Redis credentials: {exc}", EXIT_NOT_RUNNING) from None
    await _require_event(config, event_id)
    for region in sorted(config.regions, key=lambda r: r.role != "primary"):
        redis = state_client(
            region.redis.address, region.redis.port, credentials=credentials, timeout=10.0
        )
        try:
            last = await _latest(redis, event_id, count)
            for entry in last:
                _print_event(entry, as_json)
            if follow:
                await _follow(redis, event_id, last[-1].id if last else "0-0", as_json)
            return
        except (StoreError, OSError, ConnectionError) as exc:
            err.print(f"{region.name}'s Redis: {exc}")
        except Exception as exc:  # redis-py's own errors
            if type(exc).__module__.startswith("redis"):
                err.print(f"{region.name}'s Redis: {exc}")
                continue
            raise
        finally:
            await redis.aclose()
    raise _CommandError("no region's Redis answered; is rideout up?", EXIT_NOT_RUNNING)


FOLLOW_INTERVAL = 0.5
"""Seconds between the looks of ``events --follow`` at the stream."""


async def _follow(redis: Any, event_id: str, after: str, as_json: bool) -> None:
    """Print the entries after ``after`` as they come, until SIGINT or SIGTERM.

    It polls (XRANGE) rather than blocking in XREAD: a signal then only has to set an
    event, where cancelling a blocked read is not always honoured by the client.
    """
    from rideout.waitingroom.events import read_events

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    err.print(f"following {event_id}'s events; Ctrl-C to stop")
    try:
        while not stop.is_set():
            for entry in await read_events(redis, event_id, after=after, count=1000):
                _print_event(entry, as_json)
                after = entry.id
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), FOLLOW_INTERVAL)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    err.print("stopped")


async def _require_event(config: Config, event_id: str) -> None:
    """Refuse an unknown event through the private API, as the other commands do."""
    await _client(config).request("GET", _event_path(routes.ROOM_PRIVATE_EVENT, event_id))


async def _latest(redis: Any, event_id: str, count: int) -> list[Any]:
    from rideout.store import keys
    from rideout.waitingroom.events import read_events

    key = keys.waitingroom_event_keys(event_id)["events"]
    newest = await redis.xrevrange(key, "+", "-", count=count)
    if not newest:
        return []
    oldest_id = newest[-1][0]
    oldest = oldest_id.decode() if isinstance(oldest_id, bytes) else str(oldest_id)
    major, _, minor = oldest.partition("-")
    before = (
        f"{major}-{int(minor) - 1}" if int(minor) > 0 else f"{int(major) - 1}-18446744073709551615"
    )
    return await read_events(redis, event_id, after=before, count=count)


def _print_event(entry: Any, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(entry.to_dict(), sort_keys=True) + "\n")
        sys.stdout.flush()
        return
    when = datetime.fromtimestamp(entry.time, UTC).strftime("%H:%M:%S")
    detail = " ".join(f"{k}={v}" for k, v in entry.detail.items() if k != "event_id")
    console.print(f"{when}  {entry.type:<32} {detail}")
