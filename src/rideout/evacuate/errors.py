"""The errors of zone evacuation: one base, :class:`EvacuationError`."""

from __future__ import annotations

from rideout.errors import RideoutError

__all__ = ["EvacuationError", "LedgerError", "ProviderError", "ResourceBusy", "ResourceChanged"]


class EvacuationError(RideoutError):
    """Base of the errors of :mod:`rideout.evacuate`."""


class ProviderError(EvacuationError):
    """A provider could not list, describe or update a resource; the message says which
    and why. Providers translate their dependency's errors (botocore, HTTP) into this, so
    the engine counts the resource as failed and goes on with the others."""


class LedgerError(EvacuationError):
    """The ledger cannot be read or written (a corrupt file, an unreachable table)."""


class ResourceChanged(ProviderError):
    """The resource's subnets were not the ones the engine last read when the provider
    read them again right before writing (or the service refused a conditional write):
    nothing was written. ``now`` holds the subnets read, if known. The engine re-plans
    the resource from a fresh read; it never overwrites a change it has not seen."""

    def __init__(self, message: str, *, now: tuple[str, ...] | None = None) -> None:
        super().__init__(message)
        self.now = now


class ResourceBusy(EvacuationError):
    """Another run holds the resource's lease (one writer per resource) for longer than
    the engine waits: nothing was written to it; run the same command again."""
