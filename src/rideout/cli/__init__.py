"""The `rideout` command: a thin layer over the library.

One module per command group; each registers its commands on :data:`app` when imported
(`_core`: the deployment's own commands; `drill`: game days; `room`: the waiting room).
"""

from __future__ import annotations

from rideout.cli import drill as _drill
from rideout.cli import room as _room
from rideout.cli._core import app

__all__ = ["app", "main"]

del _drill, _room  # imported for their commands


def main() -> None:
    """Console-script entry point."""
    app()
