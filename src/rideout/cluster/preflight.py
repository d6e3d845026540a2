"""Before anything starts: is every address the local topology needs free?"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

from rideout.cluster.errors import ClusterError
from rideout.config import Config

__all__ = ["PortInUse", "check_ports_free"]


class PortInUse(ClusterError):
    """An address the topology needs is taken by another program."""


@dataclass(frozen=True, slots=True)
class _Endpoint:
    name: str
    address: str
    port: int
    udp: bool = False


def _endpoints(config: Config) -> list[_Endpoint]:
    cp = config.control_plane
    found = [
        _Endpoint("control-plane", cp.address, cp.port),
        _Endpoint("dns", cp.address, cp.dns_port),
        _Endpoint("dns", cp.address, cp.dns_port, udp=True),
        _Endpoint("dns", cp.address, cp.dns_metrics_port),
    ]
    for region in config.regions:
        found.append(_Endpoint(f"redis-{region.name}", region.redis.address, region.redis.port))
        if region.replica is not None:
            found.append(
                _Endpoint(
                    f"redis-{region.name}-replica", region.replica.address, region.replica.port
                )
            )
        found.extend(_Endpoint(f"app-{z.name}", z.address, config.app_port) for z in region.zones)
    return found


def check_ports_free(config: Config) -> None:
    """Raise PortInUse naming the first endpoint some other program already holds."""
    for ep in _endpoints(config):
        with socket.socket(
            socket.AF_INET, socket.SOCK_DGRAM if ep.udp else socket.SOCK_STREAM
        ) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((ep.address, ep.port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise PortInUse(
                        f"{ep.address}:{ep.port}{'/udp' if ep.udp else ''}, needed by {ep.name}, is already in use "
                        "(another rideout with a different data_dir? change the port in "
                        "rideout.toml or with RIDEOUT_APP_PORT / RIDEOUT_CONTROL_PLANE__PORT)"
                    ) from None
                raise ClusterError(
                    f"cannot bind {ep.address}:{ep.port} for {ep.name}: {exc}"
                ) from None
