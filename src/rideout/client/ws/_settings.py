"""How the WebSocket client watches its connection and reconnects: immutable data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from rideout._validate import count, seconds
from rideout.backoff import DelayPolicy, EqualJitter, FullJitter
from rideout.errors import InvalidArgument, InvalidArgumentType

if TYPE_CHECKING:
    from rideout.config import Config

__all__ = ["DEFAULT_OPEN_TIMEOUT", "ClientSettings"]

DEFAULT_OPEN_TIMEOUT: Final = 10.0
"""Seconds for the opening handshake; :meth:`ClientSettings.from_config` caps it at the
heartbeat timeout."""

_SEED_BACKOFF: Final = FullJitter(2.0, 20.0)  # the seed: min(20 s, 2 s * 2**n), full jitter
_BID_RETRY: Final = EqualJitter(0.25, 2.0)  # bids refused together come back spread


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """How the client watches its connection and reconnects (immutable data).

    The defaults are the seed's values (heartbeat every 30 s, timeout 35 s, two
    failures; backoff ``min(20, 2 * 2**n)`` with full jitter); build them from a rideout
    ``Config`` (seed or fast profile) with :meth:`from_config`.
    """

    heartbeat_interval: float = 30.0
    """Seconds between heartbeats."""
    heartbeat_timeout: float = 35.0
    """Close the connection when nothing at all arrives for this long (> interval)."""
    heartbeat_failures: int = 2
    """Consecutive non-``pong`` heartbeat replies that force a reconnect."""
    backoff: DelayPolicy = _SEED_BACKOFF
    """Delay before reconnect attempt ``n`` (0-based): the seed's full jitter."""
    healthy_after_pongs: int = 2
    """A connection counts as healthy (the attempt counter resets) after this many pongs."""
    healthy_after: float | None = None
    """...or after this many seconds open with a pong and no heartbeat failure (None: off)."""
    max_attempts: int | None = None
    """Give up after this many reconnect attempts without a healthy connection."""
    max_disconnected: float | None = None
    """Give up when no connection has been healthy for this long (seconds)."""
    max_retry_hint: float = 60.0
    """Cap on a ``retry-after`` hint (seconds): a close 1013's, or a refused ``getState``'s."""
    max_queued_bids: int = 100
    """Bids that may await their ack at once (queued, in flight or waiting to retry)."""
    bid_retry: DelayPolicy = _BID_RETRY
    """Delay before re-sending a bid answered ``unavailable`` (retry ``n``, 0-based)."""
    bid_retries: int = 8
    """How many times a bid answered ``unavailable`` is retried before it is rejected."""
    open_timeout: float = DEFAULT_OPEN_TIMEOUT
    """Seconds for TCP connect plus the WebSocket handshake, per address."""
    close_timeout: float = 2.0
    """Seconds to wait for the server's close frame when the client closes."""
    max_message_size: int = 1 << 20
    """Largest incoming message in bytes (a room's state can be large)."""
    compression: Literal["deflate"] | None = None
    """permessage-deflate costs ~33 KB per connection: off unless asked for."""
    path: str = "/ws"
    """The WebSocket endpoint's path."""
    shuffle_addresses: bool = True
    """Try a name's addresses in random order, so that clients spread over its zones
    (False: in the answer's order)."""
    event_buffer: int = 1000
    """Events each :meth:`AuctionClient.events` stream holds before dropping the oldest."""
    resume_tickets: bool = True
    """Ask each connection for a resumption ticket and present it, instead of the token,
    on the next connect (a refused ticket falls back to the token at once)."""

    def __post_init__(self) -> None:
        interval = seconds("heartbeat_interval", self.heartbeat_interval)
        timeout = seconds("heartbeat_timeout", self.heartbeat_timeout)
        if timeout <= interval:
            raise InvalidArgument(
                f"heartbeat_timeout ({timeout:g} s) must be longer than heartbeat_interval "
                f"({interval:g} s), or a quiet connection times out before its first heartbeat"
            )
        object.__setattr__(self, "heartbeat_interval", interval)
        object.__setattr__(self, "heartbeat_timeout", timeout)
        for name in (
            "heartbeat_failures",
            "healthy_after_pongs",
            "max_queued_bids",
            "event_buffer",
            "max_message_size",
        ):
            count(name, getattr(self, name), low=1)
        count("bid_retries", self.bid_retries)
        if self.max_attempts is not None:
            count("max_attempts", self.max_attempts)
        for name in ("healthy_after", "max_disconnected"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, seconds(name, value))
        for name in ("max_retry_hint", "open_timeout", "close_timeout"):
            object.__setattr__(self, name, seconds(name, getattr(self, name)))
        for name in ("backoff", "bid_retry"):
            if not callable(getattr(getattr(self, name), "delay", None)):
                raise InvalidArgumentType(f"{name} must be a rideout.backoff delay policy")
        if self.compression not in (None, "deflate"):
            raise InvalidArgument(
                f"compression must be None or 'deflate', not {self.compression!r}"
            )
        if not isinstance(self.path, str) or not self.path.startswith("/"):
            raise InvalidArgument(f"path must start with '/', not {self.path!r}")
        if not isinstance(self.shuffle_addresses, bool):
            raise InvalidArgumentType(
                f"shuffle_addresses must be a bool, not {type(self.shuffle_addresses).__name__}"
            )

    @classmethod
    def from_config(cls, config: Config, **overrides: Any) -> ClientSettings:
        """Heartbeat and backoff from ``config.timing`` (seed or fast profile), then ``overrides``.

        The opening handshake gets at most the heartbeat timeout: a server that accepts
        the TCP connection but never answers (a frozen process: the kernel still
        completes the handshake) is as dead as a silent connection.
        """
        timing = config.timing
        values: dict[str, Any] = {
            "heartbeat_interval": timing.heartbeat_interval,
            "heartbeat_timeout": timing.heartbeat_timeout,
            "heartbeat_failures": timing.heartbeat_failures,
            "backoff": FullJitter(timing.backoff_base, timing.backoff_cap),
            "open_timeout": min(DEFAULT_OPEN_TIMEOUT, timing.heartbeat_timeout),
        }
        values.update(overrides)
        return cls(**values)
