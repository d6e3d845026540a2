"""`rideout secrets init`: the deployment's shared secrets, made once for every host."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rideout.auth import SigningKey
from rideout.auth.admin import load_or_create_admin_token
from rideout.auth.canary_keys import load_or_create_canary_key
from rideout.auth.resume import load_resume_keys
from rideout.cli._core import ConfigOption, app, console, fail, load
from rideout.errors import RideoutError

__all__ = ["secrets_app"]

secrets_app = typer.Typer(
    rich_markup_mode="markdown",
    help="The deployment's shared secrets (external mode: made once, mounted on every host).",
    no_args_is_help=True,
)
app.add_typer(secrets_app, name="secrets")


@secrets_app.command("init")
def init(
    directory: Annotated[
        Path | None,
        typer.Option("--dir", help="Where to write them (default: the config's keys_dir)."),
    ] = None,
    config_path: ConfigOption = None,
) -> None:
    """Make the signing key, the admin token, the resume key and each region's canary
    key (mode 0600), keeping any that exist. Mount the directory read-only on every
    host: app servers need the signing key, admin token and resume key, canaries the
    signing key and their region's canary key, control planes the admin token and every
    canary key.

    Exit codes: 0 made or already there, 1 a file could not be made, 2 bad config.
    """
    config = load(config_path)
    target = directory if directory is not None else config.keys_dir
    try:
        SigningKey.load_or_create(target)
        load_or_create_admin_token(target)
        load_resume_keys(target, create=True)
        for region in config.regions:
            load_or_create_canary_key(target, region.name)
    except (RideoutError, OSError) as exc:
        fail(str(exc))
    console.print(f"secrets in {target}: signing key, admin token, resume key, canary keys for "
                  f"{', '.join(r.name for r in config.regions)}")  # fmt: skip
