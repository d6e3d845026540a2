"""Zone evacuation through the control plane (seed 003): pure planning, a ledger, the
engine that carries plans out, and providers (the local deployment; AWS in
``rideout.evacuate.aws``).

The package exports the contract (:mod:`rideout.evacuate.model`) and its errors; the
engine, ledger and providers are imported from their modules. ``rideout evacuate
--provider aws`` calls ``rideout.evacuate.aws.open_aws(config, operator=...)``, which
returns the AWS provider and its ledger.
"""

from __future__ import annotations

from rideout.evacuate.errors import EvacuationError, LedgerError, ProviderError
from rideout.evacuate.model import (
    Ledger,
    Placement,
    Plan,
    Provider,
    Record,
    Step,
    plan_evacuation,
    plan_recovery,
)

__all__ = [
    "EvacuationError",
    "Ledger",
    "LedgerError",
    "Placement",
    "Plan",
    "Provider",
    "ProviderError",
    "Record",
    "Step",
    "plan_evacuation",
    "plan_recovery",
]
