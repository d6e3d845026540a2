"""The deployment's long-running processes, as functions: a zone's app server, a region's
canary, the control plane and the name server.

`rideout serve`, `rideout canary`, `rideout control-plane` and `rideout dns` call these
behind their options. `rideout up` starts its children as ``python -m rideout.processes
NAME ...`` instead: the same functions without the CLI's imports and option parsing,
about 0.3 s of CPU less per process (docs/performance.md, "Starting a deployment").
Each function runs in the foreground until the process is told to stop.

A process that cannot start (a bad configuration, flag value or missing secret) raises
:class:`ProcessSetupError`; both entry points print its message and exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import signal
import socket
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rideout._logging import LOG_FORMATS, LogFormat, configure_logging, log_format
from rideout.auth.admin import ADMIN_TOKEN_FILENAME
from rideout.auth.canary_keys import canary_key_path
from rideout.auth.keys import KEY_FILENAME
from rideout.config import Config, ConfigError, load_config
from rideout.errors import RideoutError
from rideout.store.client import cancel_and_wait

if TYPE_CHECKING:
    from rideout.realtime.app import ZoneExtension
    from rideout.waitingroom.authorizer import RoomAuthorizer

__all__ = [
    "PROCESSES",
    "ProcessSetupError",
    "main",
    "parse_listen",
    "require_secrets",
    "run_canary",
    "run_control_plane",
    "run_dns",
    "run_zone",
    "setup_logging",
    "zone_extensions",
]

PROCESSES = ("serve", "canary", "control-plane", "dns")
"""What ``python -m rideout.processes`` runs: the `rideout` commands of the same names."""


class ProcessSetupError(RideoutError):
    """A process cannot start: a bad configuration, flag value or missing secret (exit 2)."""


def parse_listen(value: str | None, default: tuple[str, int]) -> tuple[str, int]:
    """``HOST:PORT`` (HOST an IP address) as a pair; `default` when not given."""
    if value is None:
        return default
    host, sep, port = value.rpartition(":")
    try:
        ipaddress.ip_address(host)
        number = int(port)
        if not sep or not 0 < number < 65536:
            raise ValueError
    except ValueError:
        raise ProcessSetupError(
            f"--listen {value!r}: expected IP:PORT, such as 0.0.0.0:8000"
        ) from None
    return host, number


def setup_logging(flag: str | None) -> LogFormat:
    """Configure logging as `flag` (or ``$RIDEOUT_LOG_FORMAT``) asks; the format chosen."""
    try:
        fmt = log_format(flag)
    except ValueError:
        raise ProcessSetupError(f"--log-format must be one of {', '.join(LOG_FORMATS)}") from None
    configure_logging(fmt)
    return fmt


def require_secrets(config: Config, part: str, regions: list[str] | None = None) -> None:
    """External mode: the secrets `part` reads must already be in the keys directory.

    Each host mounts the same directory (`rideout secrets init` fills it once); a file
    made on one host alone would differ from every other host's, so none is created
    here. Raises :class:`ProcessSetupError` naming what is missing.
    """
    if config.mode != "external":
        return
    directory = config.keys_dir
    needed: list[Path] = []
    if part in ("serve", "canary", "token"):
        needed.append(directory / KEY_FILENAME)
    if part in ("serve", "control-plane"):
        needed.append(directory / ADMIN_TOKEN_FILENAME)
    if part in ("canary", "control-plane"):
        names = regions if regions is not None else [r.name for r in config.regions]
        needed.extend(canary_key_path(directory, name) for name in names)
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        raise ProcessSetupError(
            f"external mode: {', '.join(missing)} missing; run `rideout secrets init "
            f"--dir {directory}` once and mount that directory on every host "
            "(keys_dir / RIDEOUT_KEYS_DIR)"
        )


async def _nothing() -> None:
    """A drain with nothing to drain: SIGTERM then stops the process with exit 0."""


async def _until_terminated(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` until it ends or SIGTERM/SIGINT arrives (then cancel it and return).

    A cancellation of the caller cancels `work` too, waits for it, and goes on up; the
    signal handlers are the loop's again (removed) once this returns or raises."""
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for signum in signals:
        loop.add_signal_handler(signum, task.cancel)
    try:
        await asyncio.wait({task})
    except asyncio.CancelledError:
        await cancel_and_wait(task)
        raise
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
    if not task.cancelled():
        task.result()  # what `work` raised, if it failed


# --------------------------------------------------------------------------- the processes


