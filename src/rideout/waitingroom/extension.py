"""The waiting room as a zone extension: ``rideout serve`` passes a :class:`WaitingRoom`
to :func:`rideout.realtime.app.create_app`, so every zone of every region serves the
room's API on the region's Redis (``realtime`` never imports the room).

At start it builds the room's store on the zone's Redis client, loads the room's key
ring once (``KEYS_DIR/room-keys.pem``, re-read when a rotation changes it), creates the
configured events that are missing (on the writer; the replica region skips it) and
starts the scheduler (:mod:`.inlets`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

import httpx
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from rideout import _http, routes
from rideout._tasks import TaskSupervisor
from rideout.auth.keys import Algorithm
from rideout.auth.oidc_secrets import load_or_create_oidc_secret
from rideout.auth.room_tokens import RoomKeyWatcher, RoomTokenIssuer
from rideout.config import Config
from rideout.openapi.room import room_fragment
from rideout.waitingroom.api import RoomAPI
from rideout.waitingroom.errors import EventExists, RoomError, RoomNotWriter
from rideout.waitingroom.http import CACHE_PUBLIC_KEY
from rideout.waitingroom.inlets import RoomScheduler, control_plane_alarm_state
from rideout.waitingroom.metrics import RoomMetrics
from rideout.waitingroom.model import EventSettings, InletKind, InletSettings
from rideout.waitingroom.store import RoomStore

if TYPE_CHECKING:
    from rideout.waitingroom.oidc import OidcProvider

__all__ = ["OIDC_OTHER", "WaitingRoom", "configured_event"]

log = logging.getLogger("rideout.waitingroom")

OIDC_OTHER: Final = routes.OIDC_PREFIX + "/{rest:path}"
"""Every other path under the OpenID adapter's prefix: a JSON 404 (mounted after the
providers' routes, when there is one)."""


class _Region(Protocol):
    @property
    def name(self) -> str: ...


class _Metrics(Protocol):
    @property
    def registry(self) -> CollectorRegistry: ...


class ZoneLike(Protocol):
    """What the room needs of a zone's server (:class:`rideout.realtime.zone.ZoneServer`)."""

    @property
    def metrics(self) -> _Metrics: ...

    @property
    def redis(self) -> aioredis.Redis: ...
    @property
    def admin_token(self) -> str: ...
    @property
    def region(self) -> _Region: ...
    @property
    def tasks(self) -> TaskSupervisor: ...


def configured_event(config: Config, event_id: str) -> EventSettings:
    """An event with the ``[waitingroom]`` section's settings."""
    room = config.waitingroom
    return EventSettings(
        event_id,
        validity=room.validity,
        expiry=room.expiry,
        incr_on_expiry=room.incr_on_expiry,
        abandon_after=room.abandon_after,
        inlet=InletSettings(
            InletKind(room.inlet),
            period=room.inlet_period,
            max_size=room.inlet_max_size,
            increment_by=room.inlet_increment_by,
            alarm=room.inlet_alarm[0] if room.inlet_alarm else "",
        ),
    )


