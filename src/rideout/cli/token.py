"""`rideout token`: mint and revoke access tokens with the deployment's signing key."""

from __future__ import annotations

import asyncio
import math
import re
import sys
import time
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.text import Text

from rideout.auth import KeyFileError
from rideout.cli._core import ConfigOption, app, console, err, fail, load, setup_errors

__all__: list[str] = []

token_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Mint and revoke access tokens with the deployment's signing key.",
    no_args_is_help=True,
)
app.add_typer(token_app, name="token")


@token_app.command("issue")
def token_issue(
    sub: Annotated[str, typer.Option(help="The user the token is for (its `sub` claim).")],
    ttl: Annotated[
        float | None,
        typer.Option(
            help="Seconds the token is valid (default: auth.token_ttl; at most auth.max_token_ttl).",
            min=1,
        ),
    ] = None,
    config_path: ConfigOption = None,
) -> None:
    """Print an access token for SUB that every region's WebSocket API accepts.

    Signed with the deployment's Ed25519 key (DATA_DIR/keys/signing-key.pem, created on
    first use). Connect with ws://ZONE:PORT/ws?token=TOKEN.
    """
    from rideout.auth import SigningKey, TokenIssuer
    from rideout.processes import require_secrets

    config = load(config_path)
    with setup_errors():  # external mode: the deployment's key, never a new one
        require_secrets(config, "token")
    try:
        key = SigningKey.load_or_create(config.keys_dir)
    except KeyFileError as exc:
        fail(str(exc))
    auth = config.auth
    issuer = TokenIssuer(
        key, auth.issuer, auth.audience, auth.token_ttl, max_ttl=auth.max_token_ttl
    )
    try:
        token = issuer.issue(sub, ttl=ttl)
    except ValueError as exc:
        fail(f"cannot issue a token for {sub!r}: {exc}", 2)
    sys.stdout.write(token + "\n")


_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _parse_until(text: str, now: float) -> float:
    """``--until``: a duration from now (``90``, ``15m``, ``2h``, ``7d``) or an ISO 8601
    time with a zone (``2026-12-01T18:00:00Z``)."""
    duration = _DURATION.fullmatch(text.strip())
    if duration:
        return now + float(duration[1]) * _UNITS[duration[2]]
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is neither a duration (90, 15m, 2h, 7d) nor an ISO 8601 time"
        ) from None
    if when.tzinfo is None:
        raise typer.BadParameter(f"{text!r} has no time zone: add Z or an offset like +01:00")
    return when.timestamp()


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


@token_app.command("revoke")
def token_revoke(
    sub: Annotated[
        str | None, typer.Option(help="Revoke every token of this user issued until now.")
    ] = None,
    jti: Annotated[str | None, typer.Option(help="Revoke the one token with this `jti`.")] = None,
    until: Annotated[
        str | None,
        typer.Option(
            help="With --sub: refuse the user's tokens issued before this time (a lock-out "
            "until then). With --jti: refuse the token until then (default: until it has "
            "expired). A duration from now (15m, 2h, 7d) or an ISO 8601 time with a zone."
        ),
    ] = None,
    config_path: ConfigOption = None,
) -> None:
    """Revoke access tokens in every region: open connections close with 1008, new
    handshakes get 403 token_revoked, within about auth.revocation_interval.

    Recorded in the writer region's Redis (replicated to the other region) and kept
    until every token it refuses has expired. Needs the deployment's signing key on
    disk (DATA_DIR/keys/), as `rideout token issue` does.
    """
    from rideout.auth import KEY_FILENAME, SigningKey
    from rideout.auth.revocation import revoke_subject, revoke_token

    if (sub is None) == (jti is None):
        fail("give exactly one of --sub NAME and --jti ID", 2)
    config = load(config_path)
    key_file = config.keys_dir / KEY_FILENAME
    try:
        SigningKey.from_pem(key_file.read_bytes())  # proof of access to the deployment
    except (OSError, ValueError) as exc:
        fail(f"cannot use the deployment's signing key {key_file}: {exc}", 2)
    auth, now = config.auth, time.time()
    try:
        limit = None if until is None else _parse_until(until, now)
        build = revoke_subject if sub is not None else revoke_token
        revocation = build(
            sub or jti or "", now=now, max_ttl=auth.max_token_ttl, leeway=auth.leeway, until=limit
        )
    except (typer.BadParameter, ValueError) as exc:
        fail(f"cannot revoke: {exc}", 2)
    from rideout.store.revocations import NoWriter, record_on_writer

    record = revocation.record()
    try:
        region, epoch, replicas = asyncio.run(
            record_on_writer(
                config, revocation.field, until_ms=record["until"],
                expires_ms=record["expires"], at_ms=record["at"],
                now_ms=math.floor(revocation.at * 1000),
            )
        )  # fmt: skip
    except NoWriter as exc:
        fail(str(exc))
    what = (
        f"tokens of {revocation.value!r} issued before {_utc(revocation.until)}"
        if revocation.kind == "sub"
        else f"the token {revocation.value!r} until {_utc(revocation.until)}"
    )
    console.print(
        f"revoked {what}; recorded in {region} (writer, epoch {epoch}), kept until "
        f"{_utc(revocation.expires)}; app servers apply it within "
        f"{auth.revocation_interval:g} s"
    )
    if replicas < 1:
        err.print(
            Text(
                "warning: the other region's replica has not confirmed it yet: a failover "
                "right now could lose it (run the command again to be sure)",
                style="yellow",
            )
        )
