"""The waiting room's exceptions: one base, :class:`RoomError`.

Each carries the HTTP status the room's API answers it with (AWS's where AWS has one)
and the message it puts in ``{"error": ...}``.
"""

from __future__ import annotations

from rideout.errors import RideoutError

__all__ = [
    "EventExists",
    "InvalidRequest",
    "NotServedYet",
    "PositionExpired",
    "RefreshTokenReused",
    "RoomClosed",
    "RoomError",
    "RoomNotWriter",
    "RoomUnavailable",
    "SessionEnded",
    "UnknownEvent",
    "UnknownRequest",
]


class RoomError(RideoutError):
    """The waiting room could not do what was asked; ``status`` is the HTTP answer."""

    status = 500


class InvalidRequest(RoomError):
    """A field is missing, malformed or of the wrong type (400)."""

    status = 400


class UnknownEvent(RoomError):
    """No event has this id (400, as AWS: ``Invalid event ID``)."""

    status = 400


class EventExists(RoomError):
    """An event with this id exists already (409)."""

    status = 409


class UnknownRequest(RoomError):
    """The event has no position for this request id (404)."""

    status = 404


class RoomClosed(RoomError):
    """The event's room is closed: it takes no new arrivals (403)."""

    status = 403


class NotServedYet(RoomError):
    """The serving counter has not reached this position (202, as AWS)."""

    status = 202


class PositionExpired(RoomError):
    """The position expired, or was abandoned, before it took a token (410, as AWS)."""

    status = 410


class RefreshTokenReused(RoomError):
    """A refresh token that a renewal already took (they rotate: only the latest one
    renews the session) (401)."""

    status = 401


class SessionEnded(RoomError):
    """The position's session was completed or abandoned: no token any more (410)."""

    status = 410

    @classmethod
    def for_status(cls, status: int) -> SessionEnded:
        """What a token request for a session ``update_session`` ended (1 completed,
        -1 abandoned) is told."""
        what = "completed" if status == 1 else "abandoned"
        return cls(
            f"The session of this request id was {what} (update_session): it takes no new "
            "token; join the queue again for a new position"
        )


class RoomUnavailable(RoomError):
    """The room's store cannot be reached or is a read-only replica for now (503)."""

    status = 503


class RoomNotWriter(RoomUnavailable):
    """The region's Redis is a read-only replica: changes go to the writer's region."""
