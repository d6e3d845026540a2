"""The DNS answer's inputs as data, handed from the control plane to a DNS server elsewhere.

Route 53 keeps its data plane (the name servers) apart from its control plane (health
checks, record changes): when the control plane is down, the name servers keep
answering with the last records they were given. rideout does the same locally. The
control plane publishes a :class:`DnsView` whenever its decision changes: each region's
health as routing sees it (the failover controller's :meth:`dns_health`, which names
the writer's region only), the evacuated zones (names only: the control plane passes
them as data, DNS knows nothing of how a zone came to be evacuated) and the SOA serial.
``rideout dns`` follows the view with a :class:`DnsFollower` and answers from the last
one it read, so a control-plane crash or restart neither stops name resolution nor
changes an answer.

The hand-over is a file (:class:`ViewFile`) in the deployment's run directory, replaced
atomically (write a temp file of mode 0600, fsync, rename), so a reader never sees half a view
and the last view outlives both processes. The answer itself is computed by the follower
with :func:`rideout.dns.records.resolve` from its own copy of the zone's configuration:
the view carries health only, never addresses, so whoever can write the file can at
most choose between the configured regions.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rideout import _validate
from rideout._files import replace_atomically
from rideout.dns.errors import DnsError
from rideout.dns.query import QueryResult, ResolutionLike
from rideout.dns.records import Answer, DnsZoneConfig, failover_answer, resolve

__all__ = [
    "DnsFeedError",
    "DnsFollower",
    "DnsView",
    "ViewFile",
    "ViewPublisher",
]

log = logging.getLogger(__name__)

_FORMAT = 1


class DnsFeedError(DnsError, ValueError):
    """A published view that cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class DnsView:
    """What DNS answers from: routing health per region, the evacuated zones, the SOA
    serial, when published."""

    app_domain: str
    health: Mapping[str, bool]
    serial: int
    published_at: float
    evacuated: frozenset[str] = frozenset()
    full: frozenset[str] = frozenset()  # zones at their connection cap (records.py)

    def __post_init__(self) -> None:
        object.__setattr__(self, "health", dict(self.health))
        object.__setattr__(self, "evacuated", frozenset(self.evacuated))
        object.__setattr__(self, "full", frozenset(self.full))

    def answer(self, zone: DnsZoneConfig) -> Answer:
        """The failover answer `zone` gives with this health, these evacuated zones and
        these full ones."""
        return failover_answer(zone, self.health, self.evacuated, self.full)

    def same_decision(self, other: DnsView | None) -> bool:
        """Whether `other` routes the same way (the serial and time may differ)."""
        return (
            other is not None
            and dict(other.health) == dict(self.health)
            and other.evacuated == self.evacuated
            and other.full == self.full
        )

    def decision(self) -> tuple[int, tuple[tuple[str, bool], ...], tuple[str, ...]]:
        """What the answers depend on: the serial, the health and the full zones (a
        region's name can change answer without the serial), not the time."""
        return (self.serial, tuple(sorted(self.health.items())), tuple(sorted(self.full)))

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "format": _FORMAT,
                "app_domain": self.app_domain,
                "health": dict(self.health),
                "evacuated": sorted(self.evacuated),
                "full": sorted(self.full),
                "serial": self.serial,
                "published_at": self.published_at,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def parse(cls, data: bytes, zone: DnsZoneConfig) -> DnsView:
        """The view in `data`, checked against `zone`; DnsFeedError when it does not fit."""
        try:
            raw: Any = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise DnsFeedError(f"the view is not JSON: {exc}") from None
        if not isinstance(raw, dict) or raw.get("format") != _FORMAT:
            raise DnsFeedError(f"the view is not a format-{_FORMAT} object")
        if raw.get("app_domain") != zone.app_domain:
            raise DnsFeedError(
                f"the view is for {raw.get('app_domain')!r}, this server for {zone.app_domain!r}"
            )
        health = raw.get("health")
        expected = {r.health_check_id for r in zone.regions if r.health_check_id is not None}
        if (
            not isinstance(health, dict)
            or set(health) != expected
            or not all(isinstance(v, bool) for v in health.values())
        ):
            raise DnsFeedError(
                f"the view's health must map {sorted(expected)} to true or false, not {health!r}"
            )
        evacuated = raw.get("evacuated", [])  # absent in views of earlier versions
        zones = {e.zone for r in zone.regions for e in r.endpoints}
        if not isinstance(evacuated, list) or not set(evacuated) <= zones:
            raise DnsFeedError(
                f"the view's evacuated must list zones of {sorted(zones)}, not {evacuated!r}"
            )
        full = raw.get("full", [])  # absent in views of earlier versions
        if not isinstance(full, list) or not set(full) <= zones:
            raise DnsFeedError(f"the view's full must list zones of {sorted(zones)}, not {full!r}")
        try:
            serial = _validate.count("serial", raw.get("serial"), low=1, high=0xFFFFFFFF)
            at = _validate.number("published_at", raw.get("published_at"))
        except ValueError as exc:
            raise DnsFeedError(f"the view's {exc}") from None
        return cls(zone.app_domain, health, serial, at, frozenset(evacuated), frozenset(full))


