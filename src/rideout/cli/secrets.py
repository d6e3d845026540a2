"""`rideout secrets init`: the deployment's shared secrets, made once for every host."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from rideout.auth import SigningKey
from rideout.auth.admin import ADMIN_TOKEN_FILENAME, load_or_create_admin_token
from rideout.auth.canary_keys import canary_key_path, load_or_create_canary_key
from rideout.auth.keys import KEY_FILENAME
from rideout.auth.resume import load_resume_keys, resume_key_path
from rideout.cli._core import ConfigOption, app, console, err, fail, load
from rideout.config import Config
from rideout.errors import InvalidArgument, RideoutError
from rideout.store.acl import (
    ACL_FILENAME,
    FUNCTIONS_ACL_FILENAME,
    SERVER_CONFIG_FILENAME,
    RedisRole,
    credentials_dir,
    password_file,
)
from rideout.store.pki import hosts_from_config, merge_hosts, parse_redis_host
from rideout.store.tls_files import FileOutcome, RedisSecrets, TlsFiles, ensure_redis_secrets

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
    redis_hosts: Annotated[
        list[str] | None,
        typer.Option(
            "--redis-host",
            metavar="NAME=ADDRESS[,ADDRESS...]",
            help="A Redis server to make a TLS certificate for, with every IP address or "
            "DNS name clients reach it by (repeat for each server). Added to the "
            "config's rediss:// servers.",
        ),
    ] = None,
    config_path: ConfigOption = None,
) -> None:
    """Make every secret an external deployment shares, keeping any file that exists
    (a secret is never replaced): the token signing key, the admin token, the resume
    key, each region's canary key, the Redis ACL users' passwords and ACL files, and the
    TLS material for Redis (a CA, a client certificate for rideout's parts, and a server
    certificate per Redis host). Every file is mode 0600. It ends with which files go to
    which hosts.

    The Redis hosts are the config's `rediss://` servers (each region's Redis, named
    after the region; its in-region replica, `REGION-replica`; the control plane's state
    Redis, `control-plane-state`) and each `--redis-host`; a name given again adds
    addresses. Run it again with a new host to add its certificate (the CA is kept).
    Without a host, no TLS material is made.

    Exit codes: 0 made or already there, 1 a file could not be made or one that is
    there is unfit (named, with what to remove), 2 bad config or option.
    """
    config = load(config_path)
    target = directory if directory is not None else config.keys_dir
    try:
        hosts = merge_hosts(
            [*hosts_from_config(config), *(parse_redis_host(s) for s in redis_hosts or ())]
        )
    except InvalidArgument as exc:
        fail(str(exc), 2)
    if target.exists() and not target.is_dir():
        fail(f"--dir {target}: not a directory", 2)
    before = {path: path.exists() for path in _auth_files(target, config)}
    try:
        SigningKey.load_or_create(target)
        load_or_create_admin_token(target)
        load_resume_keys(target, create=True)
        for region in config.regions:
            load_or_create_canary_key(target, region.name)
        redis = ensure_redis_secrets(target, hosts, datetime.datetime.now(datetime.UTC))
    except (RideoutError, OSError) as exc:
        fail(str(exc))
    made = [FileOutcome(path, "kept" if there else "made") for path, there in before.items()]
    _print_summary(target, config, [*made, *redis.files], redis)
    if redis.problems:
        for problem in redis.problems:
            err.print(f"error: {problem}", style="bold red", soft_wrap=True, highlight=False)
        raise typer.Exit(1)


def _auth_files(directory: Path, config: Config) -> list[Path]:
    return [
        directory / KEY_FILENAME,
        directory / ADMIN_TOKEN_FILENAME,
        resume_key_path(directory),
        *(canary_key_path(directory, region.name) for region in config.regions),
    ]


def _print_summary(
    directory: Path, config: Config, files: list[FileOutcome], redis: RedisSecrets
) -> None:
    def name(path: Path) -> str:
        return str(path.relative_to(directory))

    counts = {state: sum(f.state == state for f in files) for state in ("made", "kept")}
    console.print(
        f"secrets in {directory}: {counts['made']} made, {counts['kept']} kept "
        "(an existing file is never replaced)",
        highlight=False,
    )
    for outcome in files:
        note = f"  ({outcome.note})" if outcome.note else ""
        console.print(f"  {outcome.state:<9} {name(outcome.path)}{note}", highlight=False)

    redis_dir = credentials_dir(directory)
    tls = TlsFiles.of(directory)

    def password(role: RedisRole) -> str:
        return name(password_file(directory, role))

    tls_client = (
        [name(tls.ca[0]), name(tls.client[0]), name(tls.client[1])] if redis.servers else []
    )
    table = Table(title="Which host gets which file (mount only these, read-only)",
                  title_justify="left", show_lines=False, expand=False)  # fmt: skip
    table.add_column("host", no_wrap=True)
    table.add_column("files")
    rows = [
        ("every app server",
         [KEY_FILENAME, ADMIN_TOKEN_FILENAME, name(resume_key_path(directory)),
          password(RedisRole.APP), *tls_client]),
        *((f"the canary of {region.name}",
           [KEY_FILENAME, name(canary_key_path(directory, region.name))])
          for region in config.regions),
        ("every control plane",
         [ADMIN_TOKEN_FILENAME,
          *(name(canary_key_path(directory, r.name)) for r in config.regions),
          password(RedisRole.CONTROLLER), password(RedisRole.MONITOR), *tls_client]),
        ("where `rideout status` runs", [password(RedisRole.MONITOR), *tls_client]),
        *((f"Redis {server.name}\n{', '.join(server.addresses)}\n"
           f"(certificate until {server.valid_until:%Y-%m-%d})",
           [name(tls.ca[0]), name(server.certificate), name(server.key),
            f"{name(redis_dir / FUNCTIONS_ACL_FILENAME)} (Redis 7.0+, Valkey; "
            f"{name(redis_dir / ACL_FILENAME)} on Redis 6.2)",
            name(redis_dir / SERVER_CONFIG_FILENAME)])
          for server in redis.servers),
        ("none: keep with this directory",
         [*([f"{name(tls.ca[1])} (signs a new host's certificate)"] if redis.servers else []),
          f"{password(RedisRole.REPLICATION)} (its password is in "
          f"{name(redis_dir / SERVER_CONFIG_FILENAME)})"]),
    ]  # fmt: skip
    for host, names in rows:
        table.add_row(host, "\n".join(names))
    console.print(table)
    if not redis.servers:
        console.print(
            "no Redis host named, so no TLS material: name each Redis with --redis-host "
            "NAME=ADDRESS, or give the config's regions rediss:// URLs",
            highlight=False,
        )
