"""The waiting room's private API (``/private/...``, behind the deployment's admin token,
which :class:`~rideout.waitingroom.api.RoomAPI` checks before any handler runs): the
serving counter, sessions, tokens, a reset, and events at runtime.

:class:`PrivateAPI` is the part of :class:`~rideout.waitingroom.api.RoomAPI` that
answers these; its answers carry no CORS header (``public=False``).
"""

from __future__ import annotations

import abc

from starlette.requests import Request
from starlette.responses import Response

from rideout import _body
from rideout.waitingroom.http import (
    CACHE_PRIVATE,
    BadInput,
    body_field,
    body_integer,
    event_id_of,
    json_response,
    query_param,
    request_id_of,
)
from rideout.waitingroom.micro_cache import MicroCache
from rideout.waitingroom.model import MAX_VALIDITY, EventSettings
from rideout.waitingroom.poll_cache import PositionCache
from rideout.waitingroom.store import RoomStore

__all__ = ["PrivateAPI"]


class PrivateAPI(abc.ABC):
    """The private API's handlers over the room's store and this process's caches."""

    store: RoomStore
    cache: MicroCache
    positions: PositionCache
    max_body: int

    @abc.abstractmethod
    async def _token(
        self,
        event_id: str,
        request_id: str,
        *,
        issuer: str | None = None,
        validity: float | None = None,
    ) -> Response:
        """The token set of a served position (``generate_token``'s answer)."""

    async def increment_serving_counter(self, request: Request) -> Response:
        """``{event_id, increment_by}`` -> ``{serving_num}`` (never below the floor)."""
        body = await _body.read_json(request, self.max_body)
        event_id = event_id_of(body_field(body, "event_id"))
        by = body_integer(body, "increment_by", "an integer")
        serving = await self.store.increment_serving(event_id, by)
        self.cache.forget(event_id)
        return json_response({"serving_num": serving}, public=False)

    async def update_session(self, request: Request) -> Response:
        """``{event_id, request_id, status: 1 | -1}``; 404 unless the session is at 0."""
        body = await _body.read_json(request, self.max_body)
        event_id = event_id_of(body_field(body, "event_id"))
        request_id = request_id_of(body_field(body, "request_id"))
        status = body_integer(body, "status", "the integer 1 (completed) or -1 (abandoned)")
        if status not in (1, -1):
            raise BadInput(400, "status must be the integer 1 (completed) or -1 (abandoned)")
        await self.store.update_session(event_id, request_id, status)
        return json_response(
            {"event_id": event_id, "request_id": request_id, "status": status}, public=False
        )

    async def num_active_tokens(self, request: Request) -> Response:
        """``{active_tokens}``: unexpired tokens whose session is still active."""
        event_id = event_id_of(query_param(request, "event_id"))
        count = await self.store.num_active_tokens(event_id)
        return json_response({"active_tokens": count}, public=False)

    async def expired_tokens(self, request: Request) -> Response:
        """A bare JSON array of request ids (as AWS), ``limit`` per page; the next
        page's cursor in the ``Next-Cursor`` header."""
        event_id = event_id_of(query_param(request, "event_id"))
        cursor = request.query_params.get("cursor")
        raw_limit = request.query_params.get("limit", "1000")
        if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= 10_000:
            raise BadInput(400, "limit must be an integer from 1 to 10000")
        page = await self.store.expired_tokens(event_id, cursor=cursor, limit=int(raw_limit))
        response = json_response(list(page.request_ids), public=False)
        if page.cursor is not None:
            response.headers["Next-Cursor"] = page.cursor
        return response

    async def reset_initial_state(self, request: Request) -> Response:
        """``{event_id}``: zero the counters and forget every position (at once, not
        AWS's "a minute or two"); the micro-cache forgets the event too."""
        body = await _body.read_json(request, self.max_body)
        event_id = event_id_of(body_field(body, "event_id"))
        await self.store.reset(event_id)
        self.cache.forget(event_id)
        self.positions.forget(event_id)
        return json_response({"message": "Counters reset"}, public=False)

    async def private_generate_token(self, request: Request) -> Response:
        """As the public one, with ``issuer`` and ``validity_period`` for this call
        only (AWS keeps an override for later calls: a bug not copied)."""
        body = await _body.read_json(request, self.max_body)
        event_id = event_id_of(body_field(body, "event_id"))
        request_id = request_id_of(body_field(body, "request_id"))
        issuer = body.get("issuer")
        if issuer is not None and (not isinstance(issuer, str) or not 0 < len(issuer) <= 512):
            raise BadInput(400, "issuer must be a string of 1 to 512 characters")
        validity = body.get("validity_period")
        if validity is not None and (
            isinstance(validity, bool)
            or not isinstance(validity, int | float)
            or not 1 <= validity <= MAX_VALIDITY
        ):
            raise BadInput(400, f"validity_period must be seconds from 1 to {MAX_VALIDITY:g}")
        return await self._token(event_id, request_id, issuer=issuer, validity=validity)

    async def list_events(self, request: Request) -> Response:
        """``{"events": [settings, ...]}``."""
        events = await self.store.list_events()
        return json_response({"events": [e.to_dict() for e in events]}, public=False)

    async def create_event(self, request: Request) -> Response:
        """The settings as a JSON object (``event_id`` required) -> 201 and the event."""
        body = await _body.read_json(request, self.max_body)
        event = EventSettings.from_dict(body)
        await self.store.create_event(event)
        return json_response(event.to_dict(), 201, public=False)

    def _path_event(self, request: Request) -> str:
        return event_id_of(request.path_params["event_id"])

    async def show_event(self, request: Request) -> Response:
        """``{event, counters, active_tokens, holding}``: the counters, active sessions
        and capacity held read at one moment (one script), beside the settings."""
        event_id = self._path_event(request)
        event = await self.store.get_event(event_id)
        counters, active, holding = await self.store.status(event_id)
        return json_response(
            {
                "event": event.to_dict(),
                "counters": counters.to_dict(),
                "active_tokens": active,
                "holding": holding,
            },
            public=False,
        )

    async def change_event(self, request: Request) -> Response:
        """A JSON object of the settings to change -> the event's new settings."""
        event_id = self._path_event(request)
        body = await _body.read_json(request, self.max_body)
        event = await self.store.update_event(event_id, **body)
        self.cache.forget(event_id)
        return json_response(event.to_dict(), public=False)

    async def delete_event(self, request: Request) -> Response:
        event_id = self._path_event(request)
        await self.store.delete_event(event_id)
        self.cache.forget(event_id)
        self.positions.forget(event_id)
        return Response(status_code=204, headers={"Cache-Control": CACHE_PRIVATE})

    async def _set_open(self, request: Request, is_open: bool) -> Response:
        event_id = self._path_event(request)
        event = await self.store.update_event(event_id, open=is_open)
        return json_response(event.to_dict(), public=False)

    async def open_event(self, request: Request) -> Response:
        """Take arrivals again."""
        return await self._set_open(request, True)

    async def close_event(self, request: Request) -> Response:
        """Refuse new arrivals (403); those already queued keep their positions."""
        return await self._set_open(request, False)
