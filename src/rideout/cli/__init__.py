"""The `rideout` command: a thin layer over the library.

One module per command group; each registers its commands on :data:`app` when imported
(`_core`: the deployment's own commands; `drill`: game days; `room`: the waiting room;
`evacuate`: zone evacuation and recovery; `aws`: AWS resources; `chaos`: faults on
purpose; `lab`: a deployment in a network lab; `token`: access tokens).
"""

from __future__ import annotations

from rideout.cli import aws as _aws
from rideout.cli import chaos as _chaos
from rideout.cli import drill as _drill
from rideout.cli import evacuate as _evacuate
from rideout.cli import lab as _lab
from rideout.cli import room as _room
from rideout.cli import secrets as _secrets
from rideout.cli import token as _token
from rideout.cli._core import app
from rideout.cli._help import tidy

__all__ = ["app", "main"]

del _aws, _chaos, _drill, _evacuate, _lab, _room, _secrets, _token  # imported for their commands
tidy(app)  # every command is registered: group them, show flags as flags


def main() -> None:
    """Console-script entry point."""
    app()
