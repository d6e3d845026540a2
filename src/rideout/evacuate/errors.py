"""The errors of zone evacuation: one base, :class:`EvacuationError`."""

from __future__ import annotations

from rideout.errors import RideoutError

__all__ = ["EvacuationError", "LedgerError", "ProviderError"]


class EvacuationError(RideoutError):
    """Base of the errors of :mod:`rideout.evacuate`."""


class ProviderError(EvacuationError):
    """A provider could not list, describe or update a resource; the message says which
    and why. Providers translate their dependency's errors (botocore, HTTP) into this, so
    the engine counts the resource as failed and goes on with the others."""


class LedgerError(EvacuationError):
    """The ledger cannot be read or written (a corrupt file, an unreachable table)."""