def zone_extensions(config: Config) -> tuple[list[ZoneExtension], list[RoomAuthorizer]]:
    """What a zone's app server mounts beside the auction: the waiting room (unless
    ``[waitingroom] enabled = false``), and the room's token authority for the events
    that guard the auction (``[auth] room_events``)."""
    extensions: list[ZoneExtension] = []
    authorities: list[RoomAuthorizer] = []
    if config.waitingroom.enabled:
        from rideout.waitingroom.extension import WaitingRoom

        extensions.append(WaitingRoom(config))
    if config.auth.room_events:
        from rideout.waitingroom.authorizer import RoomAuthorizer

        authorities.append(RoomAuthorizer.from_config(config))
    return extensions, authorities


def run_zone(
    config: Config,
    region: str,
    zone: str,
    *,
    listen: str | None = None,
    drain_timeout: float = 10.0,
    log_format: str | None = None,
) -> None:
    """One zone's app server (``rideout serve``). Call
    :func:`rideout.realtime.zone.hold_mode_signals` before loading `config`."""
    from rideout._serve import ServerLimits
    from rideout._serve import serve as run
    from rideout.realtime.app import create_app, drain_for_exit

    setup_logging(log_format)
    require_secrets(config, "serve")
    extensions, authorities = zone_extensions(config)
    try:
        app = create_app(
            config, region, zone, signals=True, extensions=[*extensions, *authorities],
            authorities=authorities,
        )  # fmt: skip
        address = config.zone(region, zone).address
    except KeyError as exc:
        raise ProcessSetupError(str(exc.args[0])) from None
    host, port = parse_listen(listen, (address, config.app_port))
    run(
        app,
        host,
        port,
        ws_max_size=config.realtime.max_message_size,
        reuse_port=config.realtime.workers > 1,
        limits=ServerLimits.from_config(config),
        # Local mode keeps `rideout up`'s quick stop (it stops every zone at once).
        drain=(lambda: drain_for_exit(app.state.zone)) if config.mode == "external" else None,
        drain_timeout=drain_timeout,
        own_logging=True,
    )


def run_canary(
    config: Config, region: str, *, listen: str | None = None, log_format: str | None = None
) -> None:
    """A region's canary (``rideout canary``): probe its zones, push to the control plane;
    with `listen`, also serve /live, /ready and /metrics there."""
    from rideout.health.canary import Canary, DatapointPublisher

    setup_logging(log_format)
    require_secrets(
        config, "canary", [region] if region in [r.name for r in config.regions] else []
    )
    publishers: list[DatapointPublisher] = []
    if config.aws.publish_metrics:
        try:
            from rideout.aws.metrics import CloudWatchPublisher
        except ImportError as exc:  # boto3 is the aws extra
            raise ProcessSetupError(
                f"aws.publish_metrics: {exc}: install the aws extra (pip install 'rideout[aws]')"
            ) from None
        publishers.append(CloudWatchPublisher(config))
    try:
        probe = Canary(config, region, publishers=publishers)
    except KeyError as exc:
        raise ProcessSetupError(str(exc.args[0])) from None
    if listen is None:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_until_terminated(probe.run()))
        return
    from rideout._serve import ServerLimits
    from rideout._serve import serve as run
    from rideout.health.canary_service import create_canary_app

    host, port = parse_listen(listen, ("127.0.0.1", 0))
    limits = ServerLimits(handshake_timeout=config.timing.handshake_timeout)
    run(create_canary_app(probe), host, port, limits=limits, drain=_nothing, own_logging=True)


