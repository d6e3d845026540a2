"""The client's decisions across connections, with no I/O: python-websockets' sans-I/O
style. The driver feeds in what happened (a connection opened, a message, the time, a
connection lost) and carries out the :class:`Feedback` it gets back."""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Final

from rideout._validate import count
from rideout.client.ws._bids import BidBook
from rideout.client.ws._events import (
    Acked,
    Cause,
    Connected,
    Disconnected,
    Event,
    HeartbeatFailed,
    RegionChanged,
    StateRestored,
    Updated,
)
from rideout.client.ws._heartbeat import HeartbeatMonitor
from rideout.client.ws._settings import ClientSettings
from rideout.client.ws._stats import ClientStats
from rideout.errors import InvalidArgument
from rideout.protocol import (
    MAX_AMOUNT,
    Ack,
    Bid,
    ErrorCode,
    ErrorMsg,
    GetState,
    Heartbeat,
    Pong,
    Position,
    ProtocolError,
    StateMsg,
    TicketMsg,
    TicketRequest,
    Update,
    encode_client_message,
    is_valid_name,
    is_valid_request_id,
    offset_key,
    parse_retry_hint,
    parse_server_message,
)

__all__ = ["ClientCore", "Feedback", "Room", "is_newer", "order_addresses"]

log = logging.getLogger("rideout.client.ws")

_HEARTBEAT: Final = encode_client_message(Heartbeat())
_TICKET: Final = encode_client_message(TicketRequest())
_TICKET_MARGIN: Final = 1.0  # seconds: a ticket this close to its end is not presented


def is_newer(position: Position, than: Position | None) -> bool:
    """Whether ``position`` comes after ``than``: a later epoch, or the same and a later offset."""
    if than is None:
        return True
    return (position.epoch, offset_key(position.offset)) > (
        than.epoch,
        offset_key(than.offset),
    )


def order_addresses(
    addresses: Iterable[str], avoid: Iterable[str] = (), rng: random.Random | None = None
) -> tuple[str, ...]:
    """The order in which to try an answer's addresses, those in ``avoid`` (that just
    failed) last. With `rng` shuffled first (gRPC's pick_first ``shuffleAddressList``):
    a name server that answers every client with its zones in the same order (as
    rideout's does) would otherwise send every client of a region to its first zone."""
    unique = list(dict.fromkeys(addresses))
    if rng is not None:
        rng.shuffle(unique)
    avoided = set(avoid)
    return tuple(a for a in unique if a not in avoided) + tuple(a for a in unique if a in avoided)


@dataclass(frozen=True, slots=True)
class Room:
    """What the client knows of a followed room (``position`` None until its first state)."""

    name: str
    state: Any = None
    position: Position | None = None
    region: str | None = None
    recovered: bool = False
    replayed: int = 0


@dataclass(slots=True)
class Feedback:
    """What the driver must do after a call into :class:`ClientCore`, in this order:
    emit ``events``, note ``healthy`` and ``ready``, send ``send``, then ``close``."""

    send: list[str] = field(default_factory=list)
    """Text frames to send, in order."""
    events: list[Event] = field(default_factory=list)
    """Events to emit, in order (before sending)."""
    close: Cause | None = None
    """Close the connection for this cause."""
    healthy: bool = False
    """The connection just became healthy: reset the reconnect attempt counter."""
    ready: bool = False
    """The state restore just finished: bids flow."""


