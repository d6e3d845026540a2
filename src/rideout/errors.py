"""The root of every exception rideout raises.

Each package has one base beneath it (:class:`rideout.store.StoreError`,
:class:`rideout.auth.CredentialError`, :class:`rideout.client.ClientError`, ...), so a
caller can catch everything of one part, or everything of rideout, without catching its
own bugs (docs/errors.md lists them).
Errors about a bad argument or setting also derive from :class:`ValueError` (and, for a
wrong type, :class:`TypeError`), as the standard library's own checks do.
"""

from __future__ import annotations

__all__ = ["InvalidArgument", "InvalidArgumentType", "RideoutError"]


class RideoutError(Exception):
    """Base class of every exception rideout raises on purpose."""


class InvalidArgument(RideoutError, ValueError):
    """An argument or setting has a value rideout cannot use; the message names it."""


class InvalidArgumentType(InvalidArgument, TypeError):
    """An argument or setting has the wrong type (also a :class:`ValueError`, so one
    ``except ValueError`` catches every bad setting)."""