class ViewPublisher(Protocol):
    """Where a control plane hands its view (locally a :class:`ViewFile`)."""

    def publish(self, view: DnsView) -> None:
        """Make `view` the one DNS answers from; OSError when it cannot."""
        ...


Stamp = tuple[int, int, int]


class ViewFile:
    """A view in one file, replaced atomically; see the module docstring."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def publish(self, view: DnsView) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(self.path, view.to_bytes())

    def stamp(self) -> Stamp | None:
        """What changes whenever the file is replaced (None: there is no file)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def read(self, zone: DnsZoneConfig) -> DnsView | None:
        """The published view (None: nothing published); DnsFeedError, OSError."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        return DnsView.parse(data, zone)


class DnsFollower:
    """A DNS server's resolver that answers from the last view `source` published.

    Until a view has been read it answers SERVFAIL ("ask again"), never a guess. A
    view that disappears or cannot be read leaves the last good one in force, and so
    does a source that stops changing (a control plane that is down): the server keeps
    answering the last decision however old it is; :meth:`age` says how old.
    :meth:`generation` changes only when the decision does (a view republished with the
    same health and serial is the same generation), for `DnsServer`'s precomputed replies.
    """

    def __init__(
        self,
        zone: DnsZoneConfig,
        source: ViewFile,
        *,
        interval: float = 0.1,
        on_change: Callable[[DnsView, Answer], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.zone = zone
        self.source = source
        self.interval = _validate.seconds("interval", interval)
        self._on_change = on_change
        self._clock = clock
        self.view: DnsView | None = None
        self._decision: object = None
        self._stamp: Stamp | None = None
        self._problem: str | None = None

    def refresh(self) -> bool:
        """Read the source if it changed; whether the view in force changed."""
        stamp = self.source.stamp()
        if stamp is None or stamp == self._stamp:
            return False
        try:
            view = self.source.read(self.zone)
        except (OSError, DnsFeedError) as exc:
            problem = str(exc)
            if problem != self._problem:  # once per distinct problem, not every poll
                log.warning(
                    "cannot use %s (%s): answering from the last view", self.source.path, problem
                )
                self._problem = problem
            return False
        self._stamp, self._problem = stamp, None
        if view is None or view == self.view:
            return False
        old, self.view = self.view, view
        decision = view.decision()
        if decision == self._decision:
            return False  # republished: only its age changed
        self._decision = decision
        if not view.same_decision(old) and self._on_change is not None:
            self._on_change(view, view.answer(self.zone))
        return True

    def generation(self) -> object:
        """A value that changes (by ``==``) exactly when the answers may change."""
        return self._decision

    def age(self) -> float | None:
        """Seconds since the view in force was published (None: no view yet)."""
        return None if self.view is None else max(0.0, self._clock() - self.view.published_at)

    def resolve(self, qname: str, qtype: str) -> ResolutionLike:
        view = self.view
        if view is None:
            return QueryResult("SERVFAIL")
        return resolve(
            self.zone, qname, qtype, view.health, view.evacuated, serial=view.serial, full=view.full
        )

    async def run(self, on_refresh: Callable[[], None] | None = None) -> None:
        """Refresh every `interval` seconds until cancelled; `on_refresh` after each change."""
        while True:
            if self.refresh() and on_refresh is not None:
                on_refresh()
            await asyncio.sleep(self.interval)