class WaitingRoom:
    """The room's routes and scheduled work on one zone (a ``ZoneExtension``)."""

    def __init__(self, config: Config, *, scheduler: bool = True) -> None:
        self.config = config
        self.run_scheduler = scheduler
        self.store: RoomStore | None = None
        self.api: RoomAPI | None = None
        self.scheduler: RoomScheduler | None = None
        self._http: httpx.AsyncClient | None = None
        self._keys: RoomKeyWatcher | None = None
        self.oidc: list[OidcProvider] = []

    async def start(self, server: ZoneLike) -> None:
        """Build the store and API, create the configured events, start the scheduler."""
        room = self.config.waitingroom
        store = self.store = RoomStore(
            server.redis, region=server.region.name, stream_length=room.stream_length
        )
        watcher = self._keys = RoomKeyWatcher(
            self.config.keys_dir, cast(Algorithm, room.token_algorithm)
        )
        issuer = routes.room_issuer(self.config)
        metrics = RoomMetrics(server.metrics.registry)
        self.api = RoomAPI(
            store,
            admin_token=server.admin_token,
            issuer=issuer,
            signer=RoomTokenIssuer(watcher, issuer=issuer),
            keys=watcher,
            micro_cache_ttl=room.micro_cache_ttl,
            position_cache_size=room.position_cache_size,
            max_body=room.max_body,
            metrics=metrics,
        )
        await self._create_configured_events(store)
        self.oidc = self._oidc_providers(store, watcher, issuer)
        if self.run_scheduler:
            http = self._http = _http.async_client(timeout=1.0)
            summary = routes.control_plane_url(self.config, routes.SUMMARY)

            async def alarm_state(name: str) -> str | None:
                return await control_plane_alarm_state(http, summary, name)

            self.scheduler = RoomScheduler(
                store,
                interval=room.tick_interval,
                metrics_interval=room.metrics_interval,
                alarm_state=alarm_state,
                metrics=metrics,
            )
            # Supervised by the zone's tasks, but not critical: every process of the
            # region runs a scheduler and one pass per period is claimed in Redis, so
            # another process's scheduler moves the room while this one restarts.
            self.scheduler.start(server.tasks, critical=False)

    def _oidc_providers(
        self, store: RoomStore, keys: RoomKeyWatcher, issuer: str
    ) -> list[OidcProvider]:
        """One OpenID provider per ``[waitingroom] oidc_clients`` entry (docs/oidc.md);
        its id tokens are signed with an RS256 ring of its own, ``KEYS_DIR/oidc/``."""
        room, config = self.config.waitingroom, self.config
        registrations = room.oidc_registrations()
        if not registrations:
            return []
        # Authlib's server components load only where an OpenID client is registered
        # (~75 ms of every app server's start otherwise).
        from rideout.waitingroom.oidc import OidcClient, OidcProvider, hash_secret

        id_keys = RoomKeyWatcher(config.keys_dir / "oidc", "RS256")
        base = f"http://{config.app_domain}:{config.app_port}"
        providers = []
        for event_id, uris in registrations.items():
            secret = None
            if event_id not in room.oidc_public_clients:
                secret = hash_secret(load_or_create_oidc_secret(config.keys_dir, event_id))
            providers.append(
                OidcProvider(
                    OidcClient(event_id, uris, secret),
                    store,
                    keys=keys,
                    id_keys=id_keys,
                    signer=RoomTokenIssuer(keys, issuer=issuer),
                    base_url=base,
                    room_issuer=issuer,
                    origins=config.origins(),
                    local_http=config.mode == "local",
                )
            )
        return providers

    async def _create_configured_events(self, store: RoomStore) -> None:
        for event_id in self.config.waitingroom.events:
            try:
                await store.create_event(configured_event(self.config, event_id))
            except EventExists:
                pass
            except RoomNotWriter:
                return  # the replica region: the writer's zones create them
            except RoomError as exc:
                log.warning("waiting room: cannot create event %s: %s", event_id, exc)

    def routes(self, server: ZoneLike) -> Sequence[BaseRoute]:
        """The public and private API, and the room's JWKS under its issuer path."""
        if self.api is None:
            raise RuntimeError("WaitingRoom.routes() before start()")
        oidc = [route for provider in self.oidc for route in provider.routes()]
        if oidc:  # the rest of /oidc/: an OpenID answer, not the pages' 404 or 405
            oidc.append(Route(OIDC_OTHER, self.no_oidc_endpoint, methods=["GET", "POST"]))
        return [*self.api.routes(), Route(routes.ROOM_JWKS, self.jwks, methods=["GET"]), *oidc]

    async def no_oidc_endpoint(self, request: Request) -> Response:
        """404 in RFC 6749's shape for a path under ``/oidc/`` that no event's provider
        has (an event without a registered client, say); before, the pages' mount
        answered it (a 405 to a POST)."""
        event_id = request.path_params["event_id"]
        return JSONResponse(
            {
                "error": "invalid_request",
                "error_description": f"No such OpenID endpoint: {event_id[:64]!r} has no "
                "registered client, or its provider has no such path",
            },
            404,
            headers={"Cache-Control": "no-store"},
        )

    def openapi(self) -> dict[str, Any]:
        """The OpenAPI fragment of :meth:`routes` (the zone's ``/openapi.json`` has it)."""
        return room_fragment([provider.event_id for provider in self.oidc])

    async def jwks(self, request: Request) -> Response:
        """The room's current and previous public keys."""
        assert self._keys is not None
        return JSONResponse(
            self._keys.ring().jwks(),
            headers={"Cache-Control": CACHE_PUBLIC_KEY, "Access-Control-Allow-Origin": "*"},
        )

    async def stop(self) -> None:
        """Stop the scheduler, write the queued touches, close the control plane client."""
        if self.scheduler is not None:
            await self.scheduler.stop()
            self.scheduler = None
        if self.api is not None:
            await self.api.aclose()
        if self._http is not None:
            await self._http.aclose()
            self._http = None
