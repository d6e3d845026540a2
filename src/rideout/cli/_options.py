"""Options that `serve`, `canary` and `control-plane` share (each on a host of its own)."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["DrainOption", "ListenOption", "LogFormatOption"]

ListenOption = Annotated[
    str | None,
    typer.Option(
        "--listen", metavar="HOST:PORT",
        help="Where this process listens (default: its configured address and port). "
        "Behind a load balancer or in a container, 0.0.0.0:PORT.",
    ),
]  # fmt: skip
LogFormatOption = Annotated[
    str | None,
    typer.Option(
        "--log-format", metavar="text|json",
        help="Log lines as text (default) or one JSON object per line; default from "
        "$RIDEOUT_LOG_FORMAT.",
    ),
]  # fmt: skip
DrainOption = Annotated[
    float,
    typer.Option(
        "--drain-timeout", min=0.0,
        help="External mode, on SIGTERM: seconds to wait for clients to leave (closed "
        "with 1012, new ones refused with 503) before exiting 0.",
    ),
]  # fmt: skip