def run_control_plane(
    config: Config,
    *,
    dns: bool = True,
    provider: str = "redis",
    listen: str | None = None,
    instance: str | None = None,
    dns_listen: str | None = None,
    log_format: str | None = None,
) -> None:
    """The control plane (``rideout control-plane``); `dns` False publishes the DNS view
    for ``rideout dns`` instead of serving DNS itself."""
    from rideout._serve import ServerLimits
    from rideout._serve import serve as run
    from rideout.cluster.runstate import DNS_VIEW
    from rideout.controlplane.app import create_app
    from rideout.controlplane.runtime import ControlPlane
    from rideout.dns.feed import ViewFile

    if provider not in ("redis", "aws"):
        raise ProcessSetupError(f"--provider must be redis or aws, got {provider!r}")
    managed = None
    if provider == "aws":
        try:
            from rideout.aws import AwsError
            from rideout.aws.writer import ElastiCacheWriter
        except ImportError as exc:  # boto3 is the aws extra
            raise ProcessSetupError(
                f"{exc}: install the aws extra (pip install 'rideout[aws]')"
            ) from None
        try:
            managed = ElastiCacheWriter(config)
        except AwsError as exc:
            raise ProcessSetupError(str(exc)) from None
    setup_logging(log_format)
    require_secrets(config, "control-plane")
    cp = config.control_plane
    host, port = parse_listen(listen, (cp.address, cp.port))
    dns_address = parse_listen(dns_listen, (cp.address, cp.dns_port))
    try:
        runtime = ControlPlane(
            config, dns_feed=None if dns else ViewFile(config.run_dir / DNS_VIEW),
            managed=managed, instance=instance, dns_address=dns_address,
        )  # fmt: skip
    except RideoutError as exc:
        raise ProcessSetupError(str(exc)) from None
    if config.mode == "local":
        # The supervisor of `rideout up` owns the processes: chaos, the inventory and the
        # processes' metrics are its.
        from rideout.cluster.chaos import LocalChaos
        from rideout.cluster.metrics import ProcessMetrics
        from rideout.cluster.status import LocalInventory

        runtime.registry.register(ProcessMetrics(config.run_dir))
        app = create_app(
            config,
            runtime=runtime,
            chaos=LocalChaos(config.run_dir),
            inventory=LocalInventory(config),
        )
    else:
        from rideout.controlplane.inventory import ExternalInventory

        app = create_app(config, runtime=runtime, inventory=ExternalInventory(config))
    limits = ServerLimits(handshake_timeout=config.timing.handshake_timeout)
    drain = _nothing if config.mode == "external" else None
    run(app, host, port, limits=limits, drain=drain, own_logging=True)


def run_dns(config: Config) -> None:
    """The app domain's name server (``rideout dns``), from the view the control plane
    publishes; /metrics and /health on ``control_plane.dns_metrics_port``."""
    import logging

    from rideout._serve import serve as run
    from rideout.cluster.runstate import DNS_VIEW
    from rideout.dns.feed import ViewFile
    from rideout.dns.records import DnsZoneConfig
    from rideout.dns.service import DnsService

    setup_logging(None)  # text, or $RIDEOUT_LOG_FORMAT
    cp = config.control_plane
    service = DnsService(
        DnsZoneConfig.from_config(config),
        ViewFile(config.run_dir / DNS_VIEW),
        cp.address,
        cp.dns_port,
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((cp.address, cp.dns_metrics_port))
    except OSError as exc:  # DNS must not depend on its metrics port
        sock.close()
        logging.getLogger("rideout.dns").warning(
            "cannot serve /metrics on %s:%d (%s): serving DNS without it",
            cp.address, cp.dns_metrics_port, exc,
        )  # fmt: skip
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_until_terminated(service.run()))
        return
    run(service.app(), cp.address, cp.dns_metrics_port, log_level="warning", sock=sock)


# --------------------------------------------------------------------------- python -m


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m rideout.processes",
        description="Run one of the deployment's processes as `rideout up` starts it: the "
        "`rideout` command of the same name, with only the options `up` passes. By hand, "
        "use the `rideout` commands (`rideout serve --help`, ...).",
    )
    names = parser.add_subparsers(
        dest="process", required=True, metavar="{" + ",".join(PROCESSES) + "}"
    )
    config = argparse.ArgumentParser(add_help=False)
    config.add_argument("--config", required=True, type=Path, help="the rideout.toml to read")
    serve = names.add_parser("serve", parents=[config], help="one zone's app server")
    serve.add_argument("--region", required=True)
    serve.add_argument("--zone", required=True)
    canary = names.add_parser("canary", parents=[config], help="one region's canary")
    canary.add_argument("--region", required=True)
    cp = names.add_parser("control-plane", parents=[config], help="the control plane")
    cp.add_argument("--no-dns", dest="dns", action="store_false",
                    help="publish the DNS view for `dns` instead of serving DNS")  # fmt: skip
    names.add_parser("dns", parents=[config], help="the name server")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rideout.processes NAME --config PATH ...``: run it; 2 if it cannot start."""
    args = _parser().parse_args(argv)
    if args.process == "serve":
        # `chaos` may signal this worker before its zone is up.
        from rideout.realtime.zone import hold_mode_signals

        hold_mode_signals()
    try:
        config = load_config(args.config, env=dict(os.environ))
        if args.process == "serve":
            run_zone(config, args.region, args.zone)
        elif args.process == "canary":
            run_canary(config, args.region)
        elif args.process == "control-plane":
            run_control_plane(config, dns=args.dns)
        else:
            run_dns(config)
    except (ConfigError, ProcessSetupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
