"""How ``rideout --help`` reads: the commands grouped by the pattern they serve, and flags
shown as flags (``--json``), not as ``<bool>`` options.

One place, applied once every command module has registered its commands
(:func:`tidy`, called by :mod:`rideout.cli`; :class:`RideoutGroup` for the flags), so a
new command or flag cannot forget it: ``tests/cli/test_help.py`` fails on a command
without a group.
"""

from __future__ import annotations

from typing import Any, Final

import typer
from typer.core import TyperGroup
from typer.models import CommandInfo

__all__ = ["PANELS", "RideoutGroup", "tidy"]

PANELS: Final[dict[str, str]] = {
    # The deployment and its processes.
    "up": "Run the deployment",
    "down": "Run the deployment",
    "status": "Run the deployment",
    "dashboard": "Run the deployment",
    "serve": "Run one part (each on a host of its own)",
    "canary": "Run one part (each on a host of its own)",
    "control-plane": "Run one part (each on a host of its own)",
    "dns": "Run one part (each on a host of its own)",
    # The four patterns (the REST client is a library: rideout.client.http).
    "chaos": "Regional failover: break it, measure it",
    "drill": "Regional failover: break it, measure it",
    "lab": "Regional failover: break it, measure it",
    "evacuate": "Zone evacuation",
    "recover": "Zone evacuation",
    "room": "Waiting room",
    # Set-up.
    "config": "Set-up: configuration, credentials, AWS",
    "token": "Set-up: configuration, credentials, AWS",
    "secrets": "Set-up: configuration, credentials, AWS",
    "aws": "Set-up: configuration, credentials, AWS",
}
"""Each top-level command's group in ``rideout --help``."""


def _command_name(info: CommandInfo) -> str:
    if info.name:
        return info.name
    assert info.callback is not None
    return info.callback.__name__.replace("_", "-")


def _flags_as_flags(command: Any) -> None:
    """Every flag of `command` and its subcommands without the ``<bool>`` typer shows
    (typer's own vendored click classes: told by their ``is_flag``)."""
    for param in command.params:
        if getattr(param, "is_flag", False):
            param.metavar = ""
    make_help = command.get_help_option  # --help is made when asked for

    def help_option(ctx: Any) -> Any:
        option = make_help(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = help_option
    for sub in getattr(command, "commands", {}).values():
        _flags_as_flags(sub)


class RideoutGroup(TyperGroup):
    """The ``rideout`` command: built by typer, with flags shown as flags."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _flags_as_flags(self)


def _walk(group: typer.Typer, *, top: bool) -> None:
    for command in group.registered_commands:
        if top:
            command.rich_help_panel = PANELS.get(_command_name(command))
    for sub in group.registered_groups:
        if top and sub.name:
            sub.rich_help_panel = PANELS.get(sub.name)
        if sub.typer_instance is not None:
            _walk(sub.typer_instance, top=False)


def tidy(app: typer.Typer) -> None:
    """Group `app`'s commands (:data:`PANELS`); `app` is built as a :class:`RideoutGroup`."""
    _walk(app, top=True)