class ClientCore:
    """The client's decisions, across connections, with no I/O (``now`` is given).

    Call :meth:`connection_opened` when a WebSocket opens, :meth:`receive` with every
    message, :meth:`tick` at :meth:`next_wakeup`, and :meth:`connection_lost` when it
    ends; :meth:`follow` and :meth:`submit_bid` at any time. Each returns a
    :class:`Feedback`: frames to send, events, whether to close. Everything it counts
    goes to ``stats``.
    """

    def __init__(
        self,
        settings: ClientSettings,
        *,
        rooms: Iterable[str] = (),
        rng: random.Random | None = None,
        stats: ClientStats | None = None,
    ) -> None:
        self.settings = settings
        self.stats = stats if stats is not None else ClientStats()
        self.heartbeat = HeartbeatMonitor(
            settings.heartbeat_interval,
            settings.heartbeat_timeout,
            settings.heartbeat_failures,
            healthy_after_pongs=settings.healthy_after_pongs,
            healthy_after=settings.healthy_after,
        )
        self.bids = BidBook(settings.max_queued_bids, settings.bid_retry, settings.bid_retries, rng)
        self.region: str | None = None
        self.address: str | None = None
        """The address of the open connection (None when disconnected)."""
        self._rooms: dict[str, Room] = {}
        self._awaiting: set[str] = set()  # rooms whose restore is still awaited
        # Rooms whose getState was answered with an error, and when to ask again: a
        # ``throttled`` answer's ``retry-after`` hint (between half of it and all of it, so
        # a herd refused at once does not come back at once), else None: the next heartbeat.
        self._failed: dict[str, float | None] = {}
        self._rng = rng
        self._replies: deque[tuple[str, str | None]] = deque()  # id-less requests in flight
        # The resumption ticket (rideout.auth.resume): its text, when it stops being
        # presented and when to ask for the next (on `now`'s clock), and whether to ask
        # this connection (not once it said no: an older server, or a token of another
        # issuer).
        self._ticket: str | None = None
        self._ticket_until = 0.0
        self._ticket_renew = 0.0
        self._ticket_asked = False
        self._ticket_here = settings.resume_tickets
        for room in rooms:
            self.follow(room, 0.0)

    # ------------------------------------------------------------------ views

    @property
    def connected(self) -> bool:
        """Between :meth:`connection_opened` and :meth:`connection_lost`."""
        return self.address is not None

    @property
    def rooms(self) -> Mapping[str, Room]:
        """Every followed room."""
        return MappingProxyType(self._rooms)

    @property
    def ready(self) -> bool:
        """Connected, and every room followed at the connect has its state back."""
        return self.connected and not self._awaiting

    def resume_ticket(self, now: float) -> str | None:
        """The resumption ticket to present instead of the token on the next connect,
        if one is held and still good at ``now``."""
        if self._ticket is not None and now < self._ticket_until:
            return self._ticket
        return None

    def ticket_presented(self) -> None:
        """The driver presented :meth:`resume_ticket` at a handshake (counted)."""
        self.stats.tickets_presented += 1

    def ticket_refused(self) -> None:
        """The handshake refused the ticket: forget it (the token is presented instead)."""
        self._ticket = None
        self.stats.tickets_refused += 1

    # ------------------------------------------------------------------ inputs

    def follow(self, room: str, now: float) -> Feedback:
        """Follow ``room``: restore it on every connection (now too, if connected)."""
        _check_room(room)
        feedback = Feedback()
        if room not in self._rooms:
            self._rooms[room] = Room(room)
            if self.connected:
                self._get_state(room, feedback)
        return feedback

    def unfollow(self, room: str) -> None:
        """Stop tracking ``room`` (its updates are ignored from now on)."""
        self._rooms.pop(room, None)
        self._awaiting.discard(room)
        self._failed.pop(room, None)

    def submit_bid(self, room: str, amount: int, request_id: str, now: float) -> Feedback:
        """Queue a bid; it is in the feedback's frames when the connection is ready."""
        _check_room(room)
        count("amount", amount, low=1, high=MAX_AMOUNT)
        if not is_valid_request_id(request_id):
            raise InvalidArgument(f"id must be 1-64 printable characters, not {request_id!r}")
        self.bids.add(room, amount, request_id)
        feedback = Feedback()
        self._release_bids(now, feedback)
        return feedback

    def connection_opened(self, now: float, address: str = "") -> Feedback:
        """A WebSocket opened to ``address``: :class:`Connected`, then ``getState``
        (with the last position) for every room."""
        feedback = Feedback(events=[Connected(address, self.region)])
        self.address = address
        self.heartbeat.open(now)
        self._replies.clear()
        self._awaiting = set(self._rooms)
        self._failed.clear()
        for room in self._rooms:
            self._get_state(room, feedback)
        self._ticket_asked = False
        self._ticket_here = self.settings.resume_tickets
        self._ask_ticket(now, feedback)
        if not self._awaiting:
            feedback.ready = True
        self._release_bids(now, feedback)
        return feedback

    def connection_lost(
        self, cause: Cause | None = None, code: int | None = None, reason: str = ""
    ) -> Feedback:
        """The WebSocket ended: bids in flight will be sent again (same id) next time.

        With a ``cause`` (and the server's close ``code`` and ``reason``, if any), a
        :class:`Disconnected` event, counted; without, the client closed it to stop.
        """
        feedback = Feedback()
        if cause is not None and self.address is not None:
            feedback.events.append(Disconnected(cause, code, reason, self.address))
            self.stats.disconnects += 1
            if cause is Cause.HEARTBEAT_TIMEOUT:
                self.stats.heartbeat_timeouts += 1
            elif cause is Cause.DEGRADED:
                self.stats.degraded_closes += 1
        self.address = None
        self.bids.connection_lost()
        self._replies.clear()
        self._awaiting.clear()
        self._failed.clear()
        return feedback

    def receive(self, data: str | bytes, now: float) -> Feedback:
        """One message from the server."""
        feedback = Feedback()
        if not self.connected:
            return feedback
        self.heartbeat.received(now)
        try:
            message = parse_server_message(data)
        except ProtocolError as exc:
            log.warning("ignoring a message that does not follow the protocol: %s", exc)
            return feedback
        if isinstance(message, Pong):
            self._pop_reply("heartbeat", None)
            feedback.healthy = self.heartbeat.pong(now)
        elif isinstance(message, Update):
            self._apply_update(message, feedback)
        elif isinstance(message, StateMsg):
            self._apply_state(message, now, feedback)
        elif isinstance(message, Ack):
            self._apply_ack(message, feedback)
        elif isinstance(message, ErrorMsg):
            self._apply_error(message, now, feedback)
        elif isinstance(message, TicketMsg):
            self._pop_reply("ticket", None)
            self._ticket_asked = False
            self._ticket = message.ticket
            self._ticket_until = now + message.ttl - _TICKET_MARGIN
            self._ticket_renew = now + message.ttl / 2
            self.stats.tickets_received += 1
        else:  # a probe reply: this client sends no probes
            log.warning("ignoring an unrequested %s", type(message).__name__)
        if self.heartbeat.degraded:
            feedback.close = Cause.DEGRADED
        return feedback

    def tick(self, now: float) -> Feedback:
        """Timers: the heartbeat, the timeout, bid retries, time-based health. Safe to
        call early: it acts only on what is due at `now`."""
        feedback = Feedback()
        if not self.connected:
            return feedback
        if self.heartbeat.timed_out(now):
            feedback.close = Cause.HEARTBEAT_TIMEOUT
            return feedback
        beat = self.heartbeat.due(now)
        if beat:
            feedback.send.append(_HEARTBEAT)
            self._replies.append(("heartbeat", None))
            self.heartbeat.sent(now)
        for room, at in sorted(self._failed.items()):  # a failed restore is asked again
            if (at is None and beat) or (at is not None and at <= now):
                del self._failed[room]
                self._get_state(room, feedback)
        if beat:  # a ticket is renewed with the heartbeats
            self._ask_ticket(now, feedback)
        if self.heartbeat.check_healthy(now):
            feedback.healthy = True
        self._release_bids(now, feedback)
        return feedback

    def next_wakeup(self) -> float:
        """When :meth:`tick` must run next (on the same clock as ``now``)."""
        retries = (at for at in self._failed.values() if at is not None)
        return min(self.heartbeat.next_wakeup(), self.bids.next_retry(), *retries)

    # ----------------------------------------------------------------- internals

    def _get_state(self, room: str, feedback: Feedback) -> None:
        since = self._rooms[room].position
        feedback.send.append(encode_client_message(GetState(room, since)))
        self._replies.append(("getState", room))

    def _ask_ticket(self, now: float, feedback: Feedback) -> None:
        """Ask for a ticket when none is held or the one held is half spent (at a
        connect, then with the heartbeats), one request at a time."""
        if not self._ticket_here or self._ticket_asked:
            return
        if self._ticket is not None and now < self._ticket_renew:
            return
        feedback.send.append(_TICKET)
        self._replies.append(("ticket", None))
        self._ticket_asked = True

    def _pop_reply(self, kind: str, room: str | None) -> None:
        for index, entry in enumerate(self._replies):
            if entry == (kind, room):
                del self._replies[index]
                return

    def _release_bids(self, now: float, feedback: Feedback) -> None:
        if not self.ready:
            return
        for bid in self.bids.take_sendable(now):
            feedback.send.append(encode_client_message(Bid(bid.room, bid.amount, bid.id)))
            self.stats.bids_sent += 1
            if bid.sends > 1:
                self.stats.bids_resent += 1

    def _see_region(self, region: str, feedback: Feedback) -> None:
        if region != self.region:
            feedback.events.append(RegionChanged(self.region, region))
            self.region = region

    def _apply_update(self, update: Update, feedback: Feedback) -> None:
        self._see_region(update.region, feedback)
        room = self._rooms.get(update.room)
        if room is None:
            return
        if not is_newer(update.position, room.position):
            self.stats.duplicates_ignored += 1
            return
        self._rooms[update.room] = replace(
            room, state=update.state, position=update.position, region=update.region
        )
        feedback.events.append(Updated(update.room, update.state, update.position, update.region))

    def _apply_state(self, message: StateMsg, now: float, feedback: Feedback) -> None:
        self._pop_reply("getState", message.room)
        self._see_region(message.region, feedback)
        room = self._rooms.get(message.room)
        if room is None:
            return
        replayed = 0
        if message.recovered:
            for update in message.missed:
                if is_newer(update.position, room.position):
                    room = replace(room, state=update.state, position=update.position)
                    replayed += 1
                    feedback.events.append(
                        Updated(update.room, update.state, update.position, update.region, True)
                    )
                else:
                    self.stats.duplicates_ignored += 1
            self.stats.recovered_restores += 1
            self.stats.updates_replayed += replayed
        self.stats.restores += 1
        self._rooms[message.room] = Room(
            message.room,
            message.state,
            message.position,
            message.region,
            message.recovered,
            replayed,
        )
        feedback.events.append(
            StateRestored(
                message.room,
                message.state,
                message.position,
                message.recovered,
                replayed,
                message.region,
            )
        )
        self._restore_answered(message.room, now, feedback)

    def _restore_answered(self, room: str, now: float, feedback: Feedback) -> None:
        if room in self._awaiting:
            self._awaiting.discard(room)
            if not self._awaiting:
                feedback.ready = True
                self._release_bids(now, feedback)

    def _apply_ack(self, ack: Ack, feedback: Feedback) -> None:
        self._see_region(ack.region, feedback)
        bid = self.bids.acked(ack.id)
        if bid is None:
            log.debug("ack for a bid not pending: %s", ack.id)
            return
        self.stats.bids_acked += 1
        feedback.events.append(
            Acked(
                ack.id,
                ack.accepted,
                ack.reason,
                ack.position,
                bid.room,
                bid.amount,
                ack.region,
                ack.state,
            )
        )

    def _apply_error(self, error: ErrorMsg, now: float, feedback: Feedback) -> None:
        if error.id is not None:
            self._bid_error(error, now, feedback)
            return
        kind, room = self._replies.popleft() if self._replies else ("", None)
        if kind == "heartbeat":
            failures = self.heartbeat.failure()
            self.stats.heartbeat_failures += 1
            feedback.events.append(HeartbeatFailed(failures, error.code))
        elif kind == "ticket":
            self._ticket_asked = False
            if error.code in (ErrorCode.BAD_REQUEST, ErrorCode.FORBIDDEN):
                # An older server (no such action), or no ticket for this token: ask the
                # next connection, not this one. Anything else: ask with a heartbeat.
                self._ticket_here = False
        elif kind == "getState" and room is not None:
            log.warning("restoring room %s failed: %s: %s", room, error.code, error.message)
            if room in self._rooms:
                self._failed[room] = self._retry_at(error, now)
            self._restore_answered(room, now, feedback)
        else:
            log.warning("server error: %s: %s", error.code, error.message)

    def _retry_at(self, error: ErrorMsg, now: float) -> float | None:
        """When to ask again for a room's state the server refused: for ``throttled``
        with a ``retry-after`` hint, a uniform time between half the hint and all of it
        (capped by ``max_retry_hint``); else None (the next heartbeat)."""
        hint = parse_retry_hint(error.message) if error.code == ErrorCode.THROTTLED else None
        if hint is None:
            return None
        wait = min(hint, self.settings.max_retry_hint)
        return now + (self._rng or random).uniform(wait / 2, wait)

    def _bid_error(self, error: ErrorMsg, now: float, feedback: Feedback) -> None:
        assert error.id is not None
        if error.code == ErrorCode.UNAVAILABLE:
            retry = self.bids.unavailable(error.id, now)
            if retry is None:
                return
            bid, retry_at = retry
            if retry_at is not None:
                self.stats.bids_retried += 1
                log.info(
                    "bid %s unavailable (%s); retry %d in %.3f s",
                    bid.id,
                    error.message,
                    bid.retries,
                    retry_at - now,
                )
                return
        else:
            found = self.bids.rejected(error.id)
            if found is None:
                return
            bid = found
        self.stats.bids_rejected += 1
        log.warning("bid %s ended by the server: %s: %s", bid.id, error.code, error.message)
        feedback.events.append(
            Acked(bid.id, False, error.code, None, bid.room, bid.amount, self.region)
        )


def _check_room(room: str) -> None:
    if not is_valid_name(room):
        raise InvalidArgument(f"room must be 1-64 characters of A-Z a-z 0-9 _ . : -, not {room!r}")
