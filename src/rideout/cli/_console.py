"""Where the `rideout` commands print: tables and lines to stdout, errors to stderr."""

from __future__ import annotations

from rich.console import Console

__all__ = ["console", "err"]

console = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
